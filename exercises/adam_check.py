"""The check of exercise 10, Adam's update: the learner's `Adam` against the engine's own
(`optim.Adam`, whose trajectory the engine's tests match to PyTorch's), step by step, and,
at the first step, against the hand-derived truth: m̂ = g and √v̂ = |g|, so every weight moves
by lr·g/(|g| + eps), about lr against its gradient's sign, whatever g's size.

A missing bias correction scales that first step by a known factor ((1 - β1)/√(1 - β2) for
both, 1/√(1 - β2) for v's alone, 1 - β1 for m's alone), which the check recognises.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinygrad_tx import Tensor, optim

from .diagnosis import close, diagnose
from .op_check import Problem, call_learner, check_each
from .report import Report, wrong_value

SHAPES = ((3, 4), (4,))  # a weight matrix and a bias


@dataclass(frozen=True)
class Run:
    what: str
    steps: int
    options: dict = field(default_factory=dict)
    no_decay: bool = False  # the bias (parameter 1) in no_decay


RUNS = (
    Run("one step: each weight moves by lr·g/(|g| + eps), about lr (bias correction)", 1, dict(lr=0.01)),
    Run("five steps with changing gradients", 5, dict(lr=0.01)),
    Run("betas (0.8, 0.9): read self.betas, not the defaults", 3, dict(lr=0.01, betas=(0.8, 0.9))),
    Run("eps 0.1: eps is added after the square root", 3, dict(lr=0.01, eps=0.1)),
    Run("weight_decay 0.1 (Adam's L2: added to the gradient), the bias in no_decay", 3,
        dict(lr=0.01, weight_decay=0.1), no_decay=True),
)


def check_adam(adam: type, report: Report, learner_file: Path | None) -> None:
    """Run the learner's optimizer class `adam` beside the engine's on every run."""
    if not (isinstance(adam, type) and issubclass(adam, optim.Adam)):
        report.fail("Adam", "Adam must be a subclass of tinygrad_tx.optim.Adam that overrides _update")
        return
    check_each(RUNS, lambda run: _check_run(adam, run, learner_file), report)


def _params(rng: np.random.Generator) -> list[Tensor]:
    return [Tensor(rng.standard_normal(shape), requires_grad=True) for shape in SHAPES]


def _optimizer(cls: type, params: list, run: Run) -> optim.Adam:
    return cls(params, no_decay=params[1:] if run.no_decay else (), **run.options)


def _check_run(adam: type, run: Run, learner_file: Path | None) -> None:
    mine, theirs = _params(np.random.default_rng(0)), _params(np.random.default_rng(0))
    learner = call_learner(lambda: _optimizer(adam, mine, run), learner_file, "Adam(...)")
    engine = _optimizer(optim.Adam, theirs, run)
    rng = np.random.default_rng(1)
    for step in range(1, run.steps + 1):
        grads = [rng.standard_normal(shape) for shape in SHAPES]
        before = [p.numpy() for p in mine]
        for p, q, g in zip(mine, theirs, grads):
            p.grad, q.grad = Tensor(g.copy()), Tensor(g.copy())
        call_learner(learner.step, learner_file, "_update")
        engine.step()
        for i, (p, g) in enumerate(zip(mine, grads)):
            if not np.array_equal(p.grad.numpy(), g):
                raise Problem(f"_update changed the gradient of parameter {i} in place: it may be shared with other "
                              "tensors (`a + b` hands both the same array); compute new arrays from it")
        for i, (p, q, old) in enumerate(zip(mine, theirs, before)):
            got, want = p.numpy() - old, q.numpy() - old  # the update Δw of this step
            if step == 1:
                _engine_is_hand_truth(want, grads[i], run)
            d = diagnose(got, want, want.shape, _slips(want, run) if step == 1 else ())
            if d is not None:
                lines = wrong_value(f"parameter {i}", want.shape, d)
                lines[0] = f"step {step}, the update Δw of " + lines[0]
                raise Problem(*lines)


def _slips(want: np.ndarray, run: Run) -> list[tuple[str, np.ndarray]]:
    """At the first step, what an update missing a bias correction gives: `want` times a factor."""
    beta1, beta2 = run.options.get("betas", (0.9, 0.999))
    why = "m and v start at 0, so their early averages are too small by the factor the exercise derives"
    return [(f"both bias corrections are missing ({why}): the first step is (1 - β1)/√(1 - β2) times too large",
             want * (1 - beta1) / math.sqrt(1 - beta2)),
            (f"v's bias correction is missing ({why}): the first step is 1/√(1 - β2) times too large",
             want / math.sqrt(1 - beta2)),
            (f"m's bias correction is missing ({why}): the first step is (1 - β1) times too small",
             want * (1 - beta1)),
            ("the parameter did not change: update the array in place (`param -= step`); `param = param - step` "
             "only gives the name another array", np.zeros_like(want))]


def _engine_is_hand_truth(want: np.ndarray, g: np.ndarray, run: Run) -> None:
    """The engine's first step is -lr·g/(|g| + eps) (with no weight decay): else the check is wrong."""
    if run.options.get("weight_decay"):
        return
    truth = -run.options["lr"] * g / (np.abs(g) + run.options.get("eps", 1e-8))
    if not close(want, truth):
        raise RuntimeError("the engine's Adam does not take the hand-derived first step: please report this")
