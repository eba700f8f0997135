"""Arithmetic: + - * / ** @ and dtype casts.

Inputs may have different (broadcastable) shapes: each backward returns the
gradient in the broadcast shape and the engine sums it back to each input's
shape, so no op here repeats that bookkeeping (but MatMul, see there). Gradients are only computed for
inputs that want one (`needs_grad`): constants such as the 2 in `x * 2` cost nothing.
Backward formulas use operators only, so they read the same on arrays and on
Tensors (see `autograd`).
"""
from __future__ import annotations

from ..autograd import Function, sum_to
from ..tensor import Tensor
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


def matmul(x: Tensor, y: Tensor) -> Tensor:
    """`x @ y` with NumPy's rules, arranged so BLAS sees the largest 2-D products.

    A stack of rows times one matrix, (B, T, k) @ (k, m), becomes one (B·T, k) @ (k, m)
    product, and its weight gradient one (k, B·T) @ (B·T, m) product, instead of B
    small ones whose results must then be summed. 1-D operands are treated as NumPy
    does (a row or a column, dropped from the result).
    """
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"matmul: scalar operands are not allowed (shapes {x.shape} and {y.shape}); use *")
    if x.shape[-1] != y.shape[-2 if y.ndim > 1 else 0]:
        raise ValueError(f"matmul: shapes {x.shape} and {y.shape} do not align "
                         f"({x.shape[-1]} != {y.shape[-2 if y.ndim > 1 else 0]})")
    if x.ndim == 1:
        return matmul(x.reshape(1, -1), y).reshape(*y.shape[:-2], y.shape[-1]) if y.ndim > 1 \
            else (x * y).sum()
    if y.ndim == 1:
        return matmul(x, y.reshape(-1, 1)).reshape(x.shape[:-1])
    if y.ndim == 2 and x.ndim > 2:
        flat = MatMul.apply(x.reshape(-1, x.shape[-1]), y)  # (B·T, m)
        return flat.reshape(*x.shape[:-1], y.shape[-1])
    return MatMul.apply(x, y)
