"""The blocks a transformer stacks: feed-forward, residual + LayerNorm, encoder and decoder layers.

Names follow torch.nn.TransformerEncoderLayer / DecoderLayer where they can
(`self_attn`, `linear1`, `linear2`), so weights map across one to one.
"""
from __future__ import annotations

from typing import Callable

import tinygrad_tx.functional as F
from tinygrad_tx import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .config import LayerConfig

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact: x·Φ(x), Φ by erf
    # PyTorch's GELU(approximate="tanh"), GPT-2's: on a NumPy CPU, which has no erf, far cheaper than
    # the exact one, for the same scores (docs/results/translate-experiments.md, "The defaults, and why each")
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class FeedForward(nn.Module):
    """The same two-layer MLP at every position (§3.3): D -> d_ff -> D."""

    def __init__(self, cfg: LayerConfig):
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {cfg.activation!r}")
        self.linear1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.linear2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.activation_p)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.linear1(x))  # (B, T, d_ff)
        return self.linear2(self.dropout(h))  # (B, T, D)


class Residual(nn.Module):
    """A sublayer wrapped in its residual connection and LayerNorm.

    Post-LN (the paper, §5.4): norm(x + dropout(sublayer(x))).
    Pre-LN (`norm_first`): x + dropout(sublayer(norm(x))), which leaves an
    un-normalised path from input to output and trains deep stacks without
    warm-up (Xiong et al., 2020); such stacks end with one more LayerNorm.
    """

    def __init__(self, cfg: LayerConfig):
        self.norm = nn.LayerNorm(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward. With `causal=True` it is also a GPT block."""

    def __init__(self, cfg: LayerConfig):
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.attention_p)
        self.ff = FeedForward(cfg)
        self.attn_res, self.ff_res = Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = False,
                cache: KVCache | None = None) -> Tensor:
        """x: (B, T, D); mask: broadcastable to (B, h, T, T), True = may attend."""
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=mask, causal=causal, cache=cache))
        return self.ff_res(x, self.ff)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's memory, feed-forward."""

    def __init__(self, cfg: LayerConfig):
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.attention_p)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.attention_p)
        self.ff = FeedForward(cfg)
        self.attn_res, self.cross_res, self.ff_res = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, memory: Tensor, self_mask: Tensor | None, memory_mask: Tensor | None,
                cache: tuple[KVCache, KVCache] | None = None) -> Tensor:
        """x: (B, T, D), memory: (B, S, D); masks broadcastable to (B, h, T, T) and (B, h, T, S).

        Self-attention is always causal (a position never sees later ones), in training
        and in step-wise decoding alike; `self_mask` only hides padding.
        `cache`: (self-attention cache, cross-attention cache) for step-wise decoding.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=self_mask, causal=True, cache=self_cache))
        x = self.cross_res(x, lambda h: self.cross_attn(h, memory, mask=memory_mask, cache=cross_cache))
        return self.ff_res(x, self.ff)
