"""Learning-rate schedules: they set `optimizer.lr` from the step number.

Steps are numbered from 1: step s is the s-th call of `optimizer.step()`. Making a
schedule sets the rate for step 1; call `schedule.step()` AFTER each
`optimizer.step()` to set the rate for the next one:

    optimizer = optim.Adam(model.parameters(), lr=1.0)
    schedule = schedules.NoamSchedule(optimizer, d_model=512, warmup=4000)
    for batch in batches:
        loss = model_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()    # uses lr_at(s)
        schedule.step()     # now optimizer.lr == lr_at(s + 1)

So the rate used at step s is always `schedule.lr_at(s)`, also in a run resumed
from `state_dict()` (save the schedule's state with the optimizer's).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .observers import replayable


class LRSchedule:
    """The base: a subclass defines `lr_at(step)`; this class keeps the step and sets the rate."""

    def __init__(self, optimizer: Any):
        self.optimizer = optimizer
        self.step_num = 1  # the optimizer step the current rate is for
        optimizer.lr = self.get_lr()

    def lr_at(self, step: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> float:
        """The rate for the next optimizer step."""
        return self.lr_at(self.step_num)

    @replayable
    def step(self) -> None:
        """Move to the next step; call it after `optimizer.step()`."""
        self.step_num += 1
        self.optimizer.lr = self.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return {"step_num": self.step_num}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_num = int(state["step_num"])
        self.optimizer.lr = self.get_lr()


class LambdaLR(LRSchedule):
    """lr = base_lr · fn(step), base_lr being the optimizer's lr when the schedule is made.

    As torch.optim.lr_scheduler.LambdaLR, except that steps count from 1 here (torch
    calls fn(0) for the first step).
    """

    def __init__(self, optimizer: Any, fn: Callable[[int], float]):
        self.fn, self.base_lr = fn, optimizer.lr
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        return self.base_lr * self.fn(step)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "base_lr": self.base_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base_lr = float(state["base_lr"])
        super().load_state_dict(state)


class NoamSchedule(LRSchedule):
    """The schedule of "Attention Is All You Need" (§5.3):

        lr = factor · d_model^-0.5 · min(s^-0.5, s · warmup^-1.5)

    Linear warm-up for `warmup` steps (the two terms meet at s = warmup, the peak),
    then decay as 1/√s. Larger models (d_model) get smaller rates.
    """

    def __init__(self, optimizer: Any, d_model: int, warmup: int, factor: float = 1.0):
        if warmup < 1:
            raise ValueError(f"NoamSchedule: warmup must be >= 1 step, not {warmup}")
        self.d_model, self.warmup, self.factor = d_model, warmup, factor
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup ** -1.5)


class WarmupDecay(LRSchedule):
    """The base of the two schedules below: a linear warm-up from lr_max/warmup (step 1) to
    lr_max (step `warmup`), then a decay from lr_max down to lr_min at step `total_steps`, whose
    shape a subclass gives as `fraction(progress)` (1 at the start of the decay, 0 at its end);
    lr_min after that.

    lr_max is the optimizer's lr when the schedule is made (as PyTorch's schedules take
    their base rate), so the peak rate is given once, to the optimizer. Make the schedule
    before loading a saved optimizer state, whose lr is the rate of the step it stopped at.
    """

    def __init__(self, optimizer: Any, warmup: int, total_steps: int, lr_min: float = 0.0):
        if not 0 <= warmup < total_steps:
            raise ValueError(f"{type(self).__name__}: need 0 <= warmup < total_steps, got {warmup} and {total_steps}")
        self.warmup, self.total_steps, self.lr_max, self.lr_min = warmup, total_steps, optimizer.lr, lr_min
        super().__init__(optimizer)

    def fraction(self, progress: float) -> float:
        raise NotImplementedError

    def lr_at(self, step: int) -> float:
        if step <= self.warmup:
            return self.lr_max * step / self.warmup
        progress = min(1.0, (step - self.warmup) / (self.total_steps - self.warmup))  # 0 -> 1
        return self.lr_min + (self.lr_max - self.lr_min) * self.fraction(progress)


class WarmupCosine(WarmupDecay):
    """Warm-up, then half a cosine from lr_max down to lr_min: slow at both ends."""

    def fraction(self, progress: float) -> float:
        return 0.5 * (1 + math.cos(math.pi * progress))


class WarmupLinear(WarmupDecay):
    """Warm-up, then a straight line from lr_max down to lr_min (0 by default: "straight to
    zero", which Bergsma et al. (2025) found beats a cosine to a tenth of the peak for AdamW in
    language models: the last, small steps average out more of the gradients' noise)."""

    def fraction(self, progress: float) -> float:
        return 1.0 - progress
