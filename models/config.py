"""Model configurations: each model's options, with their defaults, listed once.

As in nanoGPT, a config dataclass is the single list of a model's options. The
model is built from it: `Transformer(src_vocab, tgt_vocab, d_model=128)` fills a
`TransformerConfig` and keeps it as `model.config`, the layers read what they
need from it, and `save` writes it as JSON so that `load` can build the model
again. `@built_from(Config)` gives the model's constructor the config's
signature, so `help(Transformer)` lists every option.
"""
from __future__ import annotations

import inspect
from dataclasses import KW_ONLY, dataclass
from typing import Callable, TypeVar

M = TypeVar("M")


@dataclass(kw_only=True)
class LayerConfig:
    """What every layer and embedding of a stack reads."""
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1  # on the embeddings and each sublayer's output, before its residual sum
    attention_dropout: float | None = None  # on the attention weights; None: `dropout`
    activation_dropout: float | None = None  # on the feed-forward layers' hidden activations; None: `dropout`
    max_len: int = 512
    norm_first: bool = False  # False: post-LN, as in the paper; True: pre-LN
    activation: str = "relu"  # of the feed-forward layers: "relu", "gelu" or "gelu_tanh" (layers.ACTIVATIONS)

    @property
    def attention_p(self) -> float:
        """The dropout on the attention weights: `attention_dropout`, or `dropout` if that is None."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_p(self) -> float:
        """The dropout on the feed-forward activations: `activation_dropout`, or `dropout` if that is None."""
        return self.dropout if self.activation_dropout is None else self.activation_dropout


@dataclass
class TransformerConfig(LayerConfig):
    src_vocab: int
    tgt_vocab: int
    _: KW_ONLY
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    pad_id: int = 0
    tie_embeddings: bool = False  # share the target embedding with the output projection


@dataclass
class GPTConfig(LayerConfig):
    vocab: int
    _: KW_ONLY
    num_layers: int = 6
    norm_first: bool = True
    activation: str = "gelu"


@dataclass
class ClassifierConfig(LayerConfig):
    vocab: int
    num_classes: int
    _: KW_ONLY
    num_layers: int = 6
    pad_id: int = 0


def built_from(config_cls: type) -> Callable[[type[M]], type[M]]:
    """Class decorator: `Model(*args, **options)` builds `config_cls(*args, **options)` (or takes
    a ready config, `Model(config)`) as `self.config` before the model's own `__init__` runs,
    which then reads only the config."""
    def decorate(model_cls: type[M]) -> type[M]:
        build = model_cls.__init__

        def __init__(self, *args, **options) -> None:
            given = len(args) == 1 and not options and isinstance(args[0], config_cls)
            self.config = args[0] if given else config_cls(*args, **options)
            build(self)

        params = list(inspect.signature(config_cls).parameters.values())
        __init__.__signature__ = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
                                                    *params])
        __init__.__doc__ = f"Options and defaults: the fields of `{config_cls.__name__}`."
        model_cls.__init__ = __init__
        return model_cls
    return decorate
