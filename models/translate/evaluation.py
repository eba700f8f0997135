"""Translating batches of sentences and scoring the results.

Exact match (the whole output is one of the references), token accuracy (position
by position against the closest reference) and corpus BLEU and chrF from sacrebleu
(the standard implementation, so numbers compare with papers), with every
reference a held-out source has. BLEU needs 4-grams: on shorter sentences `summary`
says so and leads with exact match and chrF.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx.inspect import attention_maps

from .corpus import normalise
from .inputs import number, whole
from ..text.data import BOS_ID, EOS_ID, PAD_ID, Vocab, pad
from ..text.tokenization import Tokenizer
from ..beam_tree import BeamTree
from ..decoding import beam_search, greedy_decode
from ..transformer import Transformer


BEAM = 6
"""The beam `evaluate`, `translate` and train's final report use unless --beam (or the run's choice,
tuning.py) says otherwise: NMT toolkits default to beam search, 4 to 6 wide; on Tatoeba English-French
greedy search (--beam 1) scored about 3 BLEU lower (docs/results/translate-experiments.md: "What ten
minutes buy"), and beam 6 as much as beam 4 or up to 0.4 more on the validation splits of seven
ten-minute runs (five of the 18k-pair list, one each of 38k and 76k pairs), where beam 8 added
nothing at 1.3x the cost.
Validation during training stays greedy, for speed."""

LENGTH_PENALTY = 1.0
"""GNMT's length penalty α (`decoding.gnmt_penalty`) of beam search, unless a run chose another: on
the validation splits of eight ten-minute runs of the 18k-pair Tatoeba list, beam 6 scored 0.33 BLEU
higher on average at α 1 than at 0.6 (six of eight higher), and 0.05 on four runs of the 38k and 76k
lists; on the eight runs' test splits, after the choice, 0.07 (docs/results/translate-experiments.md:
"The length penalty, and the order of a batch")."""

MAX_BEAM = 16
BEAMS = whole(1, MAX_BEAM)
"""The beam widths a run's decoding, --beam and the explorer accept, one range for all: the choice tries
up to 6 (tuning.py), and a width costs its share of every step (beam 10^7 ran out of memory)."""
MAX_LENGTH_PENALTY = 5.0
LENGTH_PENALTIES = number(0, MAX_LENGTH_PENALTY)
"""The length penalties accepted, likewise: α 0 is none, the choice tries up to 1.5, and α 2 already
scored much lower (NaN scored 0%, infinity cut every output to one token)."""


class InputTooLong(ValueError):
    """A sentence longer than the model's maximum length."""


def encode_sources(sentences: Sequence[str], vocab: Vocab, tokenizer: Tokenizer, max_len: int):
    """Normalised sentences -> padded (B, S) ids, refusing any longer than the model can place."""
    ids = []
    for sentence in sentences:
        tokens = tokenizer.encode(sentence)
        if len(tokens) > max_len:
            raise InputTooLong(f"input of {len(tokens)} {tokenizer.kind} tokens is longer than the model's "
                               f"maximum of {max_len}: {sentence[:60]!r}; split it into shorter sentences")
        ids.append(vocab.encode(tokens))
    return pad(ids, PAD_ID)


def translate(model: Transformer, sentences: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab,
              tokenizers: tuple[Tokenizer, Tokenizer], beam: int = 1, batch_size: int = 256,
              record: BeamTree | None = None, length_penalty: float = LENGTH_PENALTY) -> list[str]:
    """Translate sentences with greedy search (beam=1) or beam search.

    Each sentence is normalised first, exactly as the training corpus was; one without
    tokens translates to "" (a row of padding alone would make the model invent one).
    `record` is handed to the beam search (see `BeamTree`); with it, beam=1 runs as a
    beam search of width 1, which finds what greedy search finds.
    """
    max_len = model.config.max_len
    sentences = [normalise(s) for s in sentences]
    outputs = [""] * len(sentences)
    todo = [i for i, sentence in enumerate(sentences) if tokenizers[0].encode(sentence)]
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        src = encode_sources([sentences[i] for i in batch], src_vocab, tokenizers[0], max_len - 2)
        limit = np.minimum(max_len - 1, 2 * (src != PAD_ID).sum(axis=1) + 10)  # (B,) each source's own
        if beam > 1 or record is not None:
            ids = beam_search(model, src, limit, BOS_ID, EOS_ID, beam_size=beam, length_penalty=length_penalty,
                              record=record)
        else:
            ids = greedy_decode(model, src, limit, BOS_ID, EOS_ID)
        for i, row in zip(batch, ids):
            outputs[i] = tokenizers[1].decode(tgt_vocab.decode(row))
    return outputs


