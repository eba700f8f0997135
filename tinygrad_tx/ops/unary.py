"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, abs, gelu.

Backward recomputes what it needs from the input tensor (`x.exp()`, `x.tanh()`)
instead of keeping the output array: that keeps each node free of a reference
to its own output, and written in Tensor ops it is differentiable again.
"""
from __future__ import annotations

import math

from ..autograd import OnceDifferentiable, Function
from ..tensor import Tensor


def constant(fn: Function, array) -> Tensor:
    """A gradient-free tensor on the op's device (a mask or a sign, say)."""
    return Tensor._from_op(array, fn.backend)


class Exp(Function):
    def forward(self, x):
        return self.backend.xp.exp(x)

    def backward(self, g):
        (x,) = self.inputs
        return (g * x.exp(),)


class Log(Function):
    def forward(self, x):
        return self.backend.xp.log(x)

    def backward(self, g):
        (x,) = self.inputs
        return (g / x,)


class Sqrt(Function):
    def forward(self, x):
        return self.backend.xp.sqrt(x)

    def backward(self, g):
        (x,) = self.inputs
        return (g * 0.5 / x.sqrt(),)


class Tanh(Function):
    def forward(self, x):
        return self.backend.xp.tanh(x)

    def backward(self, g):
        t = self.inputs[0].tanh()
        return (g * (1 - t * t),)


class Sigmoid(Function):
    def forward(self, x):
        # tanh form: no overflow warning from exp(-x) at large negative x
        return 0.5 * (self.backend.xp.tanh(0.5 * x) + 1)

    def backward(self, g):
        s = self.inputs[0].sigmoid()
        return (g * s * (1 - s),)


class Relu(Function):
    def forward(self, x):
        return self.backend.xp.maximum(x, 0)

    def backward(self, g):
        (x,) = self.inputs
        return (g * constant(self, x.data > 0),)


class Abs(Function):
    def forward(self, x):
        return self.backend.xp.abs(x)

    def backward(self, g):
        (x,) = self.inputs
        return (g * constant(self, self.backend.xp.sign(x.data)),)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class Gelu(OnceDifferentiable):
    """GELU(x) = x·Φ(x) (Hendrycks & Gimpel), exact via erf or by PyTorch's tanh approximation."""

    def forward(self, x, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f'gelu: approximate must be "none" or "tanh", not {approximate!r}')
        self.x, self.approximate = x, approximate
        xp = self.backend.xp
        if approximate == "tanh":
            self.t = xp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
            return 0.5 * x * (1 + self.t)
        self.cdf = 0.5 * (1 + self.backend.erf(x * (1 / math.sqrt(2))))  # Φ(x)
        return x * self.cdf

    def backward(self, g):
        x, xp = self.x, self.backend.xp
        if self.approximate == "tanh":
            t = self.t
            du = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            gx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du
        else:
            pdf = xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))  # φ(x)
            gx = self.cdf + x * pdf
        return (constant(self, g.data * gx.astype(g.dtype, copy=False)),)
