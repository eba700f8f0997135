"""Cross-entropy fused with log-softmax, with ignored targets and label smoothing.

For one target t over C classes with smoothing ε the loss is

    (1 - ε) · (-log p_t) + ε · mean_c(-log p_c)

i.e. cross-entropy against the smoothed distribution q = (1 - ε)·onehot(t) + ε/C,
and its gradient with respect to the logits is simply softmax - q. Ignored
targets (padding) contribute nothing, and "mean" divides by the number of
targets that were not ignored, so more padding never changes the loss. With every
target ignored that mean is 0/0 = NaN (and the gradient zero), as in PyTorch: there
is no loss to report, and 0 would pass for a perfect prediction.
"""
from __future__ import annotations

from ..function import Function
from .fused import Softmax, minus_max
from .kernels import as_rows, cross_entropy_backward, row_sums
from .precision import in_float32
from .select import check_range
from .twice import fast_backward, grad_op

REDUCTIONS = ("mean", "sum", "none")


@in_float32
@fast_backward(cross_entropy_backward)  # the formula below, in place on forward's exponentials (kernels.py)
class CrossEntropy(Function):
    """y = Σ_n s_n·ℓ_n ("mean", "sum") or the ℓ_n themselves ("none"), for logits x (N, C):
    ℓ_n = log Σ_c exp(x_nc) - Σ_c q_nc·x_nc, q = (1 - ε)·onehot(target) + ε/C, and s_n = 1/(rows kept)
    ("mean") or 1, and 0 on ignored rows (as their ℓ_n).
    dlogits = g·s_n·(softmax(x_n) - q_n);  dtarget = none (integer ids)

    Written for few passes over the (N, C) logits, the largest array of a language model:
    forward reads them for the max, the shift, the exponentials and their sum; backward on
    raw arrays (`cross_entropy_backward`) writes the gradient once and fixes the N target
    entries. The formula below takes softmax again as an op, so it can be differentiated again."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("count", "e", "log_z", "rows", "target", "keep", "eps", "reduction")

    def forward(self, logits, target, ignore_index, label_smoothing, reduction):
        xp, eps, C = self.xp, label_smoothing, logits.shape[-1]
        rows, flat_target = xp.arange(target.size), target.reshape(-1)
        keep = flat_target != ignore_index if ignore_index is not None else None  # (N,)
        if keep is not None:
            flat_target = xp.where(keep, flat_target, 0)  # ignored ids may be anything, even out of range
        check_range(self.backend, flat_target, C, "cross_entropy: id")  # ids are values: checked where values are
        shifted = as_rows(minus_max(logits, -1))  # (N, C)
        picked = shifted[rows, flat_target]  # (N,) the target's shifted logit
        # row sums by BLAS, 3× faster than NumPy's reduce on the (N, C) rows here
        mean_shifted = row_sums(xp, shifted)[:, 0] / C if eps else 0.0  # (N,)
        e = xp.exp(shifted, out=shifted)  # (N, C), reusing the buffer
        log_z = xp.log(row_sums(xp, e)[:, 0])  # (N,) log Σ exp(shifted)
        # -log p_t = log_z - shifted_t and mean_c(-log p_c) = log_z - mean_c(shifted_c)
        loss = (1 - eps) * (log_z - picked) + eps * (log_z - mean_shifted)  # (N,)
        if keep is not None:
            loss = xp.where(keep, loss, 0)
        if reduction == "mean" and keep is not None:  # counted where the data is: no wait for a GPU
            self.count = keep.sum().astype(loss.dtype)  # 0 if all are ignored: the mean is 0/0 = NaN
        else:
            self.count = target.size if reduction == "mean" else 1
        self.e, self.log_z, self.rows, self.target, self.keep = e, log_z, rows, flat_target, keep
        self.eps, self.reduction = eps, reduction
        if reduction == "none":
            return loss.reshape(target.shape)
        return loss.sum() / self.count if reduction == "mean" else loss.sum()

    def backward(self, g, logits, target):  # d loss / d logits = g·s·(softmax - q)
        N, C = self.e.shape
        q = self.backend.xp.full((N, C), self.eps / C, dtype=self.e.dtype)  # the smoothed one-hot, a constant
        q[self.rows, self.target] += 1 - self.eps
        p = grad_op(self, Softmax, logits.reshape(N, C), axis=-1)  # (N, C); on Tensors a node
        return ((p - q) * self.row_weights(g).reshape(N, 1)).reshape(logits.shape), None

    def row_weights(self, g):
        """g·s_n, each row's weight in the loss times the upstream gradient, 0 on ignored rows. (N,)"""
        xp = self.xp
        scale = g.reshape(-1) if self.reduction == "none" else xp.broadcast_to(g / self.count, self.e.shape[:1])
        return scale if self.keep is None else xp.where(self.keep, scale, 0)
