"""Reductions and their mirror image, broadcasting.

Sum and Expand are each other's gradient: summing copies a gradient to every
summed element (an expand), expanding adds up the gradients of the copies (a
sum, done by the engine's `sum_to`).
"""
from __future__ import annotations

from typing import Sequence

from ..backward import sum_to, widened_sum
from ..function import Function


class Sum(Function):
    """y = Σ x over `axis`;  dx = g copied to every element it summed (broadcast back)"""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("axis",)

    def forward(self, x, axis, keepdims):
        self.axis = axis
        return widened_sum(x, axis, keepdims)  # float16 added in float32

    def backward(self, g, x):
        return (self.xp.broadcast_to(g.reshape(kept_shape(x.shape, self.axis)), x.shape),)


class Max(Function):
    """y = max x over `axis`;  dx = g / k on each of the k maximal elements, 0 elsewhere.

    Ties split the gradient evenly. A NaN is the maximum of its slice (NumPy's max and
    PyTorch's propagate it), so the gradient goes to the NaN positions, split evenly, as
    PyTorch's `max()` sends it: comparing with the maximum alone matched nothing (NaN ≠ NaN) and
    gave 0/0 = NaN everywhere. The maximum of an empty axis does not exist: an error, as in PyTorch.
    """

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("axis", "share")

    def forward(self, x, axis, keepdims):
        if x.size == 0 and any(x.shape[a] == 0 for a in axis):
            raise ValueError(f"axis {axis} is empty: the maximum of no numbers does not exist")
        self.axis = axis
        top = x.max(axis=axis, keepdims=True)
        is_max = (x == top) | self.xp.isnan(x)  # a NaN is the maximum of its slice
        self.share = is_max / is_max.sum(axis=axis, keepdims=True).astype(x.dtype)  # 1/k on k ties
        return top if keepdims else top.reshape([n for i, n in enumerate(x.shape) if i not in axis])

    def backward(self, g, x):
        return (g.reshape(kept_shape(x.shape, self.axis)) * self.share,)


class Expand(Function):
    """y = x broadcast to a larger `shape` (a read-only view: no memory is copied);
    dx = g summed over the axes broadcasting added or stretched"""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, shape):
        return self.xp.broadcast_to(x, shape)

    def backward(self, g, x):
        return (sum_to(g, x.shape),)


def normalize_axis(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Axes as a sorted tuple of non-negative ints; None means all of them."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
    return tuple(sorted(a % max(ndim, 1) for a in axes))


def kept_shape(shape: tuple, axes: tuple) -> tuple:
    """`shape` with the reduced axes kept as 1 (what keepdims=True gives)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))
