"""From token ids to the vectors the first layer sees: token embeddings plus positions.

Attention itself is blind to order, so each position adds a vector saying where
it is: either the paper's fixed sinusoids (§3.5) or a learned table (GPT).
"""
from __future__ import annotations

import math

import numpy as np

import tinygrad_tx.functional as F
from tinygrad_tx import Tensor, nn
from tinygrad_tx.nn import init

from .config import LayerConfig


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)): (max_len, d_model).

    Interleaved, not two concatenated halves: each (sin, cos) pair turns by a fixed
    angle per position, so PE[pos + k] is a fixed rotation of PE[pos] and relative
    offsets are linear functions of the encoding.
    """
    pos = np.arange(max_len)[:, None]  # (max_len, 1)
    angle = pos / 10000.0 ** (np.arange(0, d_model, 2) / d_model)  # (max_len, ceil(d/2))
    table = np.zeros((max_len, d_model))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table


def _check_fits(offset: int, length: int, max_len: int) -> None:
    if offset + length > max_len:
        raise ValueError(f"positions up to {offset + length} but the model was built with max_len={max_len}")


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed table, computed once on the host and kept as a constant (not trained) Tensor."""

    def __init__(self, d_model: int, max_len: int):
        self.table = Tensor(sinusoidal_table(max_len, d_model).astype(np.float32))  # (max_len, D)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (B, T, D) at positions offset .. offset+T-1."""
        T = x.shape[1]
        _check_fits(offset, T, self.table.shape[0])
        return x + self.table[offset:offset + T].astype(x.dtype)  # (B, T, D)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position, N(0, 1) at the start like a token embedding."""

    def __init__(self, d_model: int, max_len: int):
        self.weight = init.normal_(nn.parameter(max_len, d_model))  # (max_len, D)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        T = x.shape[1]
        _check_fits(offset, T, self.weight.shape[0])
        return x + self.weight[offset:offset + T]  # (B, T, D)


class TokenEmbedding(nn.Module):
    """Looks ids up and scales by √d_model (§3.4).

    Drawn from N(0, 1/d_model), so after the scaling the vectors have unit variance,
    comparable to the positional encoding; used as a (tied) output projection, the
    same weight gives logits of unit variance from a normalised hidden state.
    """

    def __init__(self, vocab: int, d_model: int):
        self.weight = init.normal_(nn.parameter(vocab, d_model), std=d_model ** -0.5)  # (V, D)
        self.scale = math.sqrt(d_model)

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight) * self.scale  # (B, T, D)


class InputEmbedding(nn.Module):
    """Token embedding + positions, then dropout on the sum (§5.4)."""

    def __init__(self, cfg: LayerConfig, vocab: int, learned_positions: bool = False):
        self.tokens = TokenEmbedding(vocab, cfg.d_model)
        positions = LearnedPositionalEmbedding if learned_positions else SinusoidalPositionalEncoding
        self.positions = positions(cfg.d_model, cfg.max_len)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        """(B, T) ids at positions offset .. offset+T-1 -> (B, T, D)."""
        return self.dropout(self.positions(self.tokens(ids), offset))
