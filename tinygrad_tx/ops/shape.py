"""Shape ops: reshape, transpose, concatenate, stack. They move numbers, never change them,
so each gradient just moves the gradient back."""
from __future__ import annotations

from typing import Sequence

from ..autograd import Function
from ..tensor import Tensor


class Reshape(Function):
    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, shape):
        return x.reshape(shape)

    def backward(self, g, x):
        return (g.reshape(x.shape),)


class Transpose(Function):
    """Permute axes (NumPy's `transpose(axes)`); the gradient applies the inverse permutation."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("axes",)

    def forward(self, x, axes):
        self.axes = tuple(a % x.ndim for a in axes)  # non-negative, or backward's inverse comes out wrong
        return x.transpose(axes)

    def backward(self, g, x):
        inverse = sorted(range(len(self.axes)), key=self.axes.__getitem__)
        return (g.transpose(inverse),)


class Cat(Function):
    """Join along an existing axis; each input's gradient is its slice of g."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("axis",)

    def forward(self, *xs, axis):
        self.axis = axis
        return self.xp.concatenate(xs, axis=axis)

    def backward(self, g, *xs):
        grads, start = [], 0
        for x in xs:
            stop = start + x.shape[self.axis]
            grads.append(g[(slice(None),) * self.axis + (slice(start, stop),)])
            start = stop
        return tuple(grads)


def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along `axis` (all tensors on one device, of one dtype)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat needs at least one tensor")
    dtypes = sorted({str(t.dtype) for t in tensors})
    if len(dtypes) > 1:  # NumPy would promote, and each input's gradient would come back in the wrong dtype
        raise TypeError(f"cat: dtype mismatch {' and '.join(dtypes)}; cast with .astype()")
    ndim = tensors[0].ndim
    if not -ndim <= axis < ndim:
        raise ValueError(f"cat: axis {axis} is out of range for {ndim}-dimensional tensors")
    return Cat.apply(*tensors, axis=axis % ndim)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join along a new axis: a reshape to insert it, then `cat`."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack: all tensors must have one shape, got {sorted(shapes)}")
    ndim = tensors[0].ndim + 1
    if not -ndim <= axis < ndim:
        raise ValueError(f"stack: axis {axis} is out of range for the {ndim}-dimensional result")
    axis %= ndim
    return cat([t.reshape(*t.shape[:axis], 1, *t.shape[axis:]) for t in tensors], axis)
