"""Multi-head attention (Vaswani et al. 2017, §3.2.2) and its key/value cache.

h heads of size d_model/h look for h different relations at the cost of one
full-width attention: project, split the width into heads, attend in every head
at once with the engine's fused `scaled_dot_product_attention`, join the heads,
project back.
"""
from __future__ import annotations

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor, nn
from tinygrad_tx.nn import init


class KVCache:
    """The keys and values one attention layer has computed, kept between decoding steps.

    Self-attention appends the keys and values of each step's new positions, so a
    step costs one position of projections instead of the whole prefix.
    Cross-attention projects the encoder memory at the first step and reuses it.
    """

    def __init__(self):
        self.k: Tensor | None = None  # (B, h, T_seen, d_head)
        self.v: Tensor | None = None  # (B, h, T_seen, d_head)

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions; returns the keys and values of every position seen."""
        if self.k is not None:
            k, v = tx.cat([self.k, k], axis=2), tx.cat([self.v, v], axis=2)  # (B, h, T_seen + T_new, d_head)
        self.k, self.v = k, v
        return k, v

    def reorder(self, index) -> None:
        """Keep the rows `index` (beam search: each surviving beam takes its parent's cache)."""
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]


def check_heads(d_model: int, num_heads: int) -> None:
    """The heads split the width evenly (d_model = num_heads · d_head); the command line asks too,
    before it writes anything."""
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")


class MultiHeadAttention(nn.Module):
    """Self-attention (`memory=None`) or cross-attention over `memory`.

    Weights are Xavier-uniform with zero biases, as in torch.nn.MultiheadAttention.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0):
        check_heads(d_model, num_heads)
        self.num_heads, self.d_head, self.dropout = num_heads, d_model // num_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        for linear in (self.w_q, self.w_k, self.w_v, self.w_o):
            init.xavier_uniform_(linear.weight)
            init.zeros_(linear.bias)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                causal: bool = False, cache: KVCache | None = None, return_weights: bool = False):
        """Attend from `x` (B, T, D) to `memory` (B, S, D), or to `x` itself when `memory` is None.

        `mask`: boolean, broadcastable to (B, h, T, S), True = may attend. `causal`: hide
        later keys (with a cache, the queries are the last T positions). `cache`: keys
        and values of earlier steps. Returns (B, T, D), and the attention weights
        (B, h, T, S) too when `return_weights` is set.
        """
        B, T, D = x.shape
        q = self._split_heads(self.w_q(x))  # (B, h, T, d_head)
        if memory is not None and cache is not None and cache.k is not None:
            k, v = cache.k, cache.v  # the memory's keys and values, projected at the first step
        else:
            source = x if memory is None else memory
            k, v = self._split_heads(self.w_k(source)), self._split_heads(self.w_v(source))  # (B, h, S, d_head)
            if cache is not None:
                k, v = cache.append(k, v)
        out = F.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal,
                                             dropout_p=self.dropout if self.training else 0.0,
                                             return_weights=return_weights)
        out, weights = out if return_weights else (out, None)
        out = self.w_o(out.transpose(0, 2, 1, 3).reshape(B, T, D))  # heads joined: (B, T, D)
        return (out, weights) if return_weights else out

    def _split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.reshape(B, T, self.num_heads, self.d_head).transpose(0, 2, 1, 3)  # (B, h, T, d_head)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, d_head={self.d_head}, dropout={self.dropout}"
