"""An ensemble of encoder-decoders that decodes as one: the mean of their next-token probabilities.

Models trained apart (other initial weights, other dropout masks) make different mistakes, so
averaging what they predict at each step cancels some of them: the oldest reliable gain in
translation quality (Hansen & Salamon 1990; every WMT winner since 2016 ensembles). Averaging
probabilities, not logits, keeps each model's own calibration: a model that is unsure
contributes a flat distribution instead of outvoting the others with large logits.

`Ensemble` has the methods greedy and beam search call on a `Transformer` (`encode`,
`decode`, `new_cache`, `config`, `device`), so decoding.py searches it unchanged: its memory is
a list (one per model), its cache one flat list (the models' caches end to end, so the beam
search's reorder reaches them all), and `decode` returns log p(next token) rather than logits,
which the search's log_softmax leaves as it is (they are normalised already).
"""
from __future__ import annotations

from typing import Any

from tinygrad_tx import Tensor

from .attention import KVCache
from .transformer import Transformer


class Ensemble:
    """Models that share vocabularies and padding id, searched as one model."""

    def __init__(self, models: list[Transformer]):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        first = models[0].config
        for model in models[1:]:
            c = model.config
            if (c.src_vocab, c.tgt_vocab, c.pad_id) != (first.src_vocab, first.tgt_vocab, first.pad_id):
                raise ValueError(f"the models of an ensemble must share vocabularies: {c.src_vocab}/{c.tgt_vocab} "
                                 f"tokens against {first.src_vocab}/{first.tgt_vocab}")
        self.models = models
        self.config = min((m.config for m in models), key=lambda c: c.max_len)  # the longest input all can place
        self.device = models[0].device
        self._cache_sizes = [len(m.new_cache()) for m in models]

    def eval(self) -> "Ensemble":
        for model in self.models:
            model.eval()
        return self

    def encode(self, src: Any) -> list[Tensor]:
        """(B, S) ids -> each model's memory (B, S, D)."""
        return [model.encode(src) for model in self.models]

    def new_cache(self) -> list[KVCache]:
        return [c for model in self.models for c in model.new_cache()]

    def decode(self, tgt_in: Any, memories: list[Tensor], src: Any, cache: list[KVCache] | None = None) -> Tensor:
        """log of the mean of the models' next-token probabilities: (B, T, tgt_vocab), float64.
        (The search then rules out padding, as it does for one model.)"""
        mean, at = None, 0
        for model, memory, size in zip(self.models, memories, self._cache_sizes):
            part = None if cache is None else cache[at:at + size]
            at += size
            probs = model.decode(tgt_in, memory, src, part).astype("float64").softmax(axis=-1)  # (B, T, V)
            mean = probs if mean is None else mean + probs
        return (mean / len(self.models)).log()
