"""Translating batches of sentences and scoring the results.

Exact match (the whole output right), token accuracy (position by position
against the reference, over the reference's length) and corpus BLEU from
sacrebleu (the standard implementation, so numbers compare with papers).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx.inspect import attention_maps

from .data import BOS_ID, EOS_ID, PAD_ID, Vocab, detokenize, pad, tokenize
from ..decoding import beam_search, greedy_decode
from ..transformer import Transformer


class InputTooLong(ValueError):
    """A sentence longer than the model's maximum length."""


def encode_sources(sentences: Sequence[str], vocab: Vocab, level: str, max_len: int):
    """Sentences -> padded (B, S) ids, refusing any longer than the model can place."""
    ids = []
    for sentence in sentences:
        tokens = tokenize(sentence, level)
        if len(tokens) > max_len:
            raise InputTooLong(f"input of {len(tokens)} tokens is longer than the model's maximum "
                               f"length {max_len}: {sentence[:60]!r}")
        ids.append(vocab.encode(tokens))
    return pad(ids, PAD_ID)


def translate(model: Transformer, sentences: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab,
              levels: tuple[str, str], beam: int = 1, batch_size: int = 256) -> list[str]:
    """Translate sentences with greedy search (beam=1) or beam search; a sentence without
    tokens translates to "" (a row of padding alone would make the model invent one)."""
    max_len = model.config.max_len
    outputs = [""] * len(sentences)
    todo = [i for i, sentence in enumerate(sentences) if tokenize(sentence, levels[0])]
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        src = encode_sources([sentences[i] for i in batch], src_vocab, levels[0], max_len - 2)
        limit = min(max_len - 1, 2 * src.shape[1] + 10)
        if beam > 1:
            ids = beam_search(model, src, limit, BOS_ID, EOS_ID, beam_size=beam)
        else:
            ids = greedy_decode(model, src, limit, BOS_ID, EOS_ID)
        for i, row in zip(batch, ids):
            outputs[i] = detokenize(tgt_vocab.decode(row), levels[1])
    return outputs


def score(hypotheses: Sequence[str], references: Sequence[str], level: str) -> dict:
    """exact_match, token_accuracy (both in %), bleu (sacrebleu's corpus BLEU) and n."""
    import sacrebleu

    exact = sum(h == r for h, r in zip(hypotheses, references))
    right = total = 0
    for h, r in zip(hypotheses, references):
        h_tokens, r_tokens = tokenize(h, level), tokenize(r, level)
        right += sum(a == b for a, b in zip(h_tokens, r_tokens))
        total += len(r_tokens)
    n = len(references)
    # character-level outputs are one "word" each: score their characters, not their words
    bleu = sacrebleu.corpus_bleu(list(hypotheses), [list(references)], tokenize="char" if level == "char" else "13a")
    return {"exact_match": 100.0 * exact / max(n, 1), "token_accuracy": 100.0 * right / max(total, 1),
            "bleu": bleu.score, "n": n}


def cross_attention(model: Transformer, src, output_ids) -> np.ndarray:
    """Cross-attention weights (heads, T, S) of the last decoder layer for one sentence.

    The model is run once more, teacher-forced on its own output (BOS + output),
    while `tx.inspect.attention_maps` records what each attention module looked at.
    """
    last = f"decoder.layers.{len(model.decoder.layers) - 1}.cross_attn"
    with tx.no_grad(), attention_maps(model) as maps:
        model(src, np.concatenate([[BOS_ID], output_ids])[None])
    return maps[last][-1].numpy()[0]
