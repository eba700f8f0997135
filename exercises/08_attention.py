# %% [markdown]
# # Exercise 08: `Attention` with a mask (about 45 minutes)
#
# Scaled dot-product attention on (..., T, d) arrays (a batch, heads, positions, features):
#
#     s = q @ kᵀ · scale            (..., Tq, Tk)  scale = 1/√d
#     s = -∞ where the mask blocks   a mask is boolean, True = "may attend"
#     p = softmax(s) along keys      (..., Tq, Tk)
#     y = p @ v                      (..., Tq, d_v)
#
# Derive backward from the back, reusing what you wrote: y = p @ v is 04's product (gradients of
# p and of v); p = softmax(s) is 05 (the gradient of s from p's, using p only, so the masked
# keys, where p = 0, get nothing); s = q @ kᵀ·scale is 04 again (gradients of q and k).
#
# A query whose every key is masked (a fully masked row: all its scores -∞) gets all-zero
# weights and an all-zero output, never NaN: the forward takes care of it, and a backward
# written with p alone keeps its gradients zero too.
#
# This exercise leaves dropout out (`dropout_p` must be 0: the reverse task trains without it).
#
#     python -m exercises check 08

# %%
from tinygrad_tx.function import Function


def keep_mask(xp, mask, causal, t_q, t_k):
    """Which scores stay (True) or None for all: `mask`, and with `causal` query i sees keys up to
    its own position (the queries are the last t_q of the t_k positions, as with a decoding cache)."""
    if not causal:
        return mask
    tri = xp.tri(t_q, t_k, k=t_k - t_q, dtype=bool)  # (Tq, Tk)
    return tri if mask is None else mask & tri


class Attention(Function):
    """y = p @ v, p = softmax(q @ kᵀ · scale) over the keys each query may attend to;
    dq = ...;  dk = ...;  dv = ..."""

    saved = ("p", "scale")

    def forward(self, q, k, v, mask, causal, dropout_p, scale):
        if dropout_p:
            raise ValueError("this exercise's Attention has no dropout: train with --attention-dropout 0")
        xp = self.xp
        s = (q @ k.swapaxes(-1, -2)) * scale  # (..., Tq, Tk)
        keep = keep_mask(xp, mask, causal, q.shape[-2], k.shape[-2])
        if keep is not None:
            s = xp.where(keep, s, -xp.inf)
        top = s.max(axis=-1, keepdims=True)  # (..., Tq, 1)
        e = xp.exp(s - xp.where(top == -xp.inf, 0, top))  # a fully masked row: exp(-inf) = 0, not NaN
        total = e.sum(axis=-1, keepdims=True)
        self.p = e / xp.where(total == 0, 1, total)  # (..., Tq, Tk), all 0 on a fully masked row
        self.scale = scale
        return self.p @ v  # (..., Tq, d_v)

    def backward(self, g, q, k, v):
        # g: (..., Tq, d_v); self.p: (..., Tq, Tk)
        raise NotImplementedError("write Attention.backward: return (dq, dk, dv)")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("08", globals()))
