"""Stateless neural-network functions (`import tinygrad_tx.functional as F`).

Thin wrappers over the op library with the argument checks a user needs; the
layers in `tinygrad_tx.nn` hold parameters and call these.
"""
from __future__ import annotations

from .ops import as_ids, cross_entropy, dropout, embedding, scaled_dot_product_attention  # noqa: F401
from .ops.arith import Linear
from .ops.fused import LayerNorm
from .tensor import Tensor

__all__ = ["as_ids", "linear", "relu", "gelu", "softmax", "log_softmax", "layer_norm", "dropout", "embedding",
           "cross_entropy", "scaled_dot_product_attention"]


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """x @ w + b with `w` of shape (in, out): (..., in) -> (..., out).

    Leading axes are flattened first, so BLAS sees one (N, in) @ (in, out) product.
    """
    if b is None or x.ndim == 0:
        return x @ w
    if x.shape[-1] != w.shape[0] or b.shape != (w.shape[-1],):
        raise ValueError(f"linear: input {x.shape}, weight {w.shape} and bias {b.shape} do not fit "
                         "(need (..., in), (in, out), (out,))")
    (x, w), (_, b) = x._pair(w, "linear"), x._pair(b, "linear")  # one dtype, or a clear error
    y = Linear.apply(x.reshape(-1, x.shape[-1]), w, b)  # (N, out)
    return y.reshape(*x.shape[:-1], w.shape[-1])


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return x.gelu(approximate)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis)


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise over the last axis, then `* weight + bias` (each of shape (D,), optional)."""
    if x.ndim == 0:
        raise ValueError("layer_norm: the input needs at least one axis to normalise, not a 0-d tensor")
    D = x.shape[-1]
    xp = x.backend.xp
    weight = weight if weight is not None else Tensor._from_op(xp.ones(D, dtype=x.dtype), x.backend)
    bias = bias if bias is not None else Tensor._from_op(xp.zeros(D, dtype=x.dtype), x.backend)
    if weight.shape != (D,) or bias.shape != (D,):
        raise ValueError(f"layer_norm: input of shape {x.shape} needs weight and bias of shape ({D},), "
                         f"got {weight.shape} and {bias.shape}")
    (x, weight), (_, bias) = x._pair(weight, "layer_norm"), x._pair(bias, "layer_norm")  # one dtype, or a clear error
    return LayerNorm.apply(x, weight, bias, eps=eps)
