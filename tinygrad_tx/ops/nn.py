"""Embedding lookup and dropout (their ways in: `tinygrad_tx.functional`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import Backend
from ..function import Function
from .kernels import as_rows
from .select import ScatterAdd, check_range


def dropout_mask(backend: Backend, shape: tuple, dtype: Any, p: float) -> Any:
    """Keep each element with probability 1 - p, scaled by 1/(1 - p): (mask · x) has x's
    expected value, so evaluation needs no rescaling."""
    return backend.bernoulli_keep(shape, p) * np.dtype(dtype).type(1 / (1 - p))


class Embedding(Function):
    """y = weight[ids], one row of `weight` per id.
    dweight = g scattered back to the rows of the ids, with add (0 on `padding_idx`'s row);  dids = none (integer ids)

    The add matters: an id used twice in a batch receives both gradients. The ids are values, so they are
    checked where values are, in forward, at every call (NumPy would wrap a negative one
    around silently, CuPy any bad one). Under create_graph the scatter is an op of its own
    (`ScatterAdd`, whose gradient is indexing again)."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("padding_idx",)

    def forward(self, weight, ids, padding_idx):
        check_range(ids, weight.shape[0], "embedding: id")
        self.padding_idx = padding_idx
        return weight[ids]  # (..., D)

    def backward(self, g, weight, ids):
        if self.creating_graph:  # on Tensors: the scatter recorded as an op
            flat_ids = ids.data.reshape(-1)  # (N,) integer ids are constants
            gw = ScatterAdd.apply(as_rows(g), shape=weight.shape, index=(flat_ids,), advanced=True)  # (num, D)
            if self.padding_idx is not None:
                gw = gw.masked_fill((self.backend.xp.arange(weight.shape[0]) == self.padding_idx)[:, None], 0.0)
            return gw, None
        gw = self.xp.zeros(weight.shape, dtype=g.dtype)  # (num, D)
        self.backend.scatter_add(gw, ids.reshape(-1), as_rows(g))
        if self.padding_idx is not None:
            gw[self.padding_idx] = 0  # the padding row stays as it is, as in PyTorch
        return gw, None


class Dropout(Function):
    """y = x·m, m = 0 with probability p and 1/(1 - p) otherwise (`dropout_mask`);  dx = g·m"""

    saved = ("scaled_keep",)

    def forward(self, x, p):
        self.scaled_keep = dropout_mask(self.backend, x.shape, x.dtype, p)
        return x * self.scaled_keep

    def backward(self, g, x):
        return (g * self.scaled_keep,)
