"""Checkpoint averaging: the final model may be the mean of the weights at the last few validations.

Late in a decaying schedule the weights still wander around a minimum from batch to
batch; their mean tends to sit nearer its centre and often translates better than any
one of them (Vaswani et al. average the last 5 or 20 checkpoints).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from tinygrad_tx import nn


@contextlib.contextmanager
def weights(model: nn.Module, state: dict) -> Iterator[None]:
    """Inside, `model` holds the weights `state` (the mean, to score or save it); after, its own."""
    trained = model.state_dict()
    model.load_state_dict(state)
    try:
        yield
    finally:
        model.load_state_dict(trained)


def snapshot_steps(steps: int, every: int, n: int) -> tuple[int, ...]:
    """The steps of the last `n` validations (one every `every` steps, and one at the last step)."""
    return tuple(sorted({*range(every, steps, every), steps}))[-n:] if n > 1 else ()


class Average:
    """A running sum of the weights at the given steps. The sum is saved in `last.npz`, so a
    resumed run averages the very same weights."""

    def __init__(self, steps: tuple[int, ...]):
        self.steps, self.taken, self.sum = steps, [], {}

    def add(self, step: int, model: nn.Module) -> None:
        if step in self.steps and step not in self.taken:
            for name, value in model.state_dict().items():
                self.sum[name] = self.sum[name] + value if name in self.sum else value
            self.taken.append(step)

    def mean(self) -> dict[str, np.ndarray]:
        return {name: total / len(self.taken) for name, total in self.sum.items()}

    def state_dict(self) -> dict:
        return {"taken": list(self.taken), "sum": dict(self.sum)}

    def to(self, steps: tuple[int, ...]) -> Average:
        """An average of the weights at `steps` instead, with those summed here still among them."""
        moved = Average(steps)
        moved.load_state_dict(self.state_dict())
        return moved

    def load_state_dict(self, state: dict) -> None:
        """Take the saved sum, unless it holds steps this run no longer averages (resumed with
        other --steps or --average): then the sum starts again."""
        taken = [int(step) for step in state.get("taken", [])]
        if set(taken) <= set(self.steps):
            self.taken, self.sum = taken, dict(state.get("sum", {}))
