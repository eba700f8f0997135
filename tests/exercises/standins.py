"""The engine's own code as a learner's answers: every check must pass it (no check is vacuous).

For an op the engine has (`tx.REGISTRY`), the stand-in is the engine's class itself; Mean, which
the engine composes (`Tensor.mean`: Sum, then a product), gets a class whose backward asks the
engine's walk; the walk's stand-in is `Tensor.backward` as the engine has it, and Adam's the
engine's `optim.Adam`.
"""
from __future__ import annotations

from pathlib import Path

import tinygrad_tx as tx
from exercises.catalog import EXERCISES
from tinygrad_tx import Tensor, optim
from tinygrad_tx.function import Function

ENGINE_BACKWARD = Tensor.backward  # kept before anything replaces it (python -m exercises train does)


class Mean(Function, register=False):
    """y = x.mean(axis);  dx = the engine's gradient of Tensor.mean"""

    def forward(self, x, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims
        return x.mean(axis=axis, keepdims=keepdims)

    def backward(self, g, x):
        t = Tensor(x, requires_grad=True)
        with tx.enable_grad():  # the engine's walk runs backward without recording
            (gx,) = tx.grad(t.mean(self.axis, self.keepdims), [t], grad_output=Tensor(g))
        return (gx.data,)


def walk(root: Tensor, grad) -> None:
    ENGINE_BACKWARD(root, Tensor(grad))


def engine_answers(number: str) -> dict:
    """The stand-in names for exercise `number`'s check."""
    exercise = next(e for e in EXERCISES if e.number == number)
    names = {spec.name: tx.REGISTRY.get(spec.name, Mean) for spec in exercise.ops}
    return {**names, "backward": walk, "Adam": optim.Adam}


def write_engine_answers(folder: Path) -> None:
    """Exercise files in `folder` that answer with the engine's own code (for `train --dir`)."""
    for e in EXERCISES:
        ops = [s.name for s in e.ops if s.name in tx.REGISTRY]
        lines = [f"from tinygrad_tx.ops import {', '.join(ops)}"] if ops else []
        if any(s.name == "Mean" for s in e.ops):
            lines.append("from tests.exercises.standins import Mean")
        if e.special == "walk":
            lines.append("from tests.exercises.standins import walk as backward")
        if e.special == "adam":
            lines.append("from tinygrad_tx.optim import Adam")
        (folder / e.file).write_text("\n".join(lines) + "\n")
