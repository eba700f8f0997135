"""Token ids in, boolean attention masks out (True = may attend, the project's one convention).

Masks are built once per forward pass and shaped to broadcast against the
attention scores (B, h, T_q, T_k), so every layer uses them as they are.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from tinygrad_tx import Tensor


def as_ids(ids: Any, device: str) -> Tensor:
    """Integer ids (a list, a NumPy array or a Tensor) as an integer Tensor on `device`."""
    ids = ids if isinstance(ids, Tensor) else Tensor(np.asarray(ids), device=device)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, not {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"token ids must have shape (batch, length), not {ids.shape}")
    return ids


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens: (B, T) ids -> (B, 1, 1, T), broadcast over heads and queries."""
    B, T = ids.shape
    return ids.ne(pad_id).reshape(B, 1, 1, T)


@lru_cache(maxsize=32)
def causal_mask(length: int, device: str) -> Tensor:
    """(T, T): query i may see keys 0..i, never the future (made once per length and device)."""
    return Tensor(np.tri(length, dtype=bool), device=device)


def target_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Decoder self-attention: keys that are real tokens AND not in the future: (B, T) -> (B, 1, T, T)."""
    return padding_mask(ids, pad_id) & causal_mask(ids.shape[1], ids.device)
