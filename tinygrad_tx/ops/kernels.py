"""Fast routes for the ops' raw-array code (NumPy or CuPy): reductions over the last axis,
products laid out for attention's heads, and the in-place backwards of the fused ops.

Each reduction computes what a plain `x.sum(axis=-1)` or `x.max(axis=-1)` computes, by a
route that was measurably faster here on the short rows a small Transformer reduces over and
over (a model's width, a query's keys). Each `*_backward` is an op's `backward` formula computed
in place on raw arrays, which the op names with `@fast_backward` (twice.py) and which runs in the
formula's place there; a test checks that both give the same gradient. Each docstring gives its
measured reason. They are kept apart from the op files so that those read as the math and its
gradient.
"""
from __future__ import annotations

import math


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
    return xp.matmul(rows, xp.ones(x.shape[-1], dtype=x.dtype)).reshape(*x.shape[:-1], 1)


def column_sums(xp, x):
    """`x.sum(axis=all but the last)` for a floating `x` (..., n), as ones · x: a bias's
    gradient, summed over every row of a batch. NumPy adds those rows one after another, as
    BLAS does, but BLAS's product was 3-4× faster here. Written with operators and
    `xp.ones_like` and `xp.matmul` only, so a twice-differentiable backward may use it. (..., n) -> (n,)
    """
    rows = as_rows(x)  # (N, n)
    if not rows.shape[1]:  # no column to make the ones from, and nothing to add: (0,)
        return rows.sum(axis=0)
    return xp.matmul(xp.ones_like(rows[:, 0]), rows)


def row_dots(xp, a, b):
    """`(a * b).sum(axis=-1, keepdims=True)` for floating `a`, `b` of one shape (..., n).

    einsum multiplies and adds in one pass with no (..., n) temporary: 1.5-2.5× faster
    here than `row_sums(a * b)` on rows of 32 to 8000. On shorter rows its per-row cost
    loses to the product and one BLAS call. (..., n) -> (..., 1)
    """
    if a.shape[-1] < 32:
        return row_sums(xp, a * b)
    return xp.einsum("ij,ij->i", as_rows(a), as_rows(b)).reshape(*a.shape[:-1], 1)


def column_dots(xp, a, b):
    """`(a * b)` summed over all but the last axis: a scale's gradient (LayerNorm's
    weight), chosen between einsum and BLAS as `row_dots` is. (..., n) -> (n,)"""
    if a.shape[-1] < 32:
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


def heads_apart(xp, a, b):
    """`a @ b` for (..., h, T, n) @ (..., h, n, m), written into memory laid out as (..., T, h, m).

    Heads are split from a (B, T, h·d) projection by a reshape and a transpose, and joined
    after attention the same way back. With the product laid out so, joining the heads is
    a free reshape instead of a copy, and so is splitting their gradients back in
    backward (here q's, k's and v's gradients). Other shapes (no head axis, batch axes
    that broadcast): a plain `a @ b`.
    """
    if a.ndim < 4 or a.shape[:-2] != b.shape[:-2]:
        return xp.matmul(a, b)
    *batch, h, t, _ = a.shape
    out = xp.empty((*batch, t, h, b.shape[-1]), dtype=a.dtype)  # (..., T, h, m)
    return xp.matmul(a, b, out=out.swapaxes(-3, -2))  # (..., h, T, m), a view of out


# -- the fused ops' backwards, in place -------------------------------------------------------

def layer_norm_backward(op, g, x, w, b):
    """LayerNorm.backward in place, from forward's x̂ and 1/σ: the gradient of x̂ (g·w) is turned
    into x's in its own buffer, one new (..., D) array where the formula makes seven."""
    x_hat, rstd, xp, D = op.x_hat, op.rstd, op.xp, max(x.shape[-1], 1)  # an empty row: 0/1, not 0/0
    gw = column_dots(xp, g, x_hat) if op.needs_grad[1] else None  # (D,)
    gb = column_sums(xp, g) if op.needs_grad[2] else None  # (D,)
    gx = g * w  # (..., D) ĝ, the gradient of x̂
    dot = row_dots(xp, gx, x_hat) / D  # (..., 1) mean(ĝ·x̂)
    gx -= row_sums(xp, gx) / D
    gx -= x_hat * dot
    gx *= rstd
    return gx, gw, gb


