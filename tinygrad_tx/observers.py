"""Who watches the engine, and what the engine tells them.

An observer (`tx.inspect`'s profiler, trace and anomaly finder, the explorer, `tx.jit`'s
recorder) is an `Observer` on the list `active` for the length of a `with` block. The engine
tells every observer the same six things, through the `show_*` functions and `replayable`
below, each calling the `Observer` method of the same name:

- `forward`: an op ran forward (the profiler times it, the anomaly finder checks its output,
  `record_modules` notes the module call it ran in, the jit records it with its params);
- `backward_begin` ... `backward_end` around a walk, with its plan, and `backward` after each
  step (the trace follows the plan, the profiler times each step, the anomaly finder checks
  the gradients, the jit keeps the plan);
- `call`: a replayable call (an optimizer's step, a schedule's, seeding, a collective) ran, in
  how many seconds (the profiler times it, the jit makes it again at each replay);
- `read`: a value left the graph (read on the host, or cast or copied outside ops; the
  profiler counts them: on CUDA a host read waits for the device; the jit refuses them);
- `collective`: data parallelism spent time communicating during backward (the profiler);
- `changed`: state changed outside ops and replayable calls, where that is rare: a hook
  registered on a leaf, an observer turned on (the jit refuses it: a replay would not do it
  again).

What only the jit needs to see while it records on paths too hot to announce (writes to
`.data` and `.grad`, attributes of optimizers set), and the modules called (which `nn` does
not announce), it watches itself, from `tinygrad_tx/jit/watch.py`, only while a recording
runs (its opening says why); the host generator's draws its recorder checks itself.

With no observer on, `active` is empty and costs next to nothing: the two hot paths, an op's
forward and a backward step, check `if observers.active:` once; the rarer announcements
(a read, a replayable call, a change) go through the same list.

This module imports nothing from the engine, so every layer, the backend included, may
announce through it.
"""
from __future__ import annotations

import functools
import os
from time import perf_counter
from typing import Any, Callable

ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Where the engine's files are: a frame outside it is the user's (`inspect.user_frames`, the jit)."""

active: list["Observer"] = []
"""The observers now watching, innermost last; empty unless an observer is on."""


class Observer:
    """Base of the observers: `with observer:` puts it on `active` for the block. A subclass
    overrides the methods of what it wants to see; each is called by the `show_*` function
    (or `replayable`) of the same name."""

    def __enter__(self):
        show_changed(f"{type(self).__name__} turned on")  # to those already on: a jit recording refuses it
        active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        active.remove(self)

    def forward(self, fn: Any, inputs: tuple, params: dict, output: Any, seconds: float, recorded: bool) -> None:
        """After an op's forward: the op (`fn`, a Function; `fn.inputs` is not set yet), its input
        Tensors, its keyword params, its output array, the seconds forward took, and whether its
        node is kept for backward."""

    def backward_begin(self, root: Any, grad: Any, plan: Any, create_graph: bool, targets: Any) -> None:
        """Before a walk from `root` (gradient `grad`) runs `plan` (the engine's `Plan`, backward.py;
        `BackwardPlan.of(plan)` reads it step by step); `targets`: `tx.grad`'s tensors, else None."""

    def backward(self, fn: Any, grad: Any, grads: list, seconds: float) -> None:
        """After a step of the plan ran `fn.backward(grad, ...)` in `seconds`; `grads`: what it
        returned for each input it sends to (None for the others), before a broadcast is summed
        back to the input's shape (the plan's route says where: `sum_to`)."""

    def backward_end(self) -> None:
        """After the walk announced by `backward_begin` finished (or failed)."""

    def call(self, function: Callable, args: tuple, kwargs: dict, result: Any, seconds: float) -> None:
        """After a call of a function marked `replayable` (an optimizer's `step`), which took `seconds`."""

    def read(self, t: Any, how: str) -> None:
        """When the value of the Tensor `t` leaves the graph (`how`: read on the host by `item()`,
        `numpy()`, `if t:` or printing; cast or copied outside ops)."""

    def collective(self, name: str, seconds: float) -> None:
        """When data parallelism spent `seconds` communicating (`name`: "all_reduce")."""

    def changed(self, how: str) -> None:
        """When state changed outside ops and replayable calls (`how`: "a hook registered on a
        tensor of shape (2, 2)", "profile turned on")."""


def show_forward(fn: Any, inputs: tuple, params: dict, output: Any, seconds: float, recorded: bool) -> None:
    for observer in tuple(active):
        observer.forward(fn, inputs, params, output, seconds, recorded)


def show_backward_begin(root: Any, grad: Any, plan: Any, create_graph: bool, targets: Any) -> None:
    for observer in tuple(active):
        observer.backward_begin(root, grad, plan, create_graph, targets)


def show_backward(fn: Any, grad: Any, grads: list, seconds: float) -> None:
    for observer in tuple(active):
        observer.backward(fn, grad, grads, seconds)


def show_backward_end() -> None:
    for observer in tuple(active):
        observer.backward_end()


def show_read(t: Any, how: str) -> None:
    for observer in tuple(active):
        observer.read(t, how)


def show_collective(name: str, seconds: float) -> None:
    for observer in tuple(active):
        observer.collective(name, seconds)


def show_changed(how: str) -> None:
    for observer in tuple(active):
        observer.changed(how)


def replayable(function: Callable) -> Callable:
    """Mark a function that changes state outside the graph, on raw arrays (an optimizer's
    `step` and `zero_grad`, `clip_grad_norm`, a schedule's `step`, seeding, a collective), so
    that observers see each call, timed (`Observer.call`): the profiler shows where a step's
    time goes besides its ops, and `tx.jit` makes the call again at each replay. (A marker at
    the definition, because such functions are also imported by name, which no observer could
    intercept.)"""

    @functools.wraps(function)
    def announced(*args, **kwargs):
        if not active:
            return function(*args, **kwargs)
        start = perf_counter()
        result = function(*args, **kwargs)
        seconds = perf_counter() - start
        for observer in tuple(active):
            observer.call(function, args, kwargs, result, seconds)
        return result

    return announced


def describe(shape: tuple, dtype: Any) -> str:
    """`(3, 4) float32`: how every observer writes a tensor's type."""
    return f"{tuple(shape)} {dtype}"
