"""Cross-entropy fused with log-softmax, with ignored targets and label smoothing.

For one target t over C classes with smoothing ε the loss is

    (1 - ε) · (-log p_t) + ε · mean_c(-log p_c)

i.e. cross-entropy against the smoothed distribution q = (1 - ε)·onehot(t) + ε/C,
and its gradient with respect to the logits is simply softmax - q. Ignored
targets (padding) contribute nothing, and "mean" divides by the number of
targets that were not ignored, so more padding never changes the loss.
"""
from __future__ import annotations

from ..autograd import OnceDifferentiable
from ..tensor import Tensor
from .nn import as_ids, check_ids

REDUCTIONS = ("mean", "sum", "none")


class CrossEntropy(OnceDifferentiable):
    def forward(self, logits, target, ignore_index, label_smoothing, reduction):
        xp = self.xp
        C = logits.shape[-1]
        shifted = logits - logits.max(axis=-1, keepdims=True)  # (..., C)
        log_p = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
        keep = target != ignore_index if ignore_index is not None else xp.ones(target.shape, dtype=bool)
        safe_target = xp.where(keep, target, 0)  # ignored ids may be anything, even out of range
        nll = -xp.take_along_axis(log_p, safe_target[..., None], axis=-1)[..., 0]  # (...)
        loss = (1 - label_smoothing) * nll - label_smoothing * log_p.mean(axis=-1)
        loss = xp.where(keep, loss, 0)
        self.count = max(int(keep.sum()), 1) if reduction == "mean" else 1
        self.log_p, self.keep, self.target, self.eps, self.C = log_p, keep, safe_target, label_smoothing, C
        self.reduction = reduction
        if reduction == "none":
            return loss
        total = loss.sum()
        return total / self.count if reduction == "mean" else total

    def backward(self, g, logits, target):
        xp = self.xp
        p = xp.exp(self.log_p)  # (..., C)
        q_target = xp.zeros_like(p)
        xp.put_along_axis(q_target, self.target[..., None], 1 - self.eps, axis=-1)
        gx = p - q_target - self.eps / self.C  # softmax - q
        scale = g[..., None] if self.reduction == "none" else g / self.count
        gx *= xp.where(self.keep[..., None], scale, 0).astype(p.dtype, copy=False)
        return gx, None


def cross_entropy(logits: Tensor, target, ignore_index: int | None = None,
                  label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    """Cross-entropy of `logits` (..., C) against integer `target` (...), classes on the last axis."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, not {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], not {label_smoothing}")
    target = as_ids(target, logits.device)
    if target.shape != logits.shape[:-1]:
        raise ValueError(f"cross_entropy: logits of shape {logits.shape} need targets of shape "
                         f"{logits.shape[:-1]}, got {target.shape}")
    ids = target.data if ignore_index is None else target.data[target.data != ignore_index]
    check_ids(ids, logits.shape[-1], "cross_entropy")
    return CrossEntropy.apply(logits, target, ignore_index=ignore_index,
                              label_smoothing=label_smoothing, reduction=reduction)
