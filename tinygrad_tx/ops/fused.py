"""Fused normalisations: softmax, log-softmax, layer norm.

Each is one forward pass and one hand-derived backward on raw arrays, instead
of a chain of a dozen small ops: fewer passes over memory, fewer temporaries,
and the numerically stable formula in one place. The price is that they are
once-differentiable.
"""
from __future__ import annotations

from ..function import OnceDifferentiable
from .kernels import column_dots, column_sums, row_dots, row_sums
from .precision import in_float32


@in_float32
class Softmax(OnceDifferentiable):
    """y = exp(x - max x) / Σ exp(x - max x); subtracting the max keeps exp from overflowing."""

    saved = ("y", "axis")

    def forward(self, x, axis):
        e = self.xp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        self.y, self.axis = e, axis
        return e

    def backward(self, g, x):
        # dL/dx_i = y_i (g_i - Σ_j g_j y_j): the Σ term is softmax's off-diagonal Jacobian
        y = self.y
        gy = g * y
        return (gy - y * gy.sum(axis=self.axis, keepdims=True),)


@in_float32
class LogSoftmax(OnceDifferentiable):
    """y = x - logsumexp(x), the logsumexp taken around the max for stability."""

    saved = ("y", "axis")

    def forward(self, x, axis):
        xp = self.xp
        shifted = x - x.max(axis=axis, keepdims=True)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        self.y, self.axis = y, axis
        return y

    def backward(self, g, x):
        # dL/dx = g - softmax(x) Σ g
        return (g - self.xp.exp(self.y) * g.sum(axis=self.axis, keepdims=True),)


@in_float32
class LayerNorm(OnceDifferentiable):
    """Normalise the last axis to mean 0 and variance 1, then scale and shift (Ba et al., 2016).

    The variance is the biased one, computed in two passes (mean first, then the
    mean of squared deviations): the one-pass E[x²] - E[x]² loses every digit on
    rows whose mean is large compared to their spread. eps sits inside the sqrt,
    as in PyTorch. A row whose variance overflows the dtype ([1e308, -1e308]) gives NaN
    rather than a silent row of zeros (PyTorch gives NaN there, and zeros for float32
    [1e20, -1e20]). Forward and backward work in place on the arrays they just made: a
    layer norm runs on every residual stream, and each full-size temporary spared is a
    pass over memory spared.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("rstd", "x_hat")

    def forward(self, x, w, b, eps):
        xp, D = self.xp, x.shape[-1]
        x_hat = x - row_sums(xp, x) / D  # (..., D) centred, then scaled in place
        var = row_dots(xp, x_hat, x_hat) / D  # (..., 1)
        var[var == xp.inf] = xp.nan  # overflowed: a NaN row, not a row times 1/√inf = 0
        self.rstd = 1 / xp.sqrt(var + eps)  # (..., 1)
        x_hat *= self.rstd  # (..., D)
        self.x_hat = x_hat
        y = x_hat * w  # (..., D)
        y += b
        return y

    def backward(self, g, x, w, b):
        x_hat, rstd = self.x_hat, self.rstd
        xp, D = self.xp, x.shape[-1]
        gw = column_dots(xp, g, x_hat) if self.needs_grad[1] else None  # (D,)
        gb = column_sums(xp, g) if self.needs_grad[2] else None  # (D,)
        gx = g * w  # (..., D) the gradient of x_hat, turned into x's in place below
        dot = row_dots(xp, gx, x_hat) / D  # (..., 1)
        gx -= row_sums(xp, gx) / D
        gx -= x_hat * dot
        gx *= rstd
        return gx, gw, gb
