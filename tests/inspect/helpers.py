"""Graphs the instruments' tests look at (`no_observer_left` is in tests/helpers.py)."""
import sys

from ..helpers import leaf


def next_line() -> int:
    """The number of the caller's next line: where the op under test is created."""
    return sys._getframe(1).f_lineno + 1


def small_graph(device="cpu"):
    """A graph with a diamond, a leaf used three times and an intermediate used twice."""
    x = leaf([[0.5, -1.0], [2.0, 0.25]], device, name="x")
    w = leaf([[1.0, 0.5], [-0.5, 2.0]], device, name="w")
    h = (x @ w + x).tanh()  # x used twice here
    y = (h * h + h * x.exp()).sum()  # h used three times, x a third time
    return x, w, h, y


def chain(x, w, n_ops):
    """The benchmark's chain: n_ops ops of (mul, add, tanh), then a sum."""
    y = x
    for _ in range(n_ops // 3):
        y = (y * w + x).tanh()
    return y.sum()
