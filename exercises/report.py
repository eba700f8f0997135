"""What a check says: a line a case, ✓ or ✗, and under a ✗ the input, the element, the value
expected, the value got and one hint; under a pass, where the engine's own code is."""
from __future__ import annotations

import inspect
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from .diagnosis import Diagnosis

ROOT = Path(__file__).resolve().parents[1]


class Report:
    """The outcome of one exercise's check. `bool(report)` says whether it passed; printed (or
    shown as a notebook cell's value) it is the text."""

    def __init__(self, title: str):
        self.lines = [title]
        self.passed = True

    def ok(self, what: str) -> None:
        self.lines.append(f"  ✓ {what}")

    def fail(self, what: str, *details: str) -> None:
        self.passed = False
        self.lines.append(f"  ✗ {what}")
        self.lines.extend(f"      {line}" for line in details)

    def finish(self, references: Sequence[Any], next_step: str) -> "Report":
        """The last lines: on a pass, where to compare (the engine's own code) and what comes next."""
        if self.passed:
            self.lines.append(f"passed. Compare with the engine's own: {', '.join(map(where, references))}")
            self.lines.append(next_step)
        else:
            self.lines.append("not yet: fix the first ✗ above, then check again")
        return self

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return "\n".join(self.lines)

    __repr__ = __str__


def where(obj: Any) -> str:
    """`path:line (name)` of a class or function, the path relative to the checkout where it is in it."""
    obj = inspect.unwrap(obj)
    path = Path(inspect.getsourcefile(obj)).resolve()
    line = inspect.getsourcelines(obj)[1]
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return f"{shown}:{line} ({obj.__qualname__})"


def wrong_value(name: str, shape: tuple, d: Diagnosis) -> list[str]:
    """The lines under a ✗ for a wrong gradient of `name` ("input b", "leaf 0"): the element,
    expected and got, and the hint."""
    got = f"{d.got:.6g}" if d.got_shape is None else \
        f"an array of shape {d.got_shape} (its first element: {d.got:.6g})"
    return [f"{name} (shape {shape}), element {d.element}: expected {d.expected:.6g}, got {got}", f"hint: {d.hint}"]


def raised(error: BaseException, learner_file: Path | None, what: str) -> list[str]:
    """The lines for an exception from the learner's code: what, where in their file, and the
    error; a NotImplementedError is the starting file's "write me"."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _learners(f.filename, learner_file)]
    place = f" ({_short(frames[-1].filename)}, line {frames[-1].lineno})" if frames else ""
    if isinstance(error, NotImplementedError):
        return [f"{what} is not written yet{place}: {error}"]
    return [f"{what} raised {type(error).__name__}{place}: {error}"]


def _learners(path: str, learner_file: Path | None) -> bool:
    """Whether a frame's file is the learner's: their exercise file, or (classes defined in a
    notebook's cells) any file outside Python, the engine and this package's own modules."""
    p = Path(path).resolve()
    if learner_file is not None:
        return p == learner_file.resolve()
    ours = p.parent == Path(__file__).resolve().parent and not p.name[:1].isdigit()
    return not (ours or p.is_relative_to(ROOT / "tinygrad_tx") or p.is_relative_to(Path(sys.prefix).resolve())
                or p.is_relative_to(Path(sys.base_prefix).resolve()))


def _short(path: str) -> str:
    if "ipykernel_" in path:  # where IPython keeps a cell's code
        return "a notebook cell"
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