def cross_entropy_backward(op, g, logits, target):
    """CrossEntropy.backward in place, from forward's exponentials e and log-sums: the (N, C)
    gradient is written once, as e·(g·s / Σe), then the smoothing's ε/C and the N target entries
    are taken off; no softmax is computed again."""
    xp, e, eps = op.xp, op.e, op.eps
    C = e.shape[-1]
    scale = op.row_weights(g)  # (N,)
    gx = e * (scale / xp.exp(op.log_z))[:, None]  # softmax · scale: (N, C)
    if eps:
        gx -= (eps / C * scale)[:, None]
    gx[op.rows, op.target] -= (1 - eps) * scale
    return gx.reshape(logits.shape), None


def attention_backward(op, g, q, k, v):
    """Attention.backward in place, from forward's weights: softmax's gradient is computed in the
    buffer of g·vᵀ, and the products land in the layout the heads are joined in (`heads_apart`)."""
    xp, p = op.xp, op.p
    gv = heads_apart(xp, op.p_used.swapaxes(-1, -2), g) if op.needs_grad[2] else None  # (..., Tk, d_v)
    gs = xp.matmul(g, v.swapaxes(-1, -2))  # (..., Tq, Tk) the gradient of the weights
    if op.drop is not None:
        gs *= op.drop
    gs -= row_dots(xp, gs, p)  # softmax's backward: p·(gp - Σ gp·p); 0 where blocked
    gs *= p
    gs *= q.dtype.type(op.scale)
    gq = heads_apart(xp, gs, k) if op.needs_grad[0] else None  # (..., Tq, d)
    gk = heads_apart(xp, gs.swapaxes(-1, -2), q) if op.needs_grad[1] else None  # (..., Tk, d)
    return gq, gk, gv


# -- GELU's tanh form ---------------------------------------------------------------------------

GELU_A = 0.044715  # of the tanh form's cubic: u = √(2/π)·(x + A·x³)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_tanh(xp, x):
    """(y, t) of GELU's tanh form, y = ½x·(1 + t), t = tanh(u), u = √(2/π)·(x + A·x³), in place:
    u as x·(√(2/π)·A·x² + √(2/π)), with two new arrays and no temporary. On a (672, 512) float32
    array, a feed-forward layer's activations: 0.6 ms instead of 0.93 for the formula as
    written (each operator a new array)."""
    t = xp.multiply(x, x, out=xp.empty_like(x))  # out=: an array even for a 0-d x (x * x is a scalar)
    t *= SQRT_2_OVER_PI * GELU_A
    t += SQRT_2_OVER_PI
    t *= x
    xp.tanh(t, out=t)
    y = xp.add(t, 1, out=xp.empty_like(t))
    y *= x
    y *= 0.5
    return y, t


def gelu_backward(op, g, x):
    """Gelu.backward's tanh form, g·(½(1 + t) + ½x·(1 - t²)·u'), u' = √(2/π)·(1 + 3A·x²), from
    forward's t, as ½g·(x(1 - t²)u' + t + 1) in place: 0.76 ms instead of 2.9 on the array
    above. With `gelu_tanh`, a training step of the 18k-pair Tatoeba corpus's model (4 such
    layers) took 116 ms against 106 with ReLU; with the formulas as written, 119 against 102
    (another run). The exact form is one product as written: NotImplemented, the formula runs."""
    if op.approximate != "tanh":
        return NotImplemented
    xp, t = op.xp, op.t
    du = xp.multiply(x, x, out=xp.empty_like(x))  # arrays even when 0-d, as in `gelu_tanh`
    du *= 3 * GELU_A * SQRT_2_OVER_PI
    du += SQRT_2_OVER_PI
    s = xp.multiply(t, t, out=xp.empty_like(t))
    xp.subtract(1, s, out=s)
    s *= du
    s *= x
    s += t
    s += 1
    s *= 0.5
    s *= g
    return (s,)
