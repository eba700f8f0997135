"""`train --time`: a run bounded by wall time, its schedule stretched to fit.

Users think in minutes, and machines differ in speed: "train for 10 minutes" should give a
slow laptop and a fast desktop each the best model it can make in 10 minutes. So a run with
a time budget measures itself and then chooses its number of steps: its steps up to its
second validation give the seconds a step and a validation take, and the steps
that fit in the time left, up to --steps, become the end of the learning-rate schedule (which
decays to that end, as it would to a --steps given by hand). After each later validation it
times the steps since it last chose and chooses again: a machine's speed drifts (two
ten-minute runs of the same corpus here, both planned at 185-190 ms a step; one kept that
pace, the other's steps ran 7% faster and it ended 95 s early), and a cosine stretched or
shrunk at a validation moves its learning rate by a few percent, where a schedule cut short
never decays or a budget left unused trains nothing. A budget is a bound, not a
target: a corpus's default --steps stops a small corpus once more epochs stop paying. The
choice is saved in every checkpoint, so a resumed run keeps the schedule it chose, whatever
the time then.

The budget covers the whole `train` command, from reading the corpus to the final report;
`FINAL_SHARE` of it is kept for what follows the last step (choosing the decoding on the
validation set, and the report on the test set). Every rank of the job translates a share of
those sentences (sharing.py) with every model of the run, so an ensemble of as many models
as processes (`train --members`, a model each) needs the time of one model on one process,
and half as much again is kept for each model a rank decodes beyond the first (three models
on two processes). If the machine gets slower than measured, training stops at the end of its
share with the model it has (and `--resume` can finish it).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import time
from typing import Callable, Iterator

FINAL_SHARE = 0.1
"""Of the budget, what is kept for choosing the decoding and the final report (on the 18k-pair
Tatoeba list, an ensemble of two on a 2-core AMD EPYC: 29 s for the six tries of the choice and 16 s
for the report, of 600 s; on a 76k-pair list, with 2,000 test sources, the deadline left room for
three tries)."""
EXIT_SHARE = 0.02
"""Of the budget, what the last try of the decoding's choice and the report it makes room for leave
at the end: the report's time is guessed from a validation pass, and after it the processes write
their last lines and exit (a 38k-pair list's run, with none of it kept, ended 6 s past its ten
minutes)."""
PLAN_AT_VALIDATION = 2
"""The run plans at its second validation: the steps before the first still record the jit's
traces of most batch shapes, and timed alone they made a 10-minute plan end 10% early."""
CHANGE_BY = 0.01
"""A later choice that moves the last step by less than this share of it is the clock's noise:
the run keeps its steps (and its log stays quiet)."""
PLAN_BY = 0.25
"""The share of the training time after which the run plans, if that validation has not come."""

UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """"90s", "10m", "1.5h" or "1h30m" -> seconds; anything else is a ValueError saying what is wanted."""
    parts = re.fullmatch(r"\s*((?:\d+(?:\.\d+)?[smh]\s*)+)", text or "")
    seconds = sum(float(n) * UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smh])", text or "")) if parts else 0
    if not seconds > 0:
        raise ValueError(f"--time must be a duration such as 90s, 10m or 1h30m, not {text!r}")
    return seconds


def process_started() -> float:
    """When this process started, by `time.perf_counter`: a budget counts Python's start and the
    imports too. From /proc/self/stat's start time, on Linux; elsewhere, now (the imports, a
    second or two, are then outside the budget)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, in clock ticks after boot
        with open("/proc/uptime") as f:
            age = float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        age = 0.0
    return time.perf_counter() - max(0.0, age)


class Budget:
    """The clock of a run with `seconds` of wall time from `started` (both from `clock`)."""

    def __init__(self, seconds: float, started: float, models: int = 1, processes: int = 1):
        """`models`: how many the final decoding runs (an ensemble's), its sentences shared by
        `processes` ranks: each model a rank decodes beyond the first adds half of FINAL_SHARE."""
        self.seconds, self.started = seconds, started
        final = FINAL_SHARE * max(1.0, (1 + models / processes) / 2)
        self.training_ends = started + seconds * (1 - final)  # then decoding is chosen, and reported

    @property
    def deadline(self) -> float:
        """When the report must be done: EXIT_SHARE of the budget before its end."""
        return self.started + self.seconds * (1 - EXIT_SHARE)

    def plan_due(self, now: float, training_started: float) -> bool:
        """Plan now, even without a validation yet: PLAN_BY of the training time is gone."""
        return now - training_started >= PLAN_BY * (self.training_ends - training_started)

    def steps(self, now: float, step: int, step_s: float, validation_s: float, eval_every: int, most: int) -> int:
        """The last step of the run: `step` plus the steps that fit before the training time ends,
        each taking `step_s` seconds and one in `eval_every` followed by a validation of
        `validation_s` seconds (at least one more step, so the run ends with a validation), and
        at most `most`."""
        per_step = step_s + validation_s / eval_every
        return min(most, step + max(1, math.floor((self.training_ends - now - validation_s) / per_step)))

    def training_over(self, now: float) -> bool:
        return now >= self.training_ends


class Timing:
    """The seconds a training step and a validation take, by `clock`: what a budget's plan needs."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.started = clock, clock()
        self.at: list[tuple[int, float]] = []  # (step, seconds of training so far) after each step
        self.validations: list[float] = []  # the seconds of each
        self.validating_s = 0.0  # of them all

    def stepped(self, step: int) -> None:
        self.at.append((step, self.clock() - self.started - self.validating_s))

    def step_seconds(self, since: int | None = None) -> float:
        """Over the steps after step `since`, or by default the later half of the steps so far:
        the first ones record the jit's traces and take longer than the rest will."""
        first = len(self.at) // 2 if since is None else next(i for i, (s, _) in enumerate(self.at) if s >= since)
        (s0, t0), (s1, t1) = self.at[first], self.at[-1]
        return (t1 - t0) / max(1, s1 - s0)

    def validation_seconds(self) -> float:
        return max(self.validations)

    @contextlib.contextmanager
    def validating(self) -> Iterator[None]:
        begun = self.clock()
        yield
        self.validations.append(self.clock() - begun)
        self.validating_s += self.validations[-1]
