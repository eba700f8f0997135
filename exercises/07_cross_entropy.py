# %% [markdown]
# # Exercise 07: `CrossEntropy` with padding and label smoothing (about 35 minutes)
#
# For logits x (N, C) (or (..., C): flattened to rows) and integer targets t (N,):
#
#     log p = log_softmax(x)                          one row a target
#     q     = (1 - ε)·onehot(t) + ε/C                 label smoothing ε spreads ε over all classes
#     ℓ_n   = -Σ_c q_nc·log p_nc                      the cross-entropy of row n
#
# Padding: rows whose target is `ignore_index` count for nothing (ℓ_n = 0), and "mean" divides
# by the number of rows *kept*, so more padding never changes the loss. `reduction` is "mean",
# "sum" (what the trainer uses: it divides by the real tokens itself) or "none" (ℓ itself).
#
# Derive ∂ℓ_n/∂x_nc. Hint: log p_nc = x_nc - log Σ_c' exp(x_nc'), and Σ_c q_nc = 1. The answer is
# short (it is why this op is fused: the log-softmax's gradient and the loss's cancel to a
# simple difference). Then scale each row as the reduction does, and zero the ignored rows.
# The target gets no gradient (integer ids): return None for it.

# %%
from tinygrad_tx.function import Function


class CrossEntropy(Function):
    """y = Σ_n s_n·ℓ_n, ℓ_n = -Σ_c q_nc·log softmax(x_n)_c, s_n = 1/(rows kept) ("mean"), 1 ("sum"),
    0 on ignored rows;  dlogits = ...;  dtarget = none (integer ids)"""

    broadcasts = False
    saved = ("log_p", "q", "keep", "count", "reduction")

    def forward(self, logits, target, ignore_index, label_smoothing, reduction):
        xp, eps, C = self.xp, label_smoothing, logits.shape[-1]
        x, t = logits.reshape(-1, C), target.reshape(-1)  # (N, C), (N,)
        keep = t != ignore_index if ignore_index is not None else xp.ones(t.shape, dtype=bool)  # (N,)
        t = xp.where(keep, t, 0)  # an ignored row's id may be anything: 0 indexes safely
        shifted = x - x.max(axis=-1, keepdims=True)
        self.log_p = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))  # (N, C)
        self.q = xp.full(x.shape, eps / C, dtype=x.dtype)  # (N, C) the smoothed target distribution
        self.q[xp.arange(len(t)), t] += 1 - eps
        loss = -(self.q * self.log_p).sum(axis=-1) * keep  # (N,) 0 on ignored rows
        self.keep, self.reduction = keep, reduction
        self.count = keep.sum().astype(x.dtype) if reduction == "mean" else 1  # the mean's divisor
        if reduction == "none":
            return loss.reshape(target.shape)
        return loss.sum() / self.count

    def backward(self, g, logits, target):
        # g: the output's gradient: a scalar array for "mean" and "sum", target's shape for "none"
        # return (logits' gradient, in logits' shape, None)
        raise NotImplementedError("write CrossEntropy.backward")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("07", globals()))
