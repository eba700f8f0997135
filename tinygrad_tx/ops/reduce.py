"""Reductions and their mirror image, broadcasting.

Sum and Expand are each other's gradient: summing copies a gradient to every
summed element (an expand), expanding adds up the gradients of the copies (a
sum). `sum_to` is the engine's one mechanism for undoing broadcasting.
"""
from __future__ import annotations

from typing import Sequence

from ..autograd import Function
from ..tensor import Tensor
from .unary import constant


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


class Sum(Function):
    def forward(self, x, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims
        return x.sum(axis=axis, keepdims=keepdims)

    def backward(self, g):
        (x,) = self.inputs
        return (g.reshape(kept_shape(x.shape, self.axis)).expand(x.shape),)


class Max(Function):
    """Maximum; the gradient goes to the maximal elements, split evenly between ties."""

    def forward(self, x, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims
        return x.max(axis=axis, keepdims=keepdims)

    def backward(self, g):
        x = self.inputs[0].data
        is_max = x == x.max(axis=self.axis, keepdims=True)
        share = is_max / is_max.sum(axis=self.axis, keepdims=True)
        g = g.reshape(kept_shape(x.shape, self.axis)).expand(x.shape)
        return (g * constant(self, share.astype(x.dtype, copy=False)),)


class Expand(Function):
    """Broadcast to a larger shape (a read-only view: no memory is copied)."""

    def forward(self, x, shape):
        return self.backend.xp.broadcast_to(x, shape)

    def backward(self, g):
        return (g.sum_to(self.inputs[0].shape),)


def sum_to(t: Tensor, shape: tuple) -> Tensor:
    """Sum `t` over the axes broadcasting added (leading) or stretched (size 1 in `shape`)."""
    lead = t.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"cannot sum a tensor of shape {t.shape} to the larger shape {shape}")
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and t.shape[lead + i] != 1)
    axes = tuple(range(lead)) + stretched
    if not axes:
        return t
    summed = Sum.apply(t, axis=axes, keepdims=True)
    return summed.reshape(shape) if lead else summed
