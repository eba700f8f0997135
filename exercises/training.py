"""`python -m exercises train`: the reverse task, trained with your code.

Every exercise must pass its check first. Then, for the length of the run, your ops take the
places of the engine's ops of the same names, your walk becomes `Tensor.backward`, and your
Adam becomes `optim.Adam`; and `python -m models train --task reverse --no-jit` runs. (`--no-jit`:
`tx.jit` would record one step and replay it with the engine's own walk; run eagerly, every
step goes through yours.)

How an op takes an engine op's place: the engine's modules call ops through module attributes
(`ops.Mul.apply` in Tensor's methods, `Linear.apply` in `F.linear`); `installed` points every
attribute of the engine's and the models' modules that holds the engine's class at yours, and
`tx.REGISTRY`'s entry too (as defining an op class registers it), and puts them all back after.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import Tensor, optim

from .catalog import EXERCISES, FOLDER, check, load

PACKAGES = ("tinygrad_tx", "models")  # whose modules' attributes an installed class replaces


def train(argv: list[str], folder: Path = FOLDER) -> int:
    """Check every exercise, then train with them: `argv` are `python -m models train`'s options
    (the reverse task, in runs/exercises, unless they say otherwise). Returns the exit status."""
    refused = _refused(argv)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    answers = passing(folder)
    if answers is None:
        return 1
    from models.translate.cli import main  # the app, imported only when a run is asked for
    with installed(answers) as lines:
        print(f"training with your code, from {folder}:", *lines, sep="\n  ")
        try:
            main(["train", *_defaults(argv), *argv, "--no-jit", "--processes", "1"])
        except SystemExit as e:
            return int(e.code or 0)
    return 0


def passing(folder: Path) -> dict[str, dict[str, Any]] | None:
    """Every exercise's names (by number) once all pass their checks; else None, after a line on
    standard error that names the first that does not."""
    for exercise in EXERCISES[:-1]:
        if not check(exercise.number, folder=folder):
            print(f"exercise {exercise.number} ({exercise.title}) does not pass its check yet: "
                  f"python -m exercises check {exercise.number} says what is wrong", file=sys.stderr)
            return None
    return {e.number: load(e, folder) for e in EXERCISES[:-1]}


def _refused(argv: list[str]) -> str | None:
    """Why `models train`'s options cannot train with the exercises' code, or None."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--processes", type=int)
    p.add_argument("--members", type=int)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--attention-dropout", type=float)
    p.add_argument("--dropout", type=float)
    known, _ = p.parse_known_args(argv)
    if (known.processes or 1) > 1 or (known.members or 1) > 1:
        return ("--processes and --members start other processes, which would run the engine's code: "
                "the exercises train on one")
    if known.weight_decay:
        return "--weight-decay trains with AdamW, which exercise 10 does not write: leave it out"
    if known.attention_dropout or (known.dropout and known.attention_dropout is None):
        return "exercise 08's Attention has no dropout: add --attention-dropout 0 (the reverse task has none)"
    return None


def _defaults(argv: list[str]) -> list[str]:
    chosen = {a.split("=")[0] for a in argv}
    defaults = [] if chosen & {"--task", "--data"} else ["--task", "reverse"]
    return defaults + ([] if "--out" in chosen else ["--out", "runs/exercises"])


@contextlib.contextmanager
def installed(answers: dict[str, dict[str, Any]]) -> Iterator[list[str]]:
    """The learner's ops, walk and Adam in the engine's places (by exercise number: its file's
    names), until the block ends; yields a line for each thing replaced."""
    undo: list[tuple[Any, str, Any]] = []
    lines = []
    try:
        for exercise in EXERCISES[:-1]:
            names = answers[exercise.number]
            for spec in exercise.ops:
                if spec.name in tx.REGISTRY:  # Mean has no op of its own: Tensor.mean is Sum's
                    _swap(tx.REGISTRY[spec.name], names[spec.name], undo)
                    lines.append(f"{spec.name}, from {exercise.file}")
        _replace(tx.REGISTRY, names_of(answers), undo)
        walk = answers["09"]["backward"]
        undo.append((Tensor, "backward", Tensor.__dict__["backward"]))
        Tensor.backward = as_method(walk)
        lines.append("Tensor.backward: your walk, from 09_walk.py")
        _swap(optim.Adam, answers["10"]["Adam"], undo)
        lines.append("optim.Adam: your update, from 10_adam.py")
        yield lines
    finally:
        for owner, name, value in reversed(undo):
            _set(owner, name, value)


def names_of(answers: dict[str, dict[str, Any]]) -> dict[str, type]:
    """The learner's op classes by name, for the registry."""
    return {spec.name: answers[e.number][spec.name] for e in EXERCISES for spec in e.ops if spec.name in tx.REGISTRY}


def _replace(registry: dict, classes: dict[str, type], undo: list) -> None:
    for name, cls in classes.items():
        undo.append((registry, name, registry[name]))
        registry[name] = cls


def _swap(old: Any, new: Any, undo: list) -> None:
    """Point every attribute of the engine's and the models' modules that holds `old` at `new`."""
    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").split(".")[0] in PACKAGES:
            continue
        for name, value in list(vars(module).items()):
            if value is old:
                undo.append((module, name, old))
                setattr(module, name, new)


def _set(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


def as_method(walk: Callable) -> Callable:
    """`Tensor.backward` that runs the learner's `backward(root, grad)` on raw arrays."""
    def backward(self: Tensor, grad: Any = None, retain_graph: bool = False, create_graph: bool = False) -> None:
        if create_graph:
            raise NotImplementedError("the exercises' walk computes first derivatives only (no create_graph)")
        if grad is None:
            seed = tx.ones(*self.shape, dtype=self.dtype, device=self.device).data  # d root / d root
        else:
            seed = grad.data if isinstance(grad, Tensor) else np.asarray(grad, dtype=self.dtype)
        walk(self, seed)
    return backward
