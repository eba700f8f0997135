"""What every instrument shares: the engine's one observation point and a few array helpers.

An instrument is a context manager that puts itself on `observers.active` for the
duration of a `with` block; the engine then shows it what happens through the
`tinygrad_tx.observers` functions, each calling the method of the same name here.
It overrides the methods it needs:

- `forward(fn, inputs, output, seconds, recorded)` after each op's forward
  (`output` is the raw array, `recorded` says whether the node is kept for
  backward; `fn.inputs` is not set yet);
- `backward(fn, grad, grads, seconds)` after each step of the backward plan, with
  what the step sent to each input (summed back to the input's shape);
- `collective(name, seconds)` for the time `DataParallel` spends on its all-reduces.

Five more calls exist for instruments that re-run what they saw (`tx.jit`):
`op(fn, inputs, params, output, recorded)` right after `forward`, with the op's
keyword params; `backward_begin(root, grad, plan, create_graph, inputs)` (the
`BackwardPlan` about to run) and `backward_end()` around each walk; `call(function,
args, kwargs, result)` after a state change outside the graph (functions marked
`observers.replayable`, such as `optimizer.step`); `read(tensor, how)` when a value
leaves the graph (`item()`, `numpy()`, a cast or copy outside ops); `module(m)` when
a module is called; `side_effect(how)` for a change outside ops.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from .. import observers
from ..backward import BackwardPlan
from ..function import Function
from ..tensor import Tensor

ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class Instrument:
    """Base of the instruments: `with Instrument() as it:` observes every op run in the block."""

    def __enter__(self):
        observers.show_side_effect(f"{type(self).__name__} turned on")
        observers.active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        observers.active.remove(self)

    def forward(self, fn: Function, inputs: tuple, output: Any, seconds: float, recorded: bool) -> None:
        """Called after each op's forward."""

    def backward(self, fn: Function, grad: Any, grads: tuple, seconds: float) -> None:
        """Called after each step of the backward plan, with what it sent to each input (None: nothing)."""

    def collective(self, name: str, seconds: float) -> None:
        """Called when data parallelism spent `seconds` in communication (`name`: "all_reduce")."""

    def op(self, fn: Function, inputs: tuple, params: dict, output: Any, recorded: bool) -> None:
        """Called after each op's forward (after `forward`), with the op's keyword params."""

    def backward_begin(self, root: Tensor, grad: Tensor, plan: BackwardPlan, create_graph: bool,
                       inputs: Any) -> None:
        """Called when a backward starts, with the plan it is about to run."""

    def backward_end(self) -> None:
        """Called when that backward has finished (or failed)."""

    def call(self, function: Any, args: tuple, kwargs: dict, result: Any) -> None:
        """Called after a function marked `observers.replayable` (an optimizer step) ran."""

    def stateful(self, obj: Any) -> None:
        """Called when an object with state that replayable calls change (an optimizer) is made."""

    def module(self, module: Any) -> None:
        """Called when a module (`tx.nn.Module`) is called."""

    def read(self, t: Tensor | None, how: str) -> None:
        """Called when a value leaves the graph (`item()`, `numpy()`, a cast outside ops; see `show_read`)."""

    def side_effect(self, how: str) -> None:
        """Called for a change outside ops (`.data` replaced, a hook registered; see `show_side_effect`)."""


def raw(x: Any) -> Any:
    """The array inside a Tensor (gradients are Tensors under create_graph), or `x` itself."""
    return x.data if isinstance(x, Tensor) else x


def norm(x: Any) -> float:
    """The L2 norm of an array or Tensor, computed in float64, as a Python float."""
    a = raw(x).astype("float64")
    return float((a * a).sum().item()) ** 0.5


def nonfinite(x: Any, xp: Any) -> str:
    """"NaN", "Inf" or "NaN and Inf" when a floating array holds such values, else ""."""
    a = raw(x)
    if a.dtype.kind not in "fc" or xp.isfinite(a).all():
        return ""
    return " and ".join(kind for kind, test in (("NaN", xp.isnan), ("Inf", xp.isinf)) if test(a).any())


def user_frames(limit: int = 3) -> list[tuple[str, int, str]]:
    """(file, line, function) of the innermost `limit` frames outside tinygrad_tx: who called the op."""
    frames, frame = [], sys._getframe(1)
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if not code.co_filename.startswith(ENGINE_DIR):
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return frames


def describe(shape: tuple, dtype: Any) -> str:
    """`(3, 4) float32`: how every instrument writes a tensor's type."""
    return f"{tuple(shape)} {dtype}"
