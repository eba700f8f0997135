"""The exercises, in order, and `check`: load what the learner wrote, run the exercise's checks.

Each exercise is a file of this folder (`01_mul.py` ...) that the learner edits; its number
names it (`check("03")`). The checks never read an answer from anywhere: they compare with
finite differences and with the engine's own code, which a pass links to.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import tinygrad_tx as tx
from tinygrad_tx import optim

from . import op_cases as cases
from .adam_check import check_adam
from .op_check import OpSpec, check_op
from .report import Report
from .walk_check import check_walk

FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Exercise:
    number: str
    file: str
    title: str
    minutes: int
    teaches: str
    ops: tuple[OpSpec, ...] = ()
    special: str = ""  # "walk", "adam" or "all": an exercise that is not ops

    @property
    def names(self) -> tuple[str, ...]:
        """What the learner's file must define for the check."""
        special = {"walk": ("backward",), "adam": ("Adam",), "all": ()}
        return special[self.special] if self.special else tuple(s.name for s in self.ops)


EXERCISES = (
    Exercise("01", "01_mul.py", "an elementwise op: Mul", 15,
             "the op pattern (forward saves, backward returns one gradient per input), the chain rule "
             "for a product, needs_grad, fan-out", (cases.MUL,)),
    Exercise("02", "02_broadcast.py", "broadcasting: Add", 15,
             "why a broadcast input's gradient is summed back (each element was used once per copy)", (cases.ADD,)),
    Exercise("03", "03_sum_mean.py", "Sum and Mean over axes", 20,
             "a reduction's gradient is a broadcast (the mirror image of 02), keepdims, mean's 1/n",
             (cases.SUM, cases.MEAN)),
    Exercise("04", "04_matmul.py", "MatMul and Linear", 25,
             "the gradients of a matrix product, found with the shapes; batch axes summed back; the layer every "
             "model repeats",
             (cases.MATMUL, cases.LINEAR)),
    Exercise("05", "05_softmax.py", "Softmax", 25,
             "a Jacobian with off-diagonal terms (the row term), and why a check against .sum() passes a wrong one",
             (cases.SOFTMAX,)),
    Exercise("06", "06_layer_norm.py", "LayerNorm", 40,
             "a gradient through a mean and a variance of the same row; three inputs, two summed over rows",
             (cases.LAYER_NORM,)),
    Exercise("07", "07_cross_entropy.py", "CrossEntropy with padding and label smoothing", 35,
             "why the loss is fused with log-softmax (their gradients cancel to something short); "
             "ignored rows; a mean over the rows kept", (cases.CROSS_ENTROPY,)),
    Exercise("08", "08_attention.py", "Attention with a mask", 45,
             "four products and a softmax, masked: every earlier exercise at once; a fully masked row",
             (cases.ATTENTION,)),
    Exercise("09", "09_walk.py", "the walk: backward itself", 45,
             "topological order, fan-out accumulation, broadcasts summed back, leaves' .grad", special="walk"),
    Exercise("10", "10_adam.py", "Adam's update", 20,
             "running means of g and g², bias correction, eps outside the root, L2 weight decay", special="adam"),
    Exercise("11", "11_train.py", "train the reverse task with your code", 10,
             "your ops, walk and Adam train a transformer to >= 99% held-out exact match", special="all"),
)


def find(number: str) -> Exercise:
    """The exercise numbered `number` ("3", "03" and "03_sum_mean.py" all name the third)."""
    key = str(number).split("_")[0].removesuffix(".py").zfill(2)
    for exercise in EXERCISES:
        if exercise.number == key:
            return exercise
    raise ValueError(f"no exercise {number!r}: they are numbered {EXERCISES[0].number} to {EXERCISES[-1].number}")


def load(exercise: Exercise, folder: Path = FOLDER) -> dict[str, Any]:
    """Run the learner's file of `exercise` from `folder`; its names. Its classes register in
    `tx.REGISTRY` as any op does; the engine's own entries are put back afterwards, so loading
    an exercise never changes which ops the engine's test suite enumerates."""
    path = Path(folder) / exercise.file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such exercise file (--dir names the folder that holds your exercises)")
    spec = importlib.util.spec_from_file_location(f"exercises.learner_{exercise.number}", path)
    module = importlib.util.module_from_spec(spec)
    registered = dict(tx.REGISTRY)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what its cells print is for the notebook
            spec.loader.exec_module(module)
    finally:
        tx.REGISTRY.clear()
        tx.REGISTRY.update(registered)
    return vars(module)


def check(number: str, answers: Mapping[str, Any] | None = None, folder: Path | str = FOLDER) -> Report:
    """Check exercise `number`: the learner's file in `folder`, or the names in `answers` (a
    notebook's `globals()`). Returns the report: printed, it says what passed and what did not."""
    exercise = find(number)
    report = Report(f"exercise {exercise.number}: {exercise.title}")
    path = Path(folder) / exercise.file
    learner_file = path if answers is None else None  # a notebook's classes live in its cells
    if answers is None:
        try:
            answers = load(exercise, Path(folder))
        except Exception as e:  # noqa: BLE001 - a learner's file that does not run: said in one line
            report.fail(f"{path.name} does not run", f"{type(e).__name__}: {e}")
            return report.finish((), "")
    for name in exercise.names:
        if name not in answers:
            report.fail(f"{exercise.file} defines no {name}")
            return report.finish((), "")
    if exercise.special == "all":
        return _check_all(report, Path(folder))
    run: dict[str, Callable] = {
        "walk": lambda: check_walk(answers["backward"], report, learner_file),
        "adam": lambda: check_adam(answers["Adam"], report, learner_file)}
    if exercise.special:
        run[exercise.special]()
    for spec in exercise.ops:
        if report.passed:
            check_op(spec, answers[spec.name], report, learner_file)
    return report.finish(_references(exercise), _next(exercise))


def _references(exercise: Exercise) -> list:
    """The engine's own code that a pass links to."""
    if exercise.special == "walk":
        return [tx.backward_plan]
    if exercise.special == "adam":
        return [optim.Adam._update]
    return [spec.link() for spec in exercise.ops]


def _next(exercise: Exercise) -> str:
    later = EXERCISES[EXERCISES.index(exercise) + 1]
    return f"next: exercises/{later.file} ({later.title}, about {later.minutes} minutes)"


def _check_all(report: Report, folder: Path) -> Report:
    """Exercise 11's check: every earlier exercise passes, a line each."""
    for exercise in EXERCISES[:-1]:
        done = check(exercise.number, folder=folder)
        if done:
            report.ok(f"{exercise.number}: {exercise.title}")
        else:
            first = next(i for i, line in enumerate(done.lines) if line.lstrip().startswith("✗"))
            why = done.lines[first + 1].strip() if first + 1 < len(done.lines) else done.lines[first].strip()
            report.fail(f"{exercise.number}: {exercise.title}", why,
                        f"python -m exercises check {exercise.number} says more")
    if report.passed:
        report.lines.append("every exercise passes: train with them, python -m exercises train")
    else:
        report.lines.append("not yet: train once every exercise passes")
    return report
