"""Fast routes for the ops' raw-array code (NumPy or CuPy): reductions over the last axis,
and GELU's tanh form.

Each reduction computes what a plain `x.sum(axis=-1)` or `x.max(axis=-1)` computes, by a
route that was measurably faster here on the short rows a small Transformer reduces over and
over (a model's width, a query's keys); `gelu_tanh` and `gelu_tanh_grad` compute the
formulas of ops/unary.py's Gelu in place. Each docstring gives its measured reason. They are
kept apart from the op files so that those read as the math and its gradient.
"""
from __future__ import annotations

import math

from ..backends.blas import capturing_now, matmul


def as_rows(x):
    """`x` (..., n) as one (N, n) matrix, N written out: NumPy cannot infer a -1 when n is 0."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def row_sums(xp, x):
    """`x.sum(axis=-1, keepdims=True)` for a floating `x` (..., n), as the product x · ones.

    Fused ops reduce short rows (a model's width, a query's keys) over and over, where
    NumPy's reduce is slow; BLAS's matrix-vector product was about 3× faster on rows of 12
    to 64 here. Same sum, added in another order. The rows are made one (N, n) matrix first:
    on a stack, matmul makes one BLAS call per matrix (256 for attention's (64, 4, 12, 12)
    scores, 3× slower). (..., n) -> (..., 1)
    """
    rows = as_rows(x)  # (N, n)
    return matmul(rows, xp.ones(x.shape[-1], dtype=x.dtype)).reshape(*x.shape[:-1], 1)


def column_sums(xp, x):
    """`x.sum(axis=all but the last)` for a floating `x` (..., n), as ones · x: a bias's
    gradient, summed over every row of a batch. NumPy adds those rows one after another, as
    BLAS does, but BLAS's product was 3-4× faster here. Written with operators and
    `xp.ones_like` only, so a twice-differentiable backward may use it. (..., n) -> (n,)
    """
    rows = as_rows(x)  # (N, n)
    if not rows.shape[1]:  # no column to make the ones from, and nothing to add: (0,)
        return rows.sum(axis=0)
    return matmul(xp.ones_like(rows[:, 0]), rows)


def row_dots(xp, a, b):
    """`(a * b).sum(axis=-1, keepdims=True)` for floating `a`, `b` of one shape (..., n).

    einsum multiplies and adds in one pass with no (..., n) temporary: 1.5-2.5× faster
    here than `row_sums(a * b)` on rows of 32 to 8000. On shorter rows its per-row cost
    loses to the product and one BLAS call. (..., n) -> (..., 1)
    """
    if a.shape[-1] < 32 or capturing_now():  # a CUDA graph cannot hold CuPy's einsum (cuBLAS)
        return row_sums(xp, a * b)
    return xp.einsum("...j,...j->...", a, b)[..., None]


def column_dots(xp, a, b):
    """`(a * b)` summed over all but the last axis: a scale's gradient (LayerNorm's
    weight), chosen between einsum and BLAS as `row_dots` is. (..., n) -> (n,)"""
    if a.shape[-1] < 32 or capturing_now():
        return column_sums(xp, a * b)
    return xp.einsum("ij,ij->j", as_rows(a), as_rows(b))


def row_max(xp, x):
    """`x.max(axis=-1, keepdims=True)`, by halving the rows: max(left half, right half), again.

    NumPy's reduce walks short rows one at a time (attention's rows are a sequence's keys);
    log2(n) elementwise maximums over the whole array are 3× faster at n = 12, and the result
    is the same (a maximum is exact). (..., n) -> (..., 1); empty rows (n = 0) -> (..., 0), which
    has no maximum but subtracts from them all the same.
    """
    top = x
    while top.shape[-1] > 1:
        n = top.shape[-1]
        half = xp.maximum(top[..., :n // 2], top[..., n // 2:n // 2 * 2])  # (..., n // 2)
        if n % 2:  # the odd last column joins the first
            xp.maximum(half[..., :1], top[..., -1:], out=half[..., :1])
        top = half
    return top if top is not x else x.copy()


GELU_A = 0.044715  # of the tanh form's cubic: u = √(2/π)·(x + A·x³)


def gelu_tanh(xp, x, sqrt_2_over_pi):
    """(y, t) of GELU's tanh form, y = ½x·(1 + t), t = tanh(u), u = √(2/π)·(x + A·x³), in place:
    u as x·(√(2/π)·A·x² + √(2/π)), with two new arrays and no temporary. On a (672, 512) float32
    array, a feed-forward layer's activations: 0.6 ms instead of 0.93 for the formula as
    written (each operator a new array)."""
    t = xp.multiply(x, x, out=xp.empty_like(x))  # out=: an array even for a 0-d x (x * x is a scalar)
    t *= sqrt_2_over_pi * GELU_A
    t += sqrt_2_over_pi
    t *= x
    xp.tanh(t, out=t)
    y = xp.add(t, 1, out=xp.empty_like(t))
    y *= x
    y *= 0.5
    return y, t


def gelu_tanh_grad(xp, g, x, t, sqrt_2_over_pi):
    """g·(½(1 + t) + ½x·(1 - t²)·u'), u' = √(2/π)·(1 + 3A·x²), GELU tanh form's gradient, from
    forward's t, as ½g·(x(1 - t²)u' + t + 1) in place: 0.76 ms instead of 2.9 on the array
    above. With `gelu_tanh`, a training step of the 18k-pair Tatoeba corpus's model (4 such
    layers) took 116 ms against 106 with ReLU; with the formulas as written, 119 against 102
    (another run)."""
    du = xp.multiply(x, x, out=xp.empty_like(x))  # arrays even when 0-d, as in `gelu_tanh`
    du *= 3 * GELU_A * sqrt_2_over_pi
    du += sqrt_2_over_pi
    s = xp.multiply(t, t, out=xp.empty_like(t))
    xp.subtract(1, s, out=s)
    s *= du
    s *= x
    s += t
    s += 1
    s *= 0.5
    s *= g
    return s
