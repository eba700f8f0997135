"""Arithmetic: + - * / ** @ and dtype casts.

Inputs may have different (broadcastable) shapes: each backward returns the
gradient in the broadcast shape and the engine sums it back to each input's
shape, so no op here repeats that bookkeeping (but MatMul, see there). Gradients are only computed for
inputs that want one (`needs_grad`): constants such as the 2 in `x * 2` cost nothing.
Backward formulas use operators only, so they read the same on arrays and on
Tensors (see `function.py`, "How to add an op"). A matrix product of arrays is written
`self.xp.matmul(a, b)`, not `a @ b`: CuPy's own `@` cannot be captured in a CUDA graph, and
a capture swaps what `xp.matmul` does (backends/graphs.py); on Tensors it is `a @ b`.
"""
from __future__ import annotations

from ..backward import sum_to
from ..function import Function
from .kernels import column_sums


class Add(Function):
    """y = a + b;  da = g;  db = g"""

    def forward(self, a, b):
        return a + b

    def backward(self, g, a, b):
        return g, g


class Sub(Function):
    """y = a - b;  da = g;  db = -g"""

    def forward(self, a, b):
        return a - b

    def backward(self, g, a, b):
        return g, (-g if self.needs_grad[1] else None)


class Neg(Function):
    """y = -x;  dx = -g"""

    def forward(self, x):
        return -x

    def backward(self, g, x):
        return (-g,)


class Mul(Function):
    """y = a·b;  da = g·b;  db = g·a"""

    def forward(self, a, b):
        return a * b

    def backward(self, g, a, b):
        ga = g * b if self.needs_grad[0] else None
        gb = g * a if self.needs_grad[1] else None
        return ga, gb


class Div(Function):
    """y = a / b;  da = g / b;  db = -g·a / b²"""

    def forward(self, a, b):
        return a / b

    def backward(self, g, a, b):
        ga = g / b
        gb = -ga * a / b if self.needs_grad[1] else None  # -g·a/b², from g/b already at hand
        return ga, gb


class PowScalar(Function):
    """y = x ** c for a Python number c;  dx = g·c·x ** (c - 1)

    Values are IEEE's pow, as NumPy's: (-0.0) ** -0.5 is +inf and (-inf) ** -0.5 is 0, where
    PyTorch, computing rsqrt, gives -inf and NaN."""

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
    """y = a ** b for tensors;  da = g·b·a ** (b - 1);  db = g·a ** b·log a

    db is computed only when b needs a gradient, because log a is NaN for a < 0 even where
    the power itself is fine. Two limits are taken as PyTorch takes them, where the formulas
    give 0 · inf = NaN: da = 0 where b = 0 (also at a = 0), and db = 0 where a = 0 and b >= 0.
    """

    def forward(self, a, b):
        return a ** b

    def backward(self, g, a, b):
        xp = self.xp
        ga = xp.where(b == 0, 0, g * (b * a ** (b - 1))) if self.needs_grad[0] else None
        gb = xp.where((a == 0) & (b >= 0), 0, g * (a ** b * xp.log(a))) if self.needs_grad[1] else None
        return ga, gb


class Cast(Function):
    """y = x in another dtype;  dx = g cast back to x's dtype"""

    def forward(self, x, dtype):
        return self.backend.cast(x, dtype)

    def backward(self, g, x):
        return (g.astype(x.dtype),)


class MatMul(Function):
    """y = a @ b, matrix products of (..., n, k) and (..., k, m), batch axes broadcast.
    da = g @ bᵀ;  db = aᵀ @ g  (each summed over the batch axes it was broadcast along)

    Its output's shape tells nothing about whether an input's batch axes were broadcast
    (the matrix axes differ anyway), so it sums them back itself, as Expand does.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, a, b):
        return self.xp.matmul(a, b)

    def backward(self, g, a, b):  # g: (..., n, m)
        matmul = self.xp.matmul
        ga = sum_to(matmul(g, b.swapaxes(-1, -2)), a.shape) if self.needs_grad[0] else None  # (..., n, k)
        gb = sum_to(matmul(a.swapaxes(-1, -2), g), b.shape) if self.needs_grad[1] else None  # (..., k, m)
        return ga, gb


class Linear(Function):
    """y = x @ w + b for a 2-D x (N, in), w (in, out), b (out,): the layer every model repeats.
    dx = g @ wᵀ;  dw = xᵀ @ g;  db = Σ g over the N rows

    One op instead of MatMul then Add: the bias is added into the product in place,
    saving a pass over the (N, out) output and a buffer of its size.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, w, b):
        y = self.xp.matmul(x, w)  # (N, out)
        y += b
        return y

    def backward(self, g, x, w, b):  # g: (N, out)
        gx = self.xp.matmul(g, w.T) if self.needs_grad[0] else None  # (N, in)
        gw = self.xp.matmul(x.T, g) if self.needs_grad[1] else None  # (in, out)
        gb = column_sums(self.xp, g) if self.needs_grad[2] else None  # (out,)
        return gx, gw, gb
