"""Shape ops: reshape, transpose, concatenate, stack. They move numbers, never change them,
so each gradient just moves the gradient back."""
from __future__ import annotations

from ..function import Function


class Reshape(Function):
    """y = x's elements, in the same (row-major) order, in a new shape;  dx = g reshaped to x's shape"""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back

    def forward(self, x, shape):
        return x.reshape(shape)

    def backward(self, g, x):
        return (g.reshape(x.shape),)


class Transpose(Function):
    """y = x with its axes permuted (NumPy's `transpose(axes)`);  dx = g with the inverse permutation"""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("axes",)

    def forward(self, x, axes):
        self.axes = tuple(a % x.ndim for a in axes)  # non-negative, or backward's inverse comes out wrong
        return x.transpose(axes)

    def backward(self, g, x):
        inverse = sorted(range(len(self.axes)), key=self.axes.__getitem__)
        return (g.transpose(inverse),)


class Cat(Function):
    """y = xs[0], xs[1], ... joined along an existing `axis`;  dxs[i] = the slice of g that xs[i] filled"""

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
