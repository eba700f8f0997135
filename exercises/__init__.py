"""Exercises: write the backward of tinygrad_tx's ops (and the walk, and Adam) yourself, and
let the engine check them, then train a transformer with them (docs/exercises.md).

    python -m exercises list          the exercises, how long each takes, what it teaches
    python -m exercises check 03      check exercise 03 (exercises/03_sum_mean.py)
    python -m exercises train         train the reverse task with your code
    python -m exercises explore       the explorer on that run, each node showing your op's code

In a notebook (each exercise opens as one through jupytext), `check("03", globals())` checks
the classes its cells defined.
"""
from .catalog import EXERCISES, check

__all__ = ["EXERCISES", "check"]
