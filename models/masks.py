"""Token ids in, boolean attention masks out (True = may attend, the project's one convention).

Only padding needs a mask of its own: the causal rule of decoder self-attention
is the attention op's `causal=True`, for training and cached decoding alike.
"""
from __future__ import annotations

from typing import Any

import tinygrad_tx.functional as F
from tinygrad_tx import Tensor


def token_ids(ids: Any, device: str) -> Tensor:
    """(batch, length) integer ids, from a list, a NumPy array or a Tensor."""
    return F.as_ids(ids, device, "token ids", ndim=2)


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens: (B, T) ids -> (B, 1, 1, T), broadcast over heads and queries."""
    B, T = ids.shape
    return ids.ne(pad_id).reshape(B, 1, 1, T)
