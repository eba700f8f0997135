"""What every instrument shares: the engine's observer base and a few array helpers.

An instrument is an observer (`tinygrad_tx.observers.Observer`, exported here as
`Instrument`): a context manager that puts itself on `observers.active` for the length
of a `with` block and overrides the methods of what it wants to see: `forward` after
each op, `backward_begin`/`backward`/`backward_end` around and after each step of a
backward plan, `call` after a replayable call (an optimizer step), `read` when a value
leaves the graph, `collective` for data parallelism's communication. `observers.py`
says what each receives.
"""
from __future__ import annotations

import sys
from typing import Any

from ..observers import ENGINE_DIR, Observer as Instrument, describe
from ..tensor import Tensor

__all__ = ["Instrument", "ENGINE_DIR", "describe", "raw", "norm", "nonfinite", "user_frames"]


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
