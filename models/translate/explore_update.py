"""The update view of a run, and its weights and gradients over training (the views that follow backward).

`train` saves, beside last.npz's weights, its optimizer's state (Adam's m and v, its step
count t, its learning rate for the next step, which the schedule set) and the schedule's.
`run_update` rebuilds that step on a copy: a model with the checkpoint's weights, an
optimizer of the saved kind that loads the saved state (`load_state_dict`), the trainer's
clipping (`--clip-norm`), and then the optimizer's own `step()` (`UpdateRecord`). The
model the other views show is never changed.

`UpdateViews` are the endpoints: /api/update (the step in numbers), /api/update_param
(one parameter's arrays) and /api/layer_stats (each layer over training, `layer_stats.py`).
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable

import tinygrad_tx as tx
from tinygrad_tx import optim
from tinygrad_tx.inspect.explorer import Waiting
from tinygrad_tx.inspect.explorer.params import text
from tinygrad_tx.inspect.explorer.update import UpdateRecord, parameter_nodes

from ..transformer import Transformer
from .explore_files import Damaged
from .explore_tour import optimizer_rule
from .explore_stats import over_training
from .layer_stats import parameter_stats

OPTIMIZERS = {"Adam": optim.Adam, "AdamW": optim.AdamW, "SGD": optim.SGD}
"""The optimizers a checkpoint may name (`train` uses Adam, or AdamW with a weight decay)."""


def copy_of(model: Transformer) -> Transformer:
    """Another model with `model`'s weights, on its device (what the update may change)."""
    copy = type(model)(**asdict(model.config)).to(model.device)
    copy.load_state_dict(model.state_dict())
    return copy


def run_update(model: Transformer, training: dict, name: str, loss_of: Callable[[Transformer], tx.Tensor],
               clip_norm: float) -> UpdateRecord:
    """The step `train` would take next from checkpoint `name` (`training`: what it holds beside the
    weights), taken on a copy of `model` with `loss_of(copy)` as its loss; `Waiting` when the
    checkpoint holds no optimizer state (a snapshot keeps the weights alone)."""
    saved = training.get("optimizer")
    if not isinstance(saved, dict):
        raise Waiting(f"{name} holds no optimizer state (a snapshot keeps the weights alone), so the update "
                      "cannot be taken from it")
    kind = OPTIMIZERS.get(saved.get("optimizer"))
    if kind is None:
        raise Damaged(f"{name} holds the state of an optimizer the explorer does not know: "
                      f"{str(saved.get('optimizer'))[:40]!r}")
    copy = copy_of(model)
    named = list(copy.named_parameters())
    try:
        optimizer = kind([p for _, p in named], lr=0.0)  # the saved rate replaces it
        optimizer.load_state_dict(saved)
    except (KeyError, TypeError, ValueError) as e:
        raise Damaged(f"{name}'s optimizer state does not fit its model: {e}") from None
    lr = optimizer.lr
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr >= 0):
        raise Damaged(f"{name}'s optimizer state has the learning rate {str(lr)[:40]!r}, not a finite number >= 0")
    return UpdateRecord(lambda: loss_of(copy), named, optimizer, clip_norm)


class UpdateViews:
    """The update's endpoints, for `RunViews` (whose `record()` sets `model` and `batch`, and whose
    `_training_loss(model, *batch)` is the step's loss)."""

    def update_record(self) -> UpdateRecord:
        """The optimizer's step from the step graph's checkpoint, on its batch (made again with it)."""
        record = self.record()
        if self._update is None or self._update[0] is not record.about:
            name = record.about["checkpoint"]
            update = run_update(self.model, self.checkpoints.training_state(name), name,
                                lambda copy: self._training_loss(copy, *self.batch), self._clip_norm())
            self._update = (record.about, update)
        return self._update[1]

    def _clip_norm(self) -> float:
        return self.files.settings["settings"].get("clip_norm", 0.0)

    def _parameter_nodes(self) -> dict[str, str]:
        return parameter_nodes(list(self.model.named_parameters()), self.record().node_id)

    def update(self, params: dict) -> dict:
        """The step's update in numbers: learning rate, optimizer state, clipping, loss before and
        after, and each parameter's ‖Δw‖ against ‖w‖."""
        try:
            update = self.update_record()
        except Waiting as e:
            return {"waiting": str(e)}
        return {**update.summary(self._parameter_nodes()), "schedule": self._schedule(update),
                "rule": optimizer_rule(update.optimizer), "shows": self.record().about}

    def update_param(self, params: dict) -> dict:
        """One parameter's weight, gradient, optimizer state and Δw, as arrays."""
        name = text(params.get("name"), "name")
        try:
            update = self.update_record()
        except Waiting as e:
            return {"waiting": str(e)}
        return {**update.parameter(name), "shows": self.record().about}

    def _schedule(self, update: UpdateRecord) -> str:
        """Where the learning rate comes from, in words."""
        s = self.files.settings["settings"]
        return (f"the rate the run's {s.get('schedule', '?')} schedule set for step {update.t}: a warm-up of "
                f"{min(s.get('warmup', 0), s.get('steps', 0) // 4)} steps up to --lr {s.get('lr')}, then down "
                f"until step {s.get('steps')}")

    def layer_stats(self, params: dict) -> dict:
        """Each layer's weight and gradient norms, its update-to-weight ratio and the histograms of
        its parameters at each record of the run (`layer_stats.py`)."""
        return over_training(self.files.directory, self.checkpoints, self._stats_of_snapshot, self._stats_cache)

    def _stats_of_snapshot(self, model: Transformer, previous: dict | None) -> dict:
        """The statistics of a snapshot's weights and their change since `previous`, with the gradient
        of the explorer's batch, clipped as the trainer clips (a snapshot holds no gradient)."""
        copy = copy_of(model)
        self.record()  # the batch
        self._training_loss(copy, *self.batch).backward()
        if self._clip_norm():
            optim.clip_grad_norm(copy.parameters(), self._clip_norm())
        return parameter_stats(copy, previous)
