"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""
from __future__ import annotations

from typing import Any

from tinygrad_tx import Tensor, nn

from .attention import KVCache
from .checkpoint import Checkpointable, Size
from .config import LayerConfig, TransformerConfig, built_from
from .embeddings import InputEmbedding
from .layers import DecoderLayer, EncoderLayer
from .masks import padding_mask, token_ids


class Encoder(nn.Module):
    """Embedding + positions, then `num_layers` encoder layers; pre-LN stacks end with a LayerNorm.

    With `causal=True` and learned positions this is a decoder-only LM's body (see `GPT`).
    """

    def __init__(self, cfg: LayerConfig, vocab: int, num_layers: int, learned_positions: bool = False):
        self.embed = InputEmbedding(cfg, vocab, learned_positions)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else None

    def forward(self, ids: Tensor, mask: Tensor | None = None, causal: bool = False,
                cache: list[KVCache] | None = None) -> Tensor:
        """(B, S) ids -> (B, S, D). `cache` (one per layer, from `new_cache`) for step-wise use."""
        x = self.embed(ids, offset=0 if cache is None else cache[0].length)  # (B, S, D)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, causal, None if cache is None else cache[i])
        return x if self.norm is None else self.norm(x)

    def new_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]


class Decoder(nn.Module):
    """Embedding + positions, then `num_layers` decoder layers; pre-LN stacks end with a LayerNorm."""

    def __init__(self, cfg: LayerConfig, vocab: int, num_layers: int):
        self.embed = InputEmbedding(cfg, vocab)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else None

    def forward(self, ids: Tensor, memory: Tensor, self_mask: Tensor | None, memory_mask: Tensor | None,
                cache: list[KVCache] | None = None) -> Tensor:
        """(B, T) ids, (B, S, D) memory -> (B, T, D).

        `self_mask` hides target padding; the future is hidden by the layers' causal
        self-attention. With a cache (from `new_cache`) the ids are the next positions
        after those cached.
        """
        x = self.embed(ids, offset=0 if cache is None else cache[0].length)  # (B, T, D)
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else (cache[2 * i], cache[2 * i + 1])
            x = layer(x, memory, self_mask, memory_mask, cache=layer_cache)
        return x if self.norm is None else self.norm(x)

    def new_cache(self) -> list[KVCache]:
        """Two caches per layer: self-attention, then cross-attention."""
        return [KVCache() for _ in range(2 * len(self.layers))]


@built_from(TransformerConfig)
class Transformer(Checkpointable, nn.Module):
    """Encoder-decoder Transformer; `model(src, tgt_in)` gives logits (B, T, tgt_vocab).

    Padding masks come from `pad_id`: source pads are hidden from encoder
    self-attention and from cross-attention, target pads (and the future) from
    decoder self-attention. Post-LN as in the paper, or pre-LN with `norm_first`.
    """

    config: TransformerConfig
    SIZES = {"num_encoder_layers": Size("encoder.layers", None), "num_decoder_layers": Size("decoder.layers", None),
             "src_vocab": Size("encoder.embed.tokens.weight", 0), "tgt_vocab": Size("decoder.embed.tokens.weight", 0),
             "d_model": Size("tokens.weight", 1), "d_ff": Size("ff.linear1.weight", 1, in_layers=True)}

    def __init__(self):
        cfg = self.config
        self.encoder = Encoder(cfg, cfg.src_vocab, cfg.num_encoder_layers)
        self.decoder = Decoder(cfg, cfg.tgt_vocab, cfg.num_decoder_layers)
        self.out = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.tgt_vocab)

    @property
    def device(self) -> str:
        return self.encoder.embed.tokens.weight.device

    def forward(self, src: Any, tgt_in: Any) -> Tensor:
        """(B, S) source ids, (B, T) target ids (BOS first) -> logits (B, T, tgt_vocab)."""
        src, tgt = token_ids(src, self.device), token_ids(tgt_in, self.device)
        src_keep = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        memory = self.encoder(src, src_keep)  # (B, S, D)
        tgt_keep = padding_mask(tgt, self.config.pad_id)  # (B, 1, 1, T); the future is hidden by causal=True
        return self.project(self.decoder(tgt, memory, tgt_keep, src_keep))

    def encode(self, src: Any) -> Tensor:
        """(B, S) ids -> memory (B, S, D)."""
        src = token_ids(src, self.device)
        return self.encoder(src, padding_mask(src, self.config.pad_id))

    def decode(self, tgt_in: Any, memory: Tensor, src: Any, cache: list[KVCache] | None = None) -> Tensor:
        """Logits (B, T, tgt_vocab) for `tgt_in` (B, T) given the memory of `src`.

        With a `cache` (from `new_cache`), pass only the new positions; the tokens fed
        step by step are assumed not to be padding.
        """
        src, tgt = token_ids(src, self.device), token_ids(tgt_in, self.device)
        src_keep = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        tgt_keep = None if cache is not None else padding_mask(tgt, self.config.pad_id)  # (B, 1, 1, T)
        return self.project(self.decoder(tgt, memory, tgt_keep, src_keep, cache))

    def project(self, h: Tensor) -> Tensor:
        """Decoder states (B, T, D) -> logits (B, T, V), through the target embedding when tied."""
        return self.out(h) if self.out is not None else h @ self.decoder.embed.tokens.weight.T

    def new_cache(self) -> list[KVCache]:
        """An empty key/value cache for step-wise `decode`."""
        return self.decoder.new_cache()
