"""float16 fused ops (and GELU) compute in float32, as PyTorch's do.

float16 stops at 65504 and keeps 11 bits: a softmax's sum over 100,000 classes is inf,
a layer norm's mean of values near 30 is off by 0.008 before anything is normalised,
and squares overflow above 256. PyTorch computes such ops in float32 and rounds the
result once; `in_float32` makes an op do the same: float16 inputs are widened
for forward and backward, and the output and the gradients rounded back to float16.
Other dtypes pass through untouched. (Plain `sum` widens on its own: NumPy adds float16
along a strided axis in float16, where 10,000 ones make 2048, so `Sum` and the engine's
`sum_to` add float16 in float32 and round once.)
"""
from __future__ import annotations

import functools

import numpy as np


def in_float32(cls: type) -> type:
    """Class decorator: the op's float16 work is done in float32, in forward and in backward, on
    raw arrays and on Tensors (create_graph) alike."""
    forward, backward = cls.forward, cls.backward

    @functools.wraps(forward)
    def widened_forward(self, *arrays, **params):
        if not _is_half(arrays[0]):  # the ops check that their floating inputs share one dtype
            return forward(self, *arrays, **params)
        return forward(self, *map(_widen, arrays), **params).astype(np.float16)

    @functools.wraps(backward)
    def widened_backward(self, g, *inputs):
        if not _is_half(g):
            return backward(self, g, *inputs)
        grads = backward(self, g.astype(np.float32), *map(_widen, inputs))
        return tuple(None if d is None else d.astype(np.float16) for d in grads)

    cls.forward, cls.backward = widened_forward, widened_backward
    return cls


def _is_half(a) -> bool:
    return a.dtype == np.float16


def _widen(a):
    return a.astype(np.float32) if _is_half(a) else a
