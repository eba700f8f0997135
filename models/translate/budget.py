"""`train --time`: a run bounded by wall time, its schedule stretched to fit.

Users think in minutes, and machines differ in speed: "train for 10 minutes" should give a
slow laptop and a fast desktop each the best model it can make in 10 minutes. So a run with
a time budget measures itself and then chooses its number of steps: its steps up to its
second validation give the seconds a step and a validation take, and the steps
that fit in the time left, up to --steps, become the end of the learning-rate schedule (which
decays to that end, as it would to a --steps given by hand). After each later validation it
times the steps since it last chose and chooses again, a stall left out (a process stopped for a
while, a laptop asleep: the time is gone, but the steps after it are as fast as before; once
counted in, a 12 s stop cut a 40 s run's 1,494 steps to 494). A machine's speed drifts (two
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
import statistics
import time
from typing import Callable, Iterator, NamedTuple

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
START_UP_SHARE = 0.25
"""The most of a budget its start-up may take (Python's start, the imports, reading the corpus and
training its tokenizers, building the model): a budget it would take more of is refused, in one
line, before anything is written (`--time 0.5s` once spent it all before its first step, then
said its best model was kept; the reverse task starts in about 0.6 s on the 2-core AMD machine)."""
STALL = 20
"""How many times the usual a step or a validation must take to count as a stall. A busy machine's
steps wait their turn, time the run does spend: the reverse task at a load of 6 on the 2 cores
had one step in 25 at 5 to 7.5 times the median. A stop of seconds is 50 to 1,000 steps."""

DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?")
"""Hours, minutes, seconds, in that order, each at most once: "1h30m", "2m 30s", "1.5h"."""
MOST_S = 30 * 24 * 3600
"""The longest --time: 30 days. More is not a budget but a typo, and a finite bound keeps every sum and
step count planned from it finite too (10^400 seconds overflowed the plan)."""


def parse_duration(text: str) -> float:
    """"90s", "10m", "1.5h" or "1h30m" -> seconds; anything else (a unit twice, units out of order,
    no unit, zero, more than MOST_S) is a ValueError saying what is wanted."""
    match = DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    parts = [float(n) * unit for n, unit in zip(match.groups(), (3600, 60, 1)) if n] if match else []
    if not parts or not 0 < sum(parts) <= MOST_S:
        raise ValueError(f"--time must be a duration such as 90s, 10m or 1h30m (hours, minutes and seconds, each "
                         f"once), above 0 and at most {MOST_S // 3600}h, not {text!r}")
    return sum(parts)


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

    def check_start_up(self, now: float) -> None:
        """Refuse a budget whose start-up, done `now`, took more than START_UP_SHARE of it."""
        took = now - self.started
        if took > START_UP_SHARE * self.seconds:
            raise ValueError(f"--time {self.seconds:g}s cannot hold this run: its start-up (Python, reading the data, "
                             f"building the model) took {took:.1f} s of it; give it at least "
                             f"{math.ceil(took / START_UP_SHARE)}s")

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
    """The seconds a training step and a validation take, by `clock`: what a budget's plan needs.

    A stall (the process stopped by SIGSTOP, a laptop put to sleep, a neighbour taking the core
    for a while) is not a new speed: a step or a validation that took more than STALL times the
    usual is left out of the timing (the time it took is gone from the budget all the same)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.started = clock, clock()
        self.at: list[tuple[int, float]] = []  # (step, seconds of training so far) after each step
        self.validations: list[float] = []  # the seconds of each
        self.validating_s = 0.0  # of them all

    def stepped(self, step: int) -> None:
        self.at.append((step, self.clock() - self.started - self.validating_s))

    def step_seconds(self, since: int | None = None) -> float:
        """The mean of the steps after step `since`, or by default of the later half of the steps
        so far (the first ones record the jit's traces and take longer than the rest will),
        stalls left out: those above STALL times their median."""
        points = [(self.at[0][0] - 1, 0.0), *self.at]  # from when the timing began
        first = len(points) // 2 if since is None else next(i for i, (s, _) in enumerate(points) if s >= since)
        first = min(first, len(points) - 2)
        took = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(points[first:], points[first + 1:])]
        usual = [s for s in took if s <= STALL * statistics.median(took)]
        return sum(usual) / len(usual)

    def validation_seconds(self) -> float:
        """The longest validation, stalls left out: those above STALL times the shortest."""
        return max(v for v in self.validations if v <= STALL * min(self.validations))

    @contextlib.contextmanager
    def validating(self) -> Iterator[None]:
        begun = self.clock()
        yield
        self.validations.append(self.clock() - begun)
        self.validating_s += self.validations[-1]


class Choice(NamedTuple):
    steps: int  # the run's last step as chosen now; 0: no new choice
    step_s: float  # the seconds a step was timed at for it
    validation_s: float  # and a validation
    time_up: bool  # the training time is over: stop now

    def said(self, s, before: int | None, pairs: int) -> str:
        """What `train` (settings `s`, on `pairs` training pairs) says of the choice: the first
        one, or one that replaces the last step chosen `before`."""
        timed = f"{self.step_s * 1000:.0f} ms a step"
        if before is not None:
            return f"--time {s.time}: {self.steps} steps instead of {before}, re-timed at {timed}"
        epochs = self.steps * s.batch_size / max(1, pairs)
        return (f"--time {s.time}: {self.steps} steps of {s.batch_size} (about {epochs:.0f} epochs), timed at {timed} "
                f"and {self.validation_s:.1f} s a validation")


class Planner:
    """Rank 0's word on a --time budget before each step: it chooses the run's last step when
    the run has timed its steps up to its second validation, or a quarter of its training time
    and a validation, and again after each later validation, from the steps since it last chose."""

    def __init__(self, budget: Budget, timing: Timing, most: int, eval_every: int):
        """`most`: the --steps that bounds every choice."""
        self.budget, self.timing, self.most, self.eval_every = budget, timing, most, eval_every
        self.chosen_at: int | None = None  # the step of the last choice; None: none by this command (resumed)

    def news(self, step: int, steps: int, planned: bool, validate: Callable[[], None]) -> Choice:
        """At `step` of the `steps` chosen so far (if `planned`, else the bound): a new choice, if
        any, and whether the training time is up. `validate()` is called to time a validation
        when a plan is due before the first one."""
        now = self.timing.clock()
        if self.budget.training_over(now):
            return Choice(0, 0.0, 0.0, True)
        if not planned and step > 0:
            due = self.budget.plan_due(now, self.timing.started)
            if due and not self.timing.validations:
                validate()
                now = self.timing.clock()
            if len(self.timing.validations) >= PLAN_AT_VALIDATION or due:
                return self._choose(now, step, self.timing.step_seconds())
        elif self.chosen_at is not None and step % self.eval_every == 0 and step > self.chosen_at:
            choice = self._choose(now, step, self.timing.step_seconds(since=self.chosen_at))
            if abs(choice.steps - steps) >= CHANGE_BY * steps:
                return choice
        return Choice(0, 0.0, 0.0, False)

    def _choose(self, now: float, step: int, step_s: float) -> Choice:
        self.chosen_at = step
        validation_s = self.timing.validation_seconds()
        return Choice(self.budget.steps(now, step, step_s, validation_s, self.eval_every, self.most), step_s,
                      validation_s, False)
