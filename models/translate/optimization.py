"""The optimizer of a training run and its learning rate: Adam(W), a warm-up, then a decay.

The peak rate (--lr) is given once, to the optimizer; the schedule takes it from there (as
PyTorch's schedules take their base rate), and so does the floor a cosine decays to. A --time
run chooses its last step once it has timed itself, and again later (budget.py): its schedule
is then `stretch`ed or shrunk to end there, its peak and floor unchanged.
"""
from __future__ import annotations

import tinygrad_tx as tx
from tinygrad_tx import optim, schedules

from .settings import TrainSettings

LR_FLOOR = 0.05
"""Where --schedule cosine ends, as a share of the peak learning rate."""


def adam(params: list[tx.Tensor], s: TrainSettings) -> optim.Adam:
    """Adam at the peak learning rate --lr, the one place it is given (the schedule takes it from
    here); AdamW with a weight decay (a run trained before --weight-decay resumes with the Adam it
    saved). The decay shrinks the matrices and embeddings, not the biases and LayerNorm's gains and
    shifts (as is usual: a gain shrunk toward 0 scales its whole layer down); on Tatoeba that was
    worth about 0.5 BLEU to one model (docs/results/translate-experiments.md, "What the decay leaves alone,
    and where the learning rate ends")."""
    options = dict(lr=s.lr, betas=(0.9, 0.98), eps=1e-9)
    if not s.weight_decay:
        return optim.Adam(params, **options)
    return optim.AdamW(params, weight_decay=s.weight_decay, no_decay=[p for p in params if p.ndim < 2], **options)


def decay(optimizer: optim.Optimizer, s: TrainSettings) -> schedules.WarmupDecay:
    """--schedule: a warm-up, then a cosine down to LR_FLOOR of the peak, or a straight line to
    zero, at --steps."""
    if s.schedule == "linear":
        return schedules.WarmupLinear(optimizer, warmup_for(s, s.steps), s.steps)
    return schedules.WarmupCosine(optimizer, warmup_for(s, s.steps), s.steps, lr_min=LR_FLOOR * optimizer.lr)


def warmup_for(s: TrainSettings, steps: int) -> int:
    """--warmup, at most a quarter of the run's `steps`: a short run still gets to decay."""
    return min(s.warmup, steps // 4)


def stretch(schedule: schedules.WarmupDecay, s: TrainSettings, steps: int) -> None:
    """Make `schedule` end at `steps` instead, from the step it is at."""
    schedule.warmup, schedule.total_steps = warmup_for(s, steps), steps
    schedule.load_state_dict(schedule.state_dict())  # sets the optimizer's rate for its next step, by the new end
