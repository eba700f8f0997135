"""Scaled dot-product attention, fused: softmax(q kᵀ / √d, masked) · v in one op.

Masks follow the project's one convention: a boolean array, True = "may attend".
Blocked scores are set (in place, with `copyto`) to -inf, so a blocked key's weight is
exp(-inf) = 0 exactly, whatever the scores are: with the dtype's most negative finite
value instead, a row whose kept scores overflow to -inf (q = 1e20, k = -1e20 in float32)
gave the blocked key all the weight. A row left with no finite score (no key kept, or every
kept score -inf) gets all-zero weights, hence a zero output and zero gradients, never NaN,
as PyTorch's attention gives; a kept score of +inf or NaN gives a NaN row, as there.

`Attention` is the fast op; `AttentionWeights` is its softmax part as an op of its own, which
Attention's gradient formula takes again (twice.py's `grad_op`), so that it can be
differentiated again; on raw arrays Attention's gradient runs in place (`attention_backward`).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..function import Function
from .nn import dropout_mask
from .kernels import attention_backward, heads_apart, row_max, row_sums
from .precision import in_float32
from .twice import fast_backward, grad_op


def attention_weights(xp, q, k, keep, scale):
    """softmax(q kᵀ · scale) over the kept keys, on raw arrays: (..., Tq, Tk).

    Every step after the product works in place on the scores' one buffer, the largest
    array of attention. A row with no finite score comes out all zero without another pass
    over the weights: shifted by 0 rather than its max (-inf - (-inf) is NaN) and divided by
    infinity rather than its sum 0.
    """
    scores = xp.matmul(q, k.swapaxes(-1, -2))  # (..., Tq, Tk)
    scores *= q.dtype.type(scale)
    if keep is not None:  # in place, 2-4× faster than `where`'s new array at S and M
        shape = np.broadcast_shapes(scores.shape, keep.shape)
        if shape != scores.shape:  # a mask with batch axes that q and k lack
            scores = xp.broadcast_to(scores, shape).copy()
        xp.copyto(scores, -xp.inf, where=~keep)
    top = row_max(xp, scores)  # (..., Tq, 1)
    xp.copyto(top, 0, where=top == -xp.inf)  # a row with no finite score: its -inf stay -inf
    scores -= top
    p = xp.exp(scores, out=scores)
    total = row_sums(xp, p)  # (..., Tq, 1): at least e⁰ = 1 on a row with a finite score
    xp.copyto(total, xp.inf, where=total == 0)  # on the others: 0 / inf = 0
    p /= total
    return p


def softmax_grad(g, p):
    """The gradient of the scores from that of the weights p = softmax(scores): p·(g - Σ g·p),
    on arrays or Tensors. (..., Tq, Tk)"""
    return p * (g - (g * p).sum(axis=-1, keepdims=True))


def attention_keep(backend, mask, causal: bool, t_q: int, t_k: int):
    """The keep-mask (or None): `mask`, and the causal rule if `causal`.

    Combined inside the op rather than by its caller, so that the combination of a
    padding mask made from this call's ids is part of the op's forward, made again
    whenever forward runs, not an array computed once outside it.
    """
    if not causal:
        return mask
    tri = causal_mask(t_q, t_k, backend)
    return tri if mask is None else mask & tri


@in_float32
@fast_backward(attention_backward)  # the formula below, in place on forward's weights (kernels.py)
class Attention(Function):
    """y = (p·d)·v, p = softmax(q·kᵀ·scale) over the keys each query may attend to (`mask`, `causal`),
    d the dropout mask (1 without dropout).
    dq = s·k;  dk = sᵀ·q;  dv = (p·d)ᵀ·g, where s = p·(gp - Σ gp·p)·scale, gp = (g·vᵀ)·d

    Written for speed: the products land in the layout the heads are joined in (`heads_apart`),
    and on raw arrays softmax's backward runs in place.
    """

    saved = ("p", "drop", "p_used", "scale", "mask", "causal")

    def forward(self, q, k, v, mask, causal, dropout_p, scale):
        keep = attention_keep(self.backend, mask, causal, q.shape[-2], k.shape[-2])
        p = self.p = attention_weights(self.xp, q, k, keep, scale)  # (..., Tq, Tk)
        if dropout_p > 0:
            self.drop = dropout_mask(self.backend, p.shape, p.dtype, dropout_p)
            p = p * self.drop
        else:
            self.drop = None
        self.p_used, self.scale, self.mask, self.causal = p, scale, mask, causal
        return heads_apart(self.xp, p, v)  # (..., Tq, d_v)

    def backward(self, g, q, k, v):
        p = grad_op(self, AttentionWeights, q, k, mask=self.mask, causal=self.causal, scale=self.scale)  # (..., Tq, Tk)
        drop, matmul = (1 if self.drop is None else self.drop), self.xp.matmul
        gs = softmax_grad(matmul(g, v.swapaxes(-1, -2)) * drop, p) * self.scale  # (..., Tq, Tk)
        return matmul(gs, k), matmul(gs.swapaxes(-1, -2), q), matmul((p * drop).swapaxes(-1, -2), g)


@in_float32
class AttentionWeights(Function):
    """y = p = softmax(q·kᵀ·scale) over the keys each query may attend to (0 elsewhere): attention's
    weights, an op of their own for Attention's gradient under create_graph.
    dq = s·k;  dk = sᵀ·q, where s = p·(g - Σ g·p)·scale
    """

    saved = ("p", "scale", "mask", "causal")

    def forward(self, q, k, mask, causal, scale):
        keep = attention_keep(self.backend, mask, causal, q.shape[-2], k.shape[-2])
        self.p, self.scale, self.mask, self.causal = attention_weights(self.xp, q, k, keep, scale), scale, mask, causal
        return self.p  # (..., Tq, Tk)

    def backward(self, g, q, k):
        p = AttentionWeights.apply(q, k, mask=self.mask, causal=self.causal, scale=self.scale) \
            if self.creating_graph else self.p  # on Tensors: p as a node
        gs = softmax_grad(g, p) * self.scale  # (..., Tq, Tk)
        return self.xp.matmul(gs, k), self.xp.matmul(gs.swapaxes(-1, -2), q)


@lru_cache(maxsize=64)
def causal_mask(t_q: int, t_k: int, backend) -> object:
    """Boolean (t_q, t_k) keep-mask: query i may see keys up to its own position (cached per device).

    Query i sits at position i + (t_k - t_q) of the keys: with a key/value cache the
    queries are the last t_q positions. For t_q == t_k this is the usual lower triangle.
    """
    return backend.from_host(np.tri(t_q, t_k, k=t_k - t_q, dtype=bool))
