"""Where the time and the memory of a step go, op by op.

    with profile() as p:
        loss = model(src, tgt_in)
        loss.backward()
    print(p.table())

Per op: how many times it ran, its forward and backward time, and the bytes its
nodes hold for backward: the input arrays and the arrays an op saves on itself
(declared in the op's `saved`), which stay alive until backward releases the graph. That is
the memory a step needs beyond the parameters, and where a fused op pays off.

A step spends time outside its ops too: each replayable call (`SGD.step()`,
`clip_grad_norm()`, a schedule's step, a collective) gets a row of its own, its time
counted in `total` only. And the table ends with the values read outside the graph
(`loss.item()`, `print(t)`, `if t:`), counted in `reads`.

Times are the host's: on CUDA, kernels run asynchronously, so an op's time is
mostly its launch, and the wait shows up in whichever op synchronises next, or in
the host read that waits for the device: the count of reads says how often a step waits.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from ..function import Function
from .instrument import Instrument

@dataclass
class OpStats:
    calls: int = 0
    forward_s: float = 0.0
    backward_calls: int = 0
    backward_s: float = 0.0
    held_bytes: int = 0
    call_s: float = 0.0  # a replayable call's time (a row of its own: `SGD.step()`)

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.call_s


class profile(Instrument):
    """Context manager collecting `OpStats` per op name in `.stats`; `table()` shows them."""

    def __init__(self):
        self.stats: defaultdict[str, OpStats] = defaultdict(OpStats)
        self.reads: Counter[str] = Counter()  # how a value left the graph -> how often

    def forward(self, fn, inputs, params, output, seconds, recorded) -> None:
        stats = self.stats[fn.name]
        stats.calls += 1
        stats.forward_s += seconds
        if recorded:
            stats.held_bytes += held_bytes(fn, [t.data for t in inputs])

    def backward(self, fn, grad, grads, seconds) -> None:
        stats = self.stats[fn.name]
        stats.backward_calls += 1
        stats.backward_s += seconds

    def call(self, function: Callable, args: tuple, kwargs: dict, result: Any, seconds: float) -> None:
        stats = self.stats[_call_name(function, args)]
        stats.calls += 1
        stats.call_s += seconds

    def read(self, t: Any, how: str) -> None:
        self.reads[how] += 1

    def collective(self, name: str, seconds: float) -> None:
        """One call per step; communication happens during backward, so it counts as backward time."""
        stats = self.stats[name]
        stats.calls += 1
        stats.backward_calls += 1
        stats.backward_s += seconds

    def table(self, limit: int | None = None) -> str:
        """One row per op, the most expensive first, and a total."""
        rows = sorted(self.stats.items(), key=lambda item: item[1].total_s, reverse=True)
        total = OpStats(*(sum(getattr(s, f) for _, s in rows) for f in OpStats.__dataclass_fields__))
        lines = [f"{'op':<16}{'calls':>7}{'forward ms':>12}{'backward ms':>13}{'total ms':>10}{'held for backward':>19}"]
        lines += [_row(name, stats) for name, stats in rows[:limit]]
        lines.append(_row("total", total))
        if self.reads:
            lines.append("values read outside the graph: " + ", ".join(f"{how} ×{n}" for how, n in self.reads.items()))
        return "\n".join(lines)

    __str__ = table


def _call_name(function: Callable, args: tuple) -> str:
    """`SGD.step()` for a method (named by its object's class), `clip_grad_norm()` for a function."""
    owner = function.__qualname__.rpartition(".")[0]
    if owner and not owner.endswith("<locals>") and args:
        return f"{type(args[0]).__name__}.{function.__name__}()"
    return f"{function.__name__}()"


def held_bytes(fn: Function, arrays: list) -> int:
    """Bytes of the distinct arrays a node keeps: its inputs' and those it declares in `saved`."""
    saved = list(fn.saved_values().values())
    saved += [item for v in saved if isinstance(v, tuple) for item in v]  # e.g. an index of arrays
    distinct = {id(a): a for a in arrays + saved if hasattr(a, "nbytes") and hasattr(a, "dtype")}
    return sum(int(a.nbytes) for a in distinct.values())


def _row(name: str, s: OpStats) -> str:
    return (f"{name:<16}{s.calls:>7}{s.forward_s * 1e3:>12.3f}{s.backward_s * 1e3:>13.3f}"
            f"{s.total_s * 1e3:>10.3f}{_bytes(s.held_bytes):>19}")


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
