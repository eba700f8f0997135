"""The engine's own code as a learner's answers: every check must pass it (no check is vacuous).

For an op the engine has (`tx.REGISTRY`), the stand-in is the engine's class itself; Mean, which
the engine composes (`Tensor.mean`: Sum, then a product), gets a class whose backward asks the
engine's walk; the walk's stand-in is `Tensor.backward` as the engine has it, and Adam's the
engine's `optim.Adam`.
"""
from __future__ import annotations

from pathlib import Path

import tinygrad_tx as tx
from exercises.catalog import EXERCISES, find, load
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
    """The engine's walk; keeping the graph as a learner's walk does (`exercises explore` walks it again)."""
    ENGINE_BACKWARD(root, Tensor(grad), retain_graph=True)


def engine_answers(number: str) -> dict:
    """The stand-in names for exercise `number`'s check."""
    exercise = next(e for e in EXERCISES if e.number == number)
    names = {spec.name: tx.REGISTRY.get(spec.name, Mean) for spec in exercise.ops}
    return {**names, "backward": walk, "Adam": optim.Adam}


def grafted(number: str, name: str) -> type:
    """Exercise `number`'s class `name` as its starting file has it (the forward the learner
    trains with), its backward the engine's gradient of the engine's op of that name."""
    exercise = find(number)
    cls, engine = load(exercise)[name], tx.REGISTRY[name]

    class Grafted(cls, register=False):
        def forward(self, *arrays, **params):
            self.params = params
            return super().forward(*arrays, **params)

        def backward(self, g, *arrays):
            leaves = [Tensor(a, requires_grad=wanted) for a, wanted in zip(arrays, self.needs_grad)]
            with tx.enable_grad():  # the walk runs backward without recording
                out = engine.apply(*leaves, **self.params)
            grads = iter(tx.grad(out, [t for t in leaves if t.requires_grad], grad_output=Tensor(g)))
            return tuple(next(grads).data if t.requires_grad else None for t in leaves)

    Grafted.__name__ = Grafted.__qualname__ = name
    return Grafted


def write_engine_answers(folder: Path, graft: bool = False) -> None:
    """Exercise files in `folder` that answer with the engine's own code (for `train --dir`); with
    `graft`, each op keeps its exercise's forward and takes the engine's gradient (`grafted`)."""
    for e in EXERCISES:
        ops = [s.name for s in e.ops if s.name in tx.REGISTRY]
        if graft:
            lines = ["from tests.exercises.standins import grafted"] * bool(ops)
            lines += [f"{name} = grafted({e.number!r}, {name!r})" for name in ops]
        else:
            lines = [f"from tinygrad_tx.ops import {', '.join(ops)}"] if ops else []
        if any(s.name == "Mean" for s in e.ops):
            lines.append("from tests.exercises.standins import Mean")
        if e.special == "walk":
            lines.append("from tests.exercises.standins import walk as backward")
        if e.special == "adam":
            lines.append("from tinygrad_tx.optim import Adam")
        (folder / e.file).write_text("\n".join(lines) + "\n")
