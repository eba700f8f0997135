"""Embedding lookup and dropout (their ways in: `tinygrad_tx.functional`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import Backend
from ..function import Function
from .kernels import as_rows
from .select import ScatterAdd, check_range
from .twice import grad_op


def dropout_mask(backend: Backend, shape: tuple, dtype: Any, p: float) -> Any:
    """Keep each element with probability 1 - p, scaled by 1/(1 - p): (mask · x) has x's
    expected value, so evaluation needs no rescaling."""
    return backend.bernoulli_keep(shape, p) * np.dtype(dtype).type(1 / (1 - p))


class Embedding(Function):
    """y = weight[ids], one row of `weight` per id.
    dweight = g scattered back to the rows of the ids, with add, but for the uses of `padding_idx`
    dids = none (integer ids)

    The add matters: an id used twice in a batch receives both gradients. The ids are values, so they are
    checked where values are, in forward, at every call (NumPy would wrap a negative one
    around silently, CuPy any bad one). `padding_idx` is a row's index in [0, num) (the way in,
    `F.embedding`, normalises a negative one). The scatter is an op of its own (`ScatterAdd`,
    whose gradient is indexing again), so the gradient can be differentiated again."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("flat_ids", "keep")

    def forward(self, weight, ids, padding_idx):
        check_range(self.backend, ids, weight.shape[0], "embedding: id")
        self.flat_ids = ids.reshape(-1)  # (N,)
        self.keep = None if padding_idx is None else (self.flat_ids != padding_idx).astype(weight.dtype)[:, None]
        return weight[ids]  # (..., D)

    def backward(self, g, weight, ids):
        rows = as_rows(g)  # (N, D): the gradient of each id's row
        if self.keep is not None:
            rows = rows * self.keep  # (N, D): a padding id's use sends nothing back; its row stays (PyTorch's rule)
        return grad_op(self, ScatterAdd, rows, shape=weight.shape, index=self.flat_ids, advanced=True), None


class Dropout(Function):
    """y = x·m, m = 0 with probability p and 1/(1 - p) otherwise (`dropout_mask`);  dx = g·m"""

    saved = ("scaled_keep",)

    def forward(self, x, p):
        self.scaled_keep = dropout_mask(self.backend, x.shape, x.dtype, p)
        return x * self.scaled_keep

    def backward(self, g, x):
        return (g * self.scaled_keep,)
