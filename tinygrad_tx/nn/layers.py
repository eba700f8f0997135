"""The basic layers: Linear, Embedding, LayerNorm, Dropout. Each holds its parameters
and calls a function from `tinygrad_tx.functional`."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..tensor import Tensor
from . import init
from .module import Module


def parameter(*shape: int, device: str | None = None, name: str | None = None) -> Tensor:
    """A float32 leaf that requires grad (filled by an initialiser right after)."""
    return Tensor(np.zeros(shape, dtype=np.float32), requires_grad=True, device=device, name=name)


class Linear(Module):
    """y = x @ weight + bias, with weight stored (in, out) so the forward reads as the math.

    Initialised as PyTorch does: U(-1/√in, 1/√in) for weight and bias.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None):
        bound = 1 / math.sqrt(in_features)
        self.weight = init.uniform_(parameter(in_features, out_features, device=device), -bound, bound)
        self.bias = init.uniform_(parameter(out_features, device=device), -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}, bias={self.bias is not None}"


class Embedding(Module):
    """A table of `num` vectors of size `dim`, looked up by integer id. N(0, 1) as in PyTorch;
    the `padding_idx` row starts at zero and receives no gradient."""

    def __init__(self, num: int, dim: int, padding_idx: int | None = None, device: str | None = None):
        self.padding_idx = padding_idx = F.padding_row(padding_idx, num)  # -1: the last row, as in PyTorch
        weight = init.normal_(parameter(num, dim))
        if padding_idx is not None:
            host = weight.numpy()
            host[padding_idx] = 0
            weight.data = weight.backend.from_host(host)
        self.weight = weight.to(device) if device else weight

    def forward(self, ids) -> Tensor:
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}, padding_idx={self.padding_idx}"


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, device: str | None = None):
        self.eps = eps
        self.weight = init.ones_(parameter(dim, device=device))
        self.bias = init.zeros_(parameter(dim, device=device))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class Dropout(Module):
    """Active in training mode only: `model.eval()` turns it off (and makes decoding deterministic)."""

    def __init__(self, p: float = 0.1):
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
