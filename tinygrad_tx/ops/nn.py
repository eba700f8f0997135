"""Embedding lookup and dropout."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd import Function, OnceDifferentiable
from ..tensor import Tensor


def check_ids(ids: Any, size: int, op: str) -> None:
    """Integer ids in [0, size), checked here because CuPy would wrap a bad id around silently."""
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{op}: ids must be integers, not {ids.dtype}")
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= size)
    if bad.any():
        raise IndexError(f"{op}: id {int(ids[bad].reshape(-1)[0])} is out of range for size {size}")


def as_ids(ids: Any, device: str) -> Tensor:
    """Ids as an integer Tensor on `device` (a Python list of ints stays integer here)."""
    if isinstance(ids, Tensor):
        return ids
    return Tensor(np.asarray(ids) if isinstance(ids, (list, tuple, int)) else ids, device=device)


class Embedding(OnceDifferentiable):
    """Rows of `weight` picked by integer ids; the gradient scatters back with add,
    so an id used twice in a batch receives both gradients."""

    saved = ("padding_idx",)

    def forward(self, weight, ids, padding_idx):
        self.padding_idx = padding_idx
        return weight[ids]  # (..., D)

    def backward(self, g, weight, ids):
        gw = self.xp.zeros(weight.shape, dtype=g.dtype)  # (num, D)
        self.backend.scatter_add(gw, ids.reshape(-1), g.reshape(-1, weight.shape[1]))
        if self.padding_idx is not None:
            gw[self.padding_idx] = 0  # the padding row stays as it is, as in PyTorch
        return gw, None


def embedding(ids: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """`weight[ids]` for integer `ids` of any shape: (...,) -> (..., D)."""
    ids = as_ids(ids, weight.device)
    check_ids(ids.data, weight.shape[0], "embedding")
    return Embedding.apply(weight, ids, padding_idx=padding_idx)


class Dropout(Function):
    """Zero each element with probability p and scale the rest by 1/(1-p), so the
    expected value is unchanged and evaluation needs no rescaling."""

    saved = ("scaled_keep",)

    def forward(self, x, p):
        keep = self.backend.uniform(x.shape, x.dtype) >= p
        self.scaled_keep = keep * x.dtype.type(1 / (1 - p))
        return x * self.scaled_keep

    def backward(self, g, x):
        return (g * self.scaled_keep,)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), not {p}")
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p)
