"""How `train` shows its progress: tqdm's bar on a terminal, plain lines in a log file.

tqdm redraws its bar with carriage returns; written to a file (`train ... > log 2>&1`) that
is 140-240 KB of redraws a run, and every message the trainer writes between two redraws
comes with a copy of the bar. So when standard error is not a terminal, `LogLines` takes
tqdm's place: one plain line at each tenth of the run (and at least once a minute). A --time
run's tenths are tenths of its training time until it has chosen its steps, then tenths of
those; a line says each tenth once, however often the run chooses its steps again.
"""
from __future__ import annotations

import sys
import time
from typing import Callable


def progress(total: int | None, initial: int, enabled: bool, until: float | None = None):
    """A context manager with tqdm's `update`, `set_postfix` and `write`, as suits standard error.
    `total` None: not known yet (a --time run before it has timed itself, whose training time
    ends `until`, by time.perf_counter), so no time to go."""
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
    return LogLines(total, initial, enabled, until)


class LogLines:
    """`step 300/3000 (10%): loss 2.181, lr 1.5e-03, tok_s 23169; 0:12 so far, about 1:48 to go`,
    or `step 300 (10% of the training time): ...; 0:12 so far` while the total is not known."""

    EVERY_S = 60.0

    def __init__(self, total: int | None, initial: int, enabled: bool = True, until: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        """`until`: when, by `clock`, a --time run's training time ends (None: no such time)."""
        self.initial, self.n, self.enabled, self.until, self.clock = initial, initial, enabled, until, clock
        self.total = total
        self.postfix: dict[str, str] = {}
        self.postfix_at = initial  # the step the postfix's values were measured at
        self.started = self.last = clock()
        self.tenths = self.tenths_done(self.started)  # those said (or passed before this command began)

    def tenths_done(self, now: float) -> int:
        """How many tenths of the run are done: of its steps, or before they are known, of its training time."""
        if self.total:
            return 10 * self.n // self.total
        if self.until is not None and self.until > self.started:
            return int(10 * (now - self.started) / (self.until - self.started))
        return 0

    def refresh(self) -> None:
        """tqdm redraws its bar here; a log line waits for the next step."""

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def set_postfix(self, **values) -> None:
        self.postfix = {name: str(value) for name, value in values.items()}
        self.postfix_at = self.n

    def write(self, text: str) -> None:
        if self.enabled:
            print(text, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        tenths = self.tenths_done(now)
        if self.enabled and (tenths > self.tenths or now - self.last >= self.EVERY_S):
            self.last, self.tenths = now, max(tenths, self.tenths)
            print(self.line(now - self.started), file=sys.stderr, flush=True)

    def line(self, elapsed: float) -> str:
        values = ", ".join(f"{name} {value}" for name, value in self.postfix.items())
        if values and self.postfix_at != self.n:  # logged every --log-every steps: say when
            values += f" (at step {self.postfix_at})"
        where = f"step {self.n}"
        if self.total:
            where += f"/{self.total} ({100 * self.n // self.total}%)"  # floored, as the tenths are counted
        elif self.until is not None and self.until > self.started:
            where += f" ({int(100 * elapsed / (self.until - self.started))}% of the training time)"
        line = where + (f": {values}" if values else "") + f"; {clock(elapsed)} so far"
        if not self.total:
            return line
        done = self.n - self.initial
        return line + f", about {clock(elapsed / done * (self.total - self.n) if done else 0.0)} to go"


def clock(seconds: float) -> str:
    """125.3 -> "2:05"; 3725 -> "1:02:05"."""
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"
