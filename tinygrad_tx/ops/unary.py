"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, abs, gelu.

Backward recomputes what it needs from the input (`xp.tanh(x)`) instead of
keeping the output: written with `self.xp`, the same line then serves the fast
array backward and the recorded Tensor backward of `create_graph=True`.
"""
from __future__ import annotations

import math

from ..function import Function
from .kernels import GELU_A, SQRT_2_OVER_PI, gelu_backward, gelu_tanh
from .precision import in_float32
from .twice import fast_backward


class Exp(Function):
    """y = exp(x);  dx = g·exp(x)"""

    def forward(self, x):
        return self.xp.exp(x)

    def backward(self, g, x):
        return (g * self.xp.exp(x),)


class Log(Function):
    """y = log x;  dx = g / x"""

    def forward(self, x):
        return self.xp.log(x)

    def backward(self, g, x):
        return (g / x,)


class Sqrt(Function):
    """y = √x;  dx = g / (2√x)"""

    def forward(self, x):
        return self.xp.sqrt(x)

    def backward(self, g, x):
        return (g * 0.5 / self.xp.sqrt(x),)


class Tanh(Function):
    """y = tanh x;  dx = g·(1 - tanh² x)"""

    def forward(self, x):
        return self.xp.tanh(x)

    def backward(self, g, x):
        t = self.xp.tanh(x)
        return (g * (1 - t * t),)


def sigmoid_parts(xp, x):
    """e = e^-|x| and s = σ(|x|) = 1 / (1 + e), both in (0, 1]: nothing overflows.

    σ(x) is s for x >= 0 and e·s for x < 0. e·s equals 1 - s, but stays accurate where
    1 - s cancels to 0 (the tanh form ½(tanh(x/2) + 1) did: it was 0 below x ≈ -17 in
    float32, so -log σ(-50) was inf instead of 50).
    """
    e = xp.exp(xp.where(x >= 0, -x, x))  # e^-|x|
    return e, 1 / (1 + e)


class Sigmoid(Function):
    """y = σ(x) = 1 / (1 + e^-x);  dx = g·σ(x)·σ(-x)

    Both computed from e^-|x| (`sigmoid_parts`), so nothing overflows and neither tail
    rounds to 0 early."""

    def forward(self, x):
        e, s = sigmoid_parts(self.xp, x)
        return self.xp.where(x >= 0, s, e * s)

    def backward(self, g, x):
        e, s = sigmoid_parts(self.xp, x)
        return (g * (e * s * s),)  # σ'(x) = σ(x)·σ(-x) = e·s², accurate in both tails


class Relu(Function):
    """y = max(x, 0);  dx = g where x > 0 or x is NaN (as PyTorch), 0 elsewhere"""

    def forward(self, x):
        return self.xp.maximum(x, 0)

    def backward(self, g, x):
        # g passes unless x <= 0, so a NaN input passes its gradient on, as in PyTorch. The
        # mask is cast first: NumPy multiplies float by bool through a slow casting loop, and
        # where(x <= 0, 0, g) took 12 times as long (0.8 ms for a toy model's 768×256)
        return (g * (~(x <= 0)).astype(g.dtype),)


class Abs(Function):
    """y = |x|;  dx = g·sign(x), the sign 0 at 0 and at NaN (as PyTorch)"""

    def forward(self, x):
        return self.xp.abs(x)

    def backward(self, g, x):
        # sign(x) from comparisons: 0 at a NaN, as PyTorch's (NumPy's sign(NaN) is NaN)
        return (g * ((x > 0).astype(g.dtype) - (x < 0).astype(g.dtype)),)


@in_float32  # float16's x * x overflows above 256: its gradient was 0 · inf = NaN
@fast_backward(gelu_backward)  # the tanh form's gradient in place (kernels.py)
class Gelu(Function):
    """y = x·Φ(x), Φ the normal distribution function (Hendrycks & Gimpel): exact, via erf, or
    by PyTorch's tanh approximation Φ(x) ≈ ½(1 + t), t = tanh(√(2/π)·(x + 0.044715·x³)).
    dx = g·(Φ(x) + x·φ(x)), φ = Φ' the normal density; for the tanh form g·(½(1 + t) + ½x·(1 - t²)·u'),
    u' = √(2/π)·(1 + 3·0.044715·x²) the derivative of tanh's argument

    Exact GELU at +inf is inf·1 = inf (PyTorch gives inf or NaN, depending on its code path).
    """

    saved = ("approximate", "t", "cdf")

    def forward(self, x, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f'gelu: approximate must be "none" or "tanh", not {approximate!r}')
        self.approximate = approximate
        if approximate == "tanh":  # the formula above, computed in place (kernels.py)
            y, self.t = gelu_tanh(self.xp, x)
            return y
        self.cdf = (0.5 * (1 + self.backend.erf(x * (1 / math.sqrt(2))))).astype(x.dtype)  # Φ(x); erf may widen float16
        return x * self.cdf

    def backward(self, g, x):
        if self.approximate == "tanh":
            t = self.xp.tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x * x))  # x*x*x: NumPy's x**3 calls pow(), 60x slower
            du = SQRT_2_OVER_PI * (1 + 3 * GELU_A * x * x)  # d/dx of tanh's argument
            return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du),)
        cdf = 0.5 * (1 + Erf.apply(x * (1 / math.sqrt(2)))) if self.creating_graph else self.cdf  # Φ(x): a node again
        pdf = self.xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))  # φ(x)
        return (g * (cdf + x * pdf),)


class Erf(Function):
    """y = erf(x) = (2/√π) ∫₀ˣ exp(-s²) ds;  dx = g·(2/√π)·exp(-x²)
    (exact GELU's Φ as an op, for Gelu's gradient under create_graph)"""

    def forward(self, x):
        return self.backend.cast(self.backend.erf(x), x.dtype)  # erf may widen float16

    def backward(self, g, x):
        return (g * (2 / math.sqrt(math.pi)) * self.xp.exp(-x * x),)
