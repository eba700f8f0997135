"""Stateless neural-network functions (`import tinygrad_tx.functional as F`).

The ways in to the op library's neural-network ops, with the argument checks a user
needs; the layers in `tinygrad_tx.nn` hold parameters and call these.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from . import observers
from .ops import (REDUCTIONS, Attention, Cat, CrossEntropy, Dropout, Embedding, LayerNorm, Linear, as_mask,
                  as_rows, attention_keep, attention_weights)
from .tensor import Tensor

__all__ = ["as_ids", "cat", "stack", "linear", "relu", "gelu", "softmax", "log_softmax", "layer_norm", "dropout", "embedding",
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
    y = Linear.apply(as_rows(x), w, b)  # (N, out)
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


def as_ids(ids: Any, device: str, what: str = "ids", ndim: int | None = None) -> Tensor:
    """Integer ids (a Python int or list, a NumPy array or a Tensor) as an integer Tensor on
    `device`, of `ndim` dimensions if given."""
    if not isinstance(ids, Tensor):
        ids = Tensor(np.asarray(ids) if isinstance(ids, (list, tuple, int)) else ids, device=device)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, not {ids.dtype}")
    if ndim is not None and ids.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimensions, not shape {ids.shape}")
    return ids


def embedding(ids: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """`weight[ids]` for integer `ids` of any shape: (...,) -> (..., D). The uses of row
    `padding_idx` (negative: counted from the end) send no gradient back."""
    ids = as_ids(ids, weight.device, "embedding: ids")
    return Embedding.apply(weight, ids, padding_idx=padding_row(padding_idx, weight.shape[0]))


def padding_row(padding_idx: Any, num: int) -> int | None:
    """`padding_idx` as the row it names in a table of `num` rows, a negative one counted from
    the end as in PyTorch (None stays None); refused here, at the call, when it names no row."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
        raise TypeError(f"embedding: padding_idx must be a whole number or None, not {padding_idx!r}")
    if not -num <= padding_idx < num:
        raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for a table of {num} rows "
                         f"(from {-num} to {num - 1})")
    return int(padding_idx) % num


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), not {p}")
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p)


def cross_entropy(logits: Tensor, target, ignore_index: int | None = None,
                  label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    """Cross-entropy of `logits` (..., C) against integer `target` (...), classes on the last axis."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, not {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], not {label_smoothing}")
    if logits.ndim == 0 or logits.dtype.kind != "f":
        raise TypeError(f"cross_entropy: logits must be a floating tensor with a class axis, "
                        f"not {logits.dtype} of shape {logits.shape}")
    target = as_ids(target, logits.device, "cross_entropy: targets")
    if target.shape != logits.shape[:-1]:
        raise ValueError(f"cross_entropy: logits of shape {logits.shape} need targets of shape "
                         f"{logits.shape[:-1]}, got {target.shape}")
    return CrossEntropy.apply(logits, target, ignore_index=ignore_index,
                              label_smoothing=label_smoothing, reduction=reduction)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask=None, causal: bool = False,
                                 dropout_p: float = 0.0, return_weights: bool = False):
    """softmax(q kᵀ / √d + mask) v on (..., T, d) tensors.

    `mask`: boolean, broadcastable to (..., T_q, T_k), True = may attend.
    `causal`: also hide keys after each query's position.
    `return_weights`: also return the attention weights (..., T_q, T_k), for pictures.
    """
    if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit "
                         "(need q (..., Tq, d), k (..., Tk, d), v (..., Tk, d_v))")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"attention: dtype mismatch q {q.dtype}, k {k.dtype}, v {v.dtype}; cast with .astype()")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attention: dropout_p must be in [0, 1), not {dropout_p}")
    mask = None if mask is None else as_mask(mask, q.backend, "scaled_dot_product_attention")
    scale = 1 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0  # d = 0: every score is 0, whatever the scale
    out = Attention.apply(q, k, v, mask=mask, causal=causal, dropout_p=dropout_p, scale=scale)
    if not return_weights:
        return out
    # no node is kept under no_grad, so there the weights are computed once more
    keep = attention_keep(q.backend, mask, causal, q.shape[-2], k.shape[-2])
    weights = out.grad_fn.p if out.grad_fn is not None else attention_weights(
        q.backend.xp, q.data, k.data, keep, scale)
    weights = q.backend.cast(weights, q.dtype)  # float16 attention keeps its weights in float32
    observers.show_read(out, "returned with attention weights made outside ops (return_weights=True)")
    return out, Tensor._from_op(weights, q.backend)


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
