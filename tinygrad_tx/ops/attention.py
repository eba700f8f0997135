"""Scaled dot-product attention, fused: softmax(q kᵀ / √d, masked) · v in one op.

Masks follow the project's one convention: a boolean array, True = "may attend".
Blocked scores are set (in place, with `copyto`) to -inf, so a blocked key's weight is
exp(-inf) = 0 exactly, whatever the scores are: with the dtype's most negative finite
value instead, a row whose kept scores overflow to -inf (q = 1e20, k = -1e20 in float32)
gave the blocked key all the weight. A row left with no finite score (no key kept, or every
kept score -inf) gets all-zero weights, hence a zero output and zero gradients, never NaN,
as PyTorch's attention gives; a kept score of +inf or NaN gives a NaN row, as there.

`Attention` is the fast op; `AttentionWeights` is its softmax part as an op of its own, which
Attention's gradient is built from under `create_graph=True` (see fused.py), so that it can
be differentiated again.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..backends.blas import matmul  # `a @ b`, which a CUDA graph can hold (see blas.py)
from ..function import Function
from .nn import dropout_mask
from .kernels import row_dots, row_max, row_sums
from .precision import in_float32


def attention_weights(xp, q, k, keep, scale):
    """softmax(q kᵀ · scale) over the kept keys, on raw arrays: (..., Tq, Tk).

    Every step after the product works in place on the scores' one buffer, the largest
    array of attention. A row with no finite score comes out all zero without another pass
    over the weights: shifted by 0 rather than its max (-inf - (-inf) is NaN) and divided by
    infinity rather than its sum 0.
    """
    scores = matmul(q, k.swapaxes(-1, -2))  # (..., Tq, Tk)
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


def heads_apart(xp, a, b):
    """`a @ b` for (..., h, T, n) @ (..., h, n, m), written into memory laid out as (..., T, h, m).

    Heads are split from a (B, T, h·d) projection by a reshape and a transpose, and joined
    after attention the same way back. With the product laid out so, joining the heads is
    a free reshape instead of a copy, and so is splitting their gradients back in
    backward (here q's, k's and v's gradients). Other shapes (no head axis, batch axes
    that broadcast): a plain `a @ b`.
    """
    if a.ndim < 4 or a.shape[:-2] != b.shape[:-2]:
        return matmul(a, b)
    *batch, h, t, _ = a.shape
    out = xp.empty((*batch, t, h, b.shape[-1]), dtype=a.dtype)  # (..., T, h, m)
    return matmul(a, b, out=out.swapaxes(-3, -2), xp=xp)  # (..., h, T, m), a view of out


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
class Attention(Function):
    """y = (p·d)·v, p = softmax(q·kᵀ·scale) over the keys each query may attend to (`mask`, `causal`),
    d the dropout mask (1 without dropout).
    dq = s·k;  dk = sᵀ·q;  dv = (p·d)ᵀ·g, where s = p·(gp - Σ gp·p)·scale, gp = (g·vᵀ)·d

    Written for speed: the products land in the layout the heads are joined in (`heads_apart`)
    and softmax's backward runs in place.
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
        if self.creating_graph:  # on Tensors: the weights again from q and k, as a node
            p = AttentionWeights.apply(q, k, mask=self.mask, causal=self.causal, scale=self.scale)  # (..., Tq, Tk)
            drop = 1 if self.drop is None else self.drop
            gs = softmax_grad(g @ v.swapaxes(-1, -2) * drop, p) * self.scale  # (..., Tq, Tk)
            return gs @ k, gs.swapaxes(-1, -2) @ q, (p * drop).swapaxes(-1, -2) @ g
        p, p_used = self.p, self.p_used
        xp = self.xp
        gv = heads_apart(xp, p_used.swapaxes(-1, -2), g) if self.needs_grad[2] else None  # (..., Tk, d_v)
        gp = matmul(g, v.swapaxes(-1, -2))  # (..., Tq, Tk)
        if self.drop is not None:
            gp *= self.drop
        gs = gp  # softmax backward, in place: p (gp - Σ gp p); 0 where blocked
        gs -= row_dots(xp, gp, p)
        gs *= p
        gs *= q.dtype.type(self.scale)
        gq = heads_apart(xp, gs, k) if self.needs_grad[0] else None  # (..., Tq, d)
        gk = heads_apart(xp, gs.swapaxes(-1, -2), q) if self.needs_grad[1] else None  # (..., Tk, d)
        return gq, gk, gv


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
        return matmul(gs, k), matmul(gs.swapaxes(-1, -2), q)


@lru_cache(maxsize=64)
def causal_mask(t_q: int, t_k: int, backend) -> object:
    """Boolean (t_q, t_k) keep-mask: query i may see keys up to its own position (cached per device).

    Query i sits at position i + (t_k - t_q) of the keys: with a key/value cache the
    queries are the last t_q positions. For t_q == t_k this is the usual lower triangle.
    """
    return backend.from_host(np.tri(t_q, t_k, k=t_k - t_q, dtype=bool))
