"""Model configurations: one dataclass per model instead of long argument lists.

Each model lists its options once, with their defaults, in its constructor's
signature (where `help()` shows them), and keeps them as `model.config`; the
layers read what they need from it, and `save` writes it as JSON so that `load`
can call the constructor again.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

C = TypeVar("C")


@dataclass(kw_only=True)
class LayerConfig:
    """What every layer and embedding of a stack reads."""
    d_model: int
    num_heads: int
    d_ff: int
    dropout: float
    max_len: int
    norm_first: bool  # False: post-LN, as in the paper; True: pre-LN
    activation: str  # of the feed-forward layers: "relu" or "gelu"


@dataclass(kw_only=True)
class TransformerConfig(LayerConfig):
    src_vocab: int
    tgt_vocab: int
    num_encoder_layers: int
    num_decoder_layers: int
    pad_id: int
    tie_embeddings: bool  # share the target embedding with the output projection


@dataclass(kw_only=True)
class GPTConfig(LayerConfig):
    vocab: int
    num_layers: int


@dataclass(kw_only=True)
class ClassifierConfig(LayerConfig):
    vocab: int
    num_classes: int
    num_layers: int
    pad_id: int


def config_from(cls: type[C], args: dict[str, Any]) -> C:
    """The config `cls` built from a constructor's `locals()`."""
    return cls(**{f.name: args[f.name] for f in fields(cls)})
