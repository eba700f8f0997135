"""What the program reads: every number (and setting) checked once, where it is read.

A value comes from a flag's text (`Rule.flag`, argparse's `type=`) or from a run's files
(`Rule.check`, on a value JSON gave back). Both ask the one `Rule` of that setting: the right
type (a whole number is never a bool or a float; a number is finite, never NaN or infinity)
and a range that makes sense, so that a setting is refused in one line naming it before it
can turn into a silently wrong result (a length penalty of NaN scored 0%) or a traceback
deep inside (a beam of 10^7, 10^400 seconds). Ranges are finite: a number too large to be
meant is refused as surely as a negative one.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Rule:
    """The values a setting accepts (`holds`, never raising, whatever the value's type), how an
    error says so (`wanted`), and how a flag's text becomes a value (`read`)."""
    holds: Callable[[Any], bool]
    wanted: str
    read: Callable[[str], Any] = str

    def check(self, value: Any, name: str) -> Any:
        """`value`, or a ValueError saying what `name` must be."""
        if not self.holds(value):
            raise ValueError(f"{name} must be {self.wanted}, not {shown(value)}")
        return value

    def flag(self, text: str) -> Any:
        """argparse's `type=`: the value of a flag's text, or argparse's error naming the flag."""
        try:
            value = self.read(text)
        except (ValueError, OverflowError):  # int('1.5'), float('x'), int() of over 4300 digits
            value = None
        if value is None or not self.holds(value):
            raise argparse.ArgumentTypeError(f"must be {self.wanted}, not {shown(text)}")
        return value


def shown(value: Any) -> str:
    """A value as an error shows it, cut short: a 400-digit number is one line."""
    if isinstance(value, int) and value.bit_length() > 128:  # repr() refuses past 4300 digits
        return f"a whole number of about {value.bit_length() * math.log10(2):.0f} digits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def is_number(value: Any) -> bool:
    """A finite int or float (JSON's numbers), not a bool (an int of any size is finite: never ask
    math.isfinite, which cannot take one of 400 digits)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def plain(x: float) -> str:
    """1000000 -> "1000000", 0.5 -> "0.5": a bound as a person writes it (no "1e+06")."""
    return f"{x:.15g}"


def whole(low: int, high: int, why: str = "") -> Rule:
    """A whole number from `low` to `high`; `why` says where the bound comes from."""
    return Rule(lambda v: is_number(v) and isinstance(v, int) and low <= v <= high,
                f"a whole number from {low:,} to {high:,}{why}", int)


def number(low: float, high: float, *, above: bool = False, below: bool = False) -> Rule:
    """A finite number from `low` to `high`: `above` excludes `low` itself, `below` excludes `high`."""
    def holds(v: Any) -> bool:
        return is_number(v) and (v > low if above else v >= low) and (v < high if below else v <= high)
    return Rule(holds, f"a number in {'(' if above else '['}{plain(low)}, {plain(high)}{')' if below else ']'}", float)


def one_of(values: tuple) -> Rule:
    return Rule(lambda v: isinstance(v, str) and v in values, f"one of {', '.join(values)}")


def maybe(rule: Rule) -> Rule:
    """`rule`, or None: not given, another setting decides (say, --dropout)."""
    return Rule(lambda v: v is None or rule.holds(v), rule.wanted, rule.read)


SWITCH = Rule(lambda v: isinstance(v, bool), "true or false")
TEXT = Rule(lambda v: isinstance(v, str), "text")


def cores() -> int:
    """The cores this process may run on (its affinity: a container's or `taskset`'s share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def threads_rule() -> Rule:
    """--threads: one to this machine's cores (more BLAS threads than cores only take turns)."""
    return whole(1, cores(), " (the cores this process may run on)")


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a refused command line is one line, as every other error is."""

    def error(self, message: str) -> None:
        # "argument --beam: must be ..." -> "--beam must be ...", as a run.json's setting is said
        message = re.sub(r"^argument (\S+): must be ", r"\1 must be ", message)
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


MEMBER_COUNTS = whole(1, 64)
"""A run's models (train --members, run.json's members, --model): loose, since evaluate loads them all
in one process; `train` also bounds the processes it starts by the machine's cores (cli.py)."""
