"""The loss a training step minimises: cross-entropy per real token of the global batch, and R-Drop's term."""
from __future__ import annotations

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.functional as F

from ..text.data import PAD_ID


def token_mean(logits: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor, label_smoothing: float,
               shards: int = 1) -> tx.Tensor:
    """The mean cross-entropy per real (non-padding) token of the whole global batch.

    `n_tokens` counts the real tokens of the batch on all `shards` ranks together. Each rank
    sums its own tokens' losses and divides by n_tokens / shards; DataParallel
    then averages over the ranks: (1/N) Σ_r N·sum_r / n_tokens = Σ_r sum_r / n_tokens,
    the global per-token mean, as one process with the whole batch computes it.
    Averaging each rank's own mean would instead weight a token on a rank whose shard
    holds few real tokens (short targets, much padding) more than one on a full rank,
    and the result would depend on how the batch was split. With one process this
    is exactly the usual mean over the non-ignored targets.
    """
    loss_sum = F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=label_smoothing,
                               reduction="sum")  # ()
    return loss_sum / (n_tokens / shards)


def doubled(batch: tuple[np.ndarray, ...], n_tokens: int) -> tuple[tuple[np.ndarray, ...], int]:
    """R-Drop's batch (Liang et al. 2021): each pair twice, so that the step sees it under two
    dropout masks, and its real tokens counted twice."""
    return tuple(np.concatenate([ids, ids]) for ids in batch), 2 * n_tokens


def rdrop_term(logits: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor, shards: int = 1) -> tx.Tensor:
    """R-Drop's term, for a `doubled` batch: it pulls the two predictions of each pair together:
    (KL(p1||p2) + KL(p2||p1)) / 2, which is sum (p1 - p2)(log p1 - log p2) / 2 over the
    vocabulary, per real token of the doubled batch (as fairseq's R-Drop normalises it)."""
    half = logits.shape[0] // 2
    logp = logits.log_softmax(-1)  # (2B, T, V)
    logp1, logp2 = logp[:half], logp[half:]  # (B, T, V) each
    both_kl = ((logp1.exp() - logp2.exp()) * (logp1 - logp2)).sum(-1)  # (B, T)
    real = (tgt_out[:half] != PAD_ID).astype(logits.dtype)  # (B, T)
    return (both_kl * real).sum() / (2 * n_tokens / shards)