def bleu_tokenisation(tokenizer: Tokenizer) -> str:
    """sacrebleu's tokenisation for BLEU: its usual 13a, but characters for a character-level target,
    whose outputs are one "word" each."""
    return "char" if tokenizer.kind == "char" else "13a"


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Each source's references as sacrebleu takes them: one stream per reference position, None
    marking "no k-th reference here"."""
    return [[refs[k] if k < len(refs) else None for refs in references]
            for k in range(max((len(refs) for refs in references), default=0))]


def score(hypotheses: Sequence[str], references: Sequence[Sequence[str]], tokenizer: Tokenizer) -> dict:
    """Scores of hypotheses[i] against every reference in references[i].

    exact_match: the output is one of the references; token_accuracy: position by
    position against the reference it matches best, over that reference's length
    (both in %); bleu and chrf: sacrebleu's corpus scores with all references;
    n: sources scored, references: references used; bleu_defined: some output has 4 tokens
    (else BLEU is 0 by its definition, whatever the outputs).
    """
    import sacrebleu

    exact = sum(h in refs for h, refs in zip(hypotheses, references))
    right = total = 0
    for h, refs in zip(hypotheses, references):
        h_tokens = tokenizer.encode(h)
        ref_tokens = [tokenizer.encode(r) for r in refs]
        hits = [sum(a == b for a, b in zip(h_tokens, r)) / max(len(r), 1) for r in ref_tokens]
        best = ref_tokens[int(np.argmax(hits))]
        right += sum(a == b for a, b in zip(h_tokens, best))
        total += len(best)
    n = len(references)
    streams = reference_streams(references)
    bleu = sacrebleu.corpus_bleu(list(hypotheses), streams, tokenize=bleu_tokenisation(tokenizer))
    chrf = sacrebleu.corpus_chrf(list(hypotheses), streams)
    return {"exact_match": 100.0 * exact / max(n, 1), "token_accuracy": 100.0 * right / max(total, 1),
            "bleu": bleu.score, "chrf": chrf.score, "n": n, "references": sum(map(len, references)),
            "bleu_defined": bleu.totals[-1] > 0}


def summary(metrics: dict, digits: int = 2) -> str:
    """The scores in one line, those that mean something first.

    BLEU is a geometric mean over 1- to 4-gram precisions, so where no output has 4 tokens
    (3-word sentences) it is 0 however right the outputs are (sacrebleu's definition, as the
    paper's); then the line says so and leads with exact match and chrF, which count whole
    sentences and characters."""
    exact, chrf = f"exact match {metrics['exact_match']:.{digits}f}%", f"chrF {metrics['chrf']:.{digits}f}"
    tokens, bleu = f"token accuracy {metrics['token_accuracy']:.{digits}f}%", f"BLEU {metrics['bleu']:.{digits}f}"
    if metrics["bleu_defined"]:
        return f"{exact}, {tokens}, {bleu}, {chrf}"
    return (f"{exact}, {chrf}, {tokens}, {bleu} (no output has 4 tokens, so BLEU, which counts 4-grams, "
            "says nothing here: read exact match and chrF)")


def by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[Sequence[str]],
              tokenizer: Tokenizer) -> list[tuple[int, int, float]]:
    """(source length in tokens, sources, exact match %) for each length present, shortest first."""
    buckets: dict[int, list[bool]] = {}
    for source, h, refs in zip(sources, hypotheses, references):
        buckets.setdefault(len(tokenizer.encode(normalise(source))), []).append(h in refs)
    return [(length, len(hits), 100.0 * sum(hits) / len(hits)) for length, hits in sorted(buckets.items())]


def cross_attention(model: Transformer, src, output_ids) -> np.ndarray:
    """Cross-attention weights (heads, T, S) of the last decoder layer for one sentence.

    The model is run once more, teacher-forced on its own output (BOS + output),
    while `tx.inspect.attention_maps` records what each attention module looked at.
    """
    last = f"decoder.layers.{len(model.decoder.layers) - 1}.cross_attn"
    with tx.no_grad(), attention_maps(model) as maps:
        model(src, np.array([[BOS_ID, *output_ids]], dtype=np.int64))  # (1, T + 1); an empty output is BOS alone
    return maps[last][-1].numpy()[0]
