"""Sequence classification with a Transformer encoder (BERT-style, without the [CLS] token)."""
from __future__ import annotations

from typing import Any

import tinygrad_tx as tx
from tinygrad_tx import Tensor, nn

from .checkpoint import Checkpointable, Size
from .config import ClassifierConfig, built_from
from .masks import padding_mask, token_ids
from .transformer import Encoder


@built_from(ClassifierConfig)
class EncoderClassifier(Checkpointable, nn.Module):
    """`model(ids)` (B, S) -> class logits (B, num_classes).

    The encoder's states are averaged over the real tokens only: a mean that
    counted padding would change with the amount of padding in the batch.
    """

    config: ClassifierConfig
    SIZES = {"num_layers": Size("encoder.layers", None), "vocab": Size("encoder.embed.tokens.weight", 0),
             "d_model": Size("tokens.weight", 1), "num_classes": Size("head.weight", 1),
             "d_ff": Size("ff.linear1.weight", 1, in_layers=True)}

    def __init__(self):
        cfg = self.config
        self.encoder = Encoder(cfg, cfg.vocab, cfg.num_layers)
        self.head = nn.Linear(cfg.d_model, cfg.num_classes)

    def forward(self, ids: Any) -> Tensor:
        ids = token_ids(ids, self.encoder.embed.tokens.weight.device)
        B, S = ids.shape
        keep = padding_mask(ids, self.config.pad_id)  # (B, 1, 1, S)
        h = self.encoder(ids, keep)  # (B, S, D)
        real = keep.reshape(B, S, 1).astype(h.dtype)  # (B, S, 1): 1 for tokens, 0 for padding
        count = real.sum(axis=1)  # (B, 1)
        pooled = (h * real).sum(axis=1) / tx.where(count > 0, count, 1.0)  # (B, D); an all-pad row gives 0
        return self.head(pooled)  # (B, num_classes)
