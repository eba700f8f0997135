"""Finding where a NaN or Inf first appears.

    with detect_anomaly():
        loss = model(x)
        loss.backward()

checks every op's output in forward and every gradient in backward, and at the
first NaN or Inf raises `AnomalyError` naming the op, the phase, the shapes and
the line of your code that created the op (the first frame outside
tinygrad_tx), so the line of `x.log()` is named even when the NaN appears
later, in backward. It is slow (every value is checked, every op looks up its
caller) and off by default; off, it costs nothing.
"""
from __future__ import annotations

import linecache
from typing import Any

from ..function import Function
from .instrument import Instrument, describe, nonfinite, raw, user_frames


class AnomalyError(RuntimeError):
    """A NaN or Inf appeared; the message says in which op, phase and line."""


class detect_anomaly(Instrument):
    """Context manager: raise `AnomalyError` at the first NaN or Inf in forward or backward."""

    def forward(self, fn, inputs, params, output, seconds, recorded) -> None:
        fn.created_at = user_frames()
        kind = nonfinite(output, fn.backend.xp)
        if kind:
            made_here = not any(nonfinite(t.data, fn.backend.xp) for t in inputs)
            cause = "its inputs are finite, so this op made it" if made_here else "an input already held it"
            where = f"in its output {describe(output.shape, output.dtype)}; {cause}"
            raise AnomalyError(_report(fn, "forward", kind, where, [t.data for t in inputs]))

    def backward(self, fn, grad, grads, seconds) -> None:
        xp = fn.backend.xp
        kind = nonfinite(grad, xp)
        if kind:
            where = "in the gradient arriving at it, set by a tensor hook or by the gradient given to backward()"
            raise AnomalyError(_report(fn, "backward", kind, where, fn.arrays))
        for i, g in enumerate(grads):
            kind = "" if g is None else nonfinite(g, xp)
            if kind:
                where = f"in the gradient {describe(raw(g).shape, raw(g).dtype)} it computed for input {i}"
                raise AnomalyError(_report(fn, "backward", kind, where, fn.arrays))


def _report(fn: Function, phase: str, kind: str, where: str, arrays: list[Any]) -> str:
    shapes = ", ".join(describe(a.shape, a.dtype) for a in arrays)
    lines = [f"{fn.name} produced {kind} in {phase}: {where}", f"  inputs of {fn.name}: {shapes}"]
    frames = getattr(fn, "created_at", None)
    if not frames:
        return "\n".join(lines + ["  the op was created outside detect_anomaly(): run the forward inside it "
                                  "to learn the line that created it"])
    (file, line, function), *callers = frames
    lines.append(f"  created at {file}:{line} in {function}")
    code = linecache.getline(file, line).strip()
    if code:
        lines.append(f"      {code}")
    return "\n".join(lines + [f"  called from {f}:{n} in {name}" for f, n, name in callers])
