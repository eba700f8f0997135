"""A decoder-only language model (GPT; Radford et al., 2018) from the same blocks.

A GPT block is an encoder layer whose self-attention is causal; the stack uses
learned positions, pre-LN, and an output head tied to the token embedding.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import Tensor, nn

from .attention import KVCache
from .checkpoint import Checkpointable, Size
from .config import GPTConfig, built_from
from .masks import token_ids
from .transformer import Encoder


@built_from(GPTConfig)
class GPT(Checkpointable, nn.Module):
    """`model(ids)` (B, T) -> next-token logits (B, T, vocab); `generate` continues a prompt."""

    config: GPTConfig
    SIZES = {"num_layers": Size("body.layers", None), "vocab": Size("body.embed.tokens.weight", 0),
             "d_model": Size("tokens.weight", 1), "max_len": Size("positions.weight", 0),
             "d_ff": Size("ff.linear1.weight", 1, in_layers=True)}

    def __init__(self):
        cfg = self.config
        self.body = Encoder(cfg, cfg.vocab, cfg.num_layers, learned_positions=True)

    @property
    def device(self) -> str:
        return self.body.embed.tokens.weight.device

    def forward(self, ids: Any, cache: list[KVCache] | None = None) -> Tensor:
        """(B, T) ids -> logits (B, T, vocab). With a `cache`, the ids continue the cached positions."""
        h = self.body(token_ids(ids, self.device), causal=True, cache=cache)  # (B, T, D)
        return h @ self.body.embed.tokens.weight.T  # tied head: (B, T, vocab)

    def new_cache(self) -> list[KVCache]:
        return self.body.new_cache()

    @tx.no_grad()
    def generate(self, ids: Any, max_new_tokens: int, temperature: float = 0.0,
                 rng: np.random.Generator | None = None) -> np.ndarray:
        """Continue the prompts `ids` (B, T) by `max_new_tokens`: (B, T + max_new_tokens) host ids.

        `temperature=0` picks the most likely token; otherwise tokens are sampled from
        softmax(logits / temperature) with `rng`. The prompt is read once, then each new
        token costs one position thanks to the key/value cache.
        """
        tokens = np.asarray(ids.numpy() if isinstance(ids, Tensor) else ids)
        rng = rng or np.random.default_rng()
        cache, step = self.new_cache(), tokens
        for _ in range(max_new_tokens):
            logits = self(step, cache)[:, -1].astype("float64")  # (B, vocab)
            step = _pick(logits, temperature, rng)[:, None]  # (B, 1)
            tokens = np.concatenate([tokens, step], axis=1)
        return tokens


def _pick(logits: Tensor, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """One token per row (host ids): the argmax, or a sample at `temperature`."""
    if temperature == 0:
        return logits.numpy().argmax(axis=-1)
    cumulative = np.cumsum((logits / temperature).softmax(axis=-1).numpy(), axis=-1)  # (B, vocab)
    return (rng.random((len(logits), 1)) < cumulative).argmax(axis=-1)
