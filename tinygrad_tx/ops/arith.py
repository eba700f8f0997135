"""Arithmetic: + - * / ** @ and dtype casts.

Inputs may have different (broadcastable) shapes: each backward returns the
gradient in the broadcast shape and the engine sums it back to each input's
shape, so no op here repeats that bookkeeping (but MatMul, see there). Gradients are only computed for
inputs that want one (`needs_grad`): constants such as the 2 in `x * 2` cost nothing.
Backward formulas use operators only, so they read the same on arrays and on
Tensors (see `function.py`, "How to add an op").
"""
from __future__ import annotations

from ..backward import sum_to
from ..function import Function
from .kernels import column_sums


class Add(Function):
    def forward(self, x, y):
        return x + y

    def backward(self, g, x, y):
        return g, g


class Sub(Function):
    def forward(self, x, y):
        return x - y

    def backward(self, g, x, y):
        return g, (-g if self.needs_grad[1] else None)


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, g, x):
        return (-g,)


class Mul(Function):
    def forward(self, x, y):
        return x * y

    def backward(self, g, x, y):
        gx = g * y if self.needs_grad[0] else None
        gy = g * x if self.needs_grad[1] else None
        return gx, gy


class Div(Function):
    def forward(self, x, y):
        return x / y

    def backward(self, g, x, y):
        gx = g / y
        gy = -gx * x / y if self.needs_grad[1] else None  # d(x/y)/dy = -x/y²
        return gx, gy


class PowScalar(Function):
    """x ** c for a Python number c. Values are IEEE's pow, as NumPy's: (-0.0) ** -0.5 is +inf
    and (-inf) ** -0.5 is 0, where PyTorch, computing rsqrt, gives -inf and NaN."""

    saved = ("exponent",)

    def forward(self, x, exponent):
        self.exponent = exponent
        return x ** exponent

    def backward(self, g, x):
        c = self.exponent
        if c == 0:  # x ** 0 is constant; c · x^(c-1) would be 0 · inf = NaN at x = 0
            return (g * 0,)
        if c == 0.5:  # x ** 0.5 is sqrt, so its gradient is Sqrt's: -inf at -0.0, as in PyTorch
            return (g * 0.5 / self.xp.sqrt(x),)
        return (g * (c * x ** (c - 1)),)  # grouped as PyTorch does, so tiny c · inf stays inf


class Pow(Function):
    """x ** y for tensors; d/dy = x^y · log x is asked for only when y needs a gradient,
    because log x is NaN for x < 0 even where the power itself is fine.

    Two limits are taken as PyTorch takes them, where the formulas give 0 · inf = NaN:
    d/dx x^0 = 0 (also at x = 0), and d/dy 0^y = 0 for y >= 0.
    """

    def forward(self, x, y):
        return x ** y

    def backward(self, g, x, y):
        xp = self.xp
        gx = xp.where(y == 0, 0, g * (y * x ** (y - 1))) if self.needs_grad[0] else None
        gy = xp.where((x == 0) & (y >= 0), 0, g * (x ** y * xp.log(x))) if self.needs_grad[1] else None
        return gx, gy


class Cast(Function):
    """A dtype conversion; the gradient goes back in the input's dtype."""

    def forward(self, x, dtype):
        return self.backend.cast(x, dtype)

    def backward(self, g, x):
        return (g.astype(x.dtype),)


class MatMul(Function):
    """Matrix product of (..., n, k) and (..., k, m), batch axes broadcast.

    Its output's shape tells nothing about whether an input's batch axes were broadcast
    (the matrix axes differ anyway), so it sums them back itself, as Expand does.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, y):
        return x @ y

    def backward(self, g, x, y):  # g: (..., n, m)
        gx = sum_to(g @ y.swapaxes(-1, -2), x.shape) if self.needs_grad[0] else None  # (..., n, k)
        gy = sum_to(x.swapaxes(-1, -2) @ g, y.shape) if self.needs_grad[1] else None  # (..., k, m)
        return gx, gy


class Linear(Function):
    """x @ w + b for a 2-D x (N, in), w (in, out), b (out,): the layer every model repeats.

    One op instead of MatMul then Add: the bias is added into the product in place,
    saving a pass over the (N, out) output and a buffer of its size.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, w, b):
        y = x @ w  # (N, out)
        y += b
        return y

    def backward(self, g, x, w, b):  # g: (N, out)
        gx = g @ w.T if self.needs_grad[0] else None  # (N, in)
        gw = x.T @ g if self.needs_grad[1] else None  # (in, out)
        gb = column_sums(self.xp, g) if self.needs_grad[2] else None  # (out,)
        return gx, gw, gb
