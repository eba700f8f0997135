"""Fused normalisations: softmax, log-softmax, layer norm.

Each is one forward pass and one hand-derived backward on raw arrays, instead
of a chain of a dozen small ops: fewer passes over memory, fewer temporaries,
and the numerically stable formula in one place.

They can be differentiated again all the same (Chainer's way). Under
`backward(create_graph=True)` the gradient's formula runs on Tensors, and what forward
saved is a plain array there, a constant to the graph: so each backward takes what it
needs again from its input, as nodes of the graph (softmax's y is `Softmax.apply(x)` once
more), and its gradient is made of differentiable ops, to any order. Layer norm's gradient
on raw arrays runs in place (twice.py's `fast_backward`, kernels.py).
"""
from __future__ import annotations

from ..function import Function
from .kernels import layer_norm_backward, row_dots, row_sums
from .precision import in_float32
from .twice import fast_backward


def minus_max(x, axis):
    """x - max x along `axis`: no exp of it overflows. An empty x stays as it is: NumPy's max
    of an empty axis has nothing to return, and there is nothing to shift."""
    return x - x.max(axis=axis, keepdims=True) if x.size else x


@in_float32
class Softmax(Function):
    """y = exp(x - max x) / Σ exp(x - max x) along `axis`; subtracting the max keeps exp from overflowing.
    dx = y·(g - Σ g·y): the Σ term is softmax's off-diagonal Jacobian.
    """

    saved = ("y", "axis")

    def forward(self, x, axis):
        e = self.xp.exp(minus_max(x, axis))
        e /= e.sum(axis=axis, keepdims=True)
        self.y, self.axis = e, axis
        return e

    def backward(self, g, x):
        y = Softmax.apply(x, axis=self.axis) if self.creating_graph else self.y  # on Tensors: y as a node
        gy = g * y
        return (gy - y * gy.sum(axis=self.axis, keepdims=True),)


@in_float32
class LogSoftmax(Function):
    """y = x - log Σ exp(x) along `axis`, the log-sum taken around the max for stability.
    dx = g - softmax(x)·Σ g
    """

    saved = ("y", "axis")

    def forward(self, x, axis):
        xp = self.xp
        shifted = minus_max(x, axis)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        self.y, self.axis = y, axis
        return y

    def backward(self, g, x):
        p = Softmax.apply(x, axis=self.axis) if self.creating_graph else self.xp.exp(self.y)  # softmax(x)
        return (g - p * g.sum(axis=self.axis, keepdims=True),)


@in_float32
@fast_backward(layer_norm_backward)  # the formula below, in place on forward's x̂ and 1/σ (kernels.py)
class LayerNorm(Function):
    """y = x̂·w + b, x̂ = (x - mean x) / √(var x + eps) over the last axis (Ba et al., 2016).
    dx = (ĝ - mean ĝ - x̂·mean(ĝ·x̂)) / √(var x + eps), with ĝ = g·w;  dw = Σ g·x̂;  db = Σ g  (Σ over rows)

    The variance is the biased one, computed in two passes (mean first, then the
    mean of squared deviations): the one-pass E[x²] - E[x]² loses every digit on
    rows whose mean is large compared to their spread. eps sits inside the sqrt,
    as in PyTorch. A row whose variance overflows the dtype ([1e308, -1e308]) gives NaN
    rather than a silent row of zeros (PyTorch gives NaN there, and zeros for float32
    [1e20, -1e20]). Forward works in place on the arrays it just made, and so does backward
    on raw arrays (`layer_norm_backward`): a layer norm runs on every residual stream, and each
    full-size temporary spared is a pass over memory spared. An empty row (D = 0) gives an
    empty result.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("rstd", "x_hat", "eps")

    def forward(self, x, w, b, eps):
        xp, D = self.xp, max(x.shape[-1], 1)  # an empty row's sums are 0: divided by 1, not 0/0
        x_hat = x - row_sums(xp, x) / D  # (..., D) centred, then scaled in place
        var = row_dots(xp, x_hat, x_hat) / D  # (..., 1)
        xp.copyto(var, xp.nan, where=var == xp.inf)  # overflowed: a NaN row, not a row times 1/√inf = 0
        self.rstd = 1 / xp.sqrt(var + eps)  # (..., 1)
        x_hat *= self.rstd  # (..., D)
        self.x_hat, self.eps = x_hat, eps
        y = x_hat * w  # (..., D)
        y += b
        return y

    def backward(self, g, x, w, b):  # x̂ and 1/σ again from x: on Tensors, nodes of the graph
        centred = x - x.mean(axis=-1, keepdims=True)  # (..., D)
        rstd = 1 / self.xp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + self.eps)  # (..., 1)
        x_hat, rows = centred * rstd, tuple(range(g.ndim - 1))  # (..., D); the axes summed for w and b
        gh = g * w  # (..., D) ĝ, the gradient of x̂
        gx = (gh - gh.mean(axis=-1, keepdims=True) - x_hat * (gh * x_hat).mean(axis=-1, keepdims=True)) * rstd
        gw = (g * x_hat).sum(axis=rows) if self.needs_grad[1] else None  # (D,)
        gb = g.sum(axis=rows) if self.needs_grad[2] else None  # (D,)
        return gx, gw, gb
