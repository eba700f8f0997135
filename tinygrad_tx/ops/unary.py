"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, abs, gelu.

Backward recomputes what it needs from the input (`xp.tanh(x)`) instead of
keeping the output: written with `self.xp`, the same line then serves the fast
array backward and the recorded Tensor backward of `create_graph=True`.
"""
from __future__ import annotations

import math

from ..autograd import Function, OnceDifferentiable


class Exp(Function):
    def forward(self, x):
        return self.xp.exp(x)

    def backward(self, g, x):
        return (g * self.xp.exp(x),)


class Log(Function):
    def forward(self, x):
        return self.xp.log(x)

    def backward(self, g, x):
        return (g / x,)


class Sqrt(Function):
    def forward(self, x):
        return self.xp.sqrt(x)

    def backward(self, g, x):
        return (g * 0.5 / self.xp.sqrt(x),)


class Tanh(Function):
    def forward(self, x):
        return self.xp.tanh(x)

    def backward(self, g, x):
        t = self.xp.tanh(x)
        return (g * (1 - t * t),)


def sigmoid(xp, x):
    """1 / (1 + e^-x), in its tanh form, which never overflows."""
    return 0.5 * (xp.tanh(0.5 * x) + 1)


class Sigmoid(Function):
    def forward(self, x):
        return sigmoid(self.xp, x)

    def backward(self, g, x):
        s = sigmoid(self.xp, x)
        return (g * s * (1 - s),)


class Relu(Function):
    def forward(self, x):
        return self.xp.maximum(x, 0)

    def backward(self, g, x):
        # the mask cast first: NumPy multiplies float by bool through a slow casting loop
        return (g * (x > 0).astype(g.dtype),)


class Abs(Function):
    def forward(self, x):
        return self.xp.abs(x)

    def backward(self, g, x):
        return (g * self.xp.sign(x),)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class Gelu(OnceDifferentiable):
    """GELU(x) = x·Φ(x) (Hendrycks & Gimpel), exact via erf or by PyTorch's tanh approximation."""

    saved = ("approximate", "t", "cdf")

    def forward(self, x, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f'gelu: approximate must be "none" or "tanh", not {approximate!r}')
        self.approximate = approximate
        if approximate == "tanh":
            self.t = self.xp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
            return 0.5 * x * (1 + self.t)
        self.cdf = (0.5 * (1 + self.backend.erf(x * (1 / math.sqrt(2))))).astype(x.dtype)  # Φ(x); erf may widen float16
        return x * self.cdf

    def backward(self, g, x):
        if self.approximate == "tanh":
            t = self.t
            du = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)  # d/dx of tanh's argument
            return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du),)
        pdf = self.xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))  # φ(x)
        return (g * (self.cdf + x * pdf),)
