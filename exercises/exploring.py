"""`python -m exercises explore [RUN_DIR]`: the explorer on a run, with your code in the engine's places.

Every exercise must pass its check first. Then your ops, walk and Adam take the engine's places
(`installed`, as for `train`) and `python -m models explore` runs on the run (runs/exercises
unless RUN_DIR says otherwise): the step graph is rebuilt with your ops, so each node's panel
shows your op's docstring, forward and backward, at their lines in your file; the update view's
step is your Adam's, after your walk.

One thing the page needs that a walk of yours cannot give: the walk view steps through the
engine's plan, which the explorer traces as the engine's walk runs it (the order, the routes,
what is summed back, what is released). So each backward here runs your walk, unwatched, then
the engine's walk over the same graph (calling your ops), watched, and compares what the two
gave every leaf: they must agree, or the explorer says where they differ. The leaves keep your
walk's gradients, which the update view's Adam (yours) then steps with.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from tinygrad_tx import Tensor, observers
from tinygrad_tx.inspect.graph import tensors_in_graph

from .catalog import FOLDER
from .training import installed, passing

DEFAULT_RUN = "runs/exercises"  # where `python -m exercises train` writes
RTOL = 1e-4  # float32 sums of a fan-out in another order differ by about 1e-7 of their size


def explore(argv: list[str], folder: Path = FOLDER) -> int:
    """Check every exercise, then serve (or save, --html) the explorer with them installed: `argv`
    are `python -m models explore`'s RUN_DIR and options. Returns the exit status."""
    answers = passing(folder)
    if answers is None:
        return 1
    if not argv or argv[0].startswith("-"):
        argv = [DEFAULT_RUN, *argv]
    from models.translate.cli import main  # the app, imported only when a run is asked for
    engine_walk = Tensor.backward
    with installed(answers) as lines:
        Tensor.backward = beside_the_engines(Tensor.backward, engine_walk)  # installed() puts the engine's back
        print(f"exploring {argv[0]} with your code, from {folder}:", *lines, sep="\n  ")
        try:
            main(["explore", *argv])
        except SystemExit as e:
            return int(e.code or 0)
    return 0


def beside_the_engines(yours: Callable, engines: Callable) -> Callable:
    """`Tensor.backward` that runs your walk, then the engine's over the same graph (for the
    explorer's trace of it), and gives each leaf your walk's gradient once the two agree."""
    def backward(self: Tensor, grad: Any = None, retain_graph: bool = False, create_graph: bool = False) -> None:
        if self.grad_fn is None:  # nothing to walk: the engine's walk says so
            return engines(self, grad, retain_graph, create_graph)
        leaves = [t for t in tensors_in_graph(self) if t.grad_fn is None and t.requires_grad]
        before = [t.grad for t in leaves]
        with unwatched():
            yours(self, grad, retain_graph, create_graph)
        mine = [t.grad for t in leaves]
        for t, g in zip(leaves, before):
            t.grad = g
        engines(self, grad, retain_graph, create_graph)
        for i, (t, g) in enumerate(zip(leaves, mine)):
            _agree(g, t.grad, f"leaf {i} ({t.name or 'unnamed'}, shape {tuple(t.shape)})")
            t.grad = g
    return backward


@contextlib.contextmanager
def unwatched() -> Iterator[None]:
    """The engine's observers (the explorer's trace and profile, the jit's recorder) off for the
    block: what they see of a backward is the engine's walk alone, once."""
    watching = observers.active[:]
    observers.active.clear()
    try:
        yield
    finally:
        observers.active[:] = watching


class WalksDiffer(ValueError):
    """Your walk and the engine's gave a leaf different gradients on the explorer's step (a ValueError:
    `python -m models explore --html` says it in one line, as it says a bad input)."""


def _agree(mine: Tensor | None, engines: Tensor | None, leaf: str) -> None:
    if mine is None or engines is None:
        if mine is not engines:
            got, expected = ("no gradient", "one") if mine is None else ("a gradient", "none")
            raise WalksDiffer(f"your walk (09_walk.py) gave {leaf} {got}; the engine's walk gives it {expected}")
        return
    got, expected = mine.numpy(), engines.numpy()
    if got.shape != expected.shape:
        raise WalksDiffer(f"your walk (09_walk.py) gave {leaf} a gradient of shape {got.shape}; the engine's walk "
                          f"one of shape {expected.shape}")
    error = np.abs(got - expected) - RTOL * np.abs(expected).max()
    if not (error <= 0).all():  # NaN included
        at = tuple(int(i) for i in np.unravel_index(np.argmax(np.nan_to_num(error, nan=np.inf)), error.shape))
        raise WalksDiffer(f"your walk (09_walk.py) gave {leaf} at element {at} {got[at]:.6g}; the engine's walk "
                          f"gives {expected[at]:.6g} (python -m exercises check 09 finds the cause on small graphs)")
