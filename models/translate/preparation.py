"""From a task or a corpus file to the batches a run trains on: pairs, splits, tokenizers,
vocabularies and the batcher.

A new run learns its tokenizers and vocabularies from its training pairs only (held-out
text must not shape them). With `--subword-sampling`, every epoch cuts the training pairs
into subwords anew (`SampledBatcher`), so the vocabularies hold every piece the tokenizers
can produce, not only those of the best cut. A resumed run reads them, and its held-out pairs, back from
the run directory, once the corpus is known to still give the pairs it was trained on
(`fingerprint`): retraining a subword tokenizer need not give the same pieces.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .corpus import Sources, group_references, read_corpus, split_by_source
from ..text.data import Batcher, Pair, SampledBatcher, Vocab, encode_pairs
from .run import RunError, fingerprint, read_held_out, read_run_json, read_tokenizers, read_vocabs
from .settings import TrainSettings
from .tasks import get_task
from ..text.tokenization import Tokenizer

JIT_SHAPES = 32  # records the jitted step keeps (least recently used evicted)
SAMPLED_EPOCHS = 4  # epochs whose batch shapes choose the padding multiple when each epoch is cut anew


@dataclass
class Prepared:
    """What a run trains and validates on."""

    train_pairs: list[Pair]
    valid_pairs: list[Pair]
    test_pairs: list[Pair]
    tokenizers: tuple[Tokenizer, Tokenizer]
    src_vocab: Vocab
    tgt_vocab: Vocab
    batcher: Batcher | SampledBatcher
    fingerprint: str  # of the splits as the corpus or task gives them (`run.fingerprint`)
    longest: int  # tokens in the longest training sentence, either side
    dropped: int  # pairs left out for being longer than --max-len
    notes: list[str]  # for the log: say, the corpus's unused columns

    @property
    def valid_sources(self) -> Sources:
        return group_references(self.valid_pairs)


def prepare(settings: TrainSettings, directory: Path) -> Prepared:
    """The data of the run `settings` describes, new or (`settings.resume`) saved in `directory`."""
    splits, kinds, notes = load_pairs(settings)
    digest = fingerprint(splits)
    if settings.resume:
        run = read_run_json(directory)
        tokenizers = read_tokenizers(directory, run)
    else:
        tokenizers = train_tokenizers(splits["train"], kinds, settings.vocab_size, settings.shared_vocab)
    splits, dropped = within_length(splits, tokenizers, settings.max_len)
    if settings.resume:
        src_vocab, tgt_vocab, splits = saved_data(directory, run, digest, splits, settings)
    else:
        src_vocab, tgt_vocab = new_vocabs(splits["train"], tokenizers, settings.shared_vocab,
                                          every_piece=settings.subword_sampling > 0)
    sampled = settings.subword_sampling > 0
    if sampled:
        batcher = SampledBatcher(splits["train"], (src_vocab, tgt_vocab), tokenizers, settings.subword_sampling,
                                 settings.batch_size, seed=settings.seed)
    else:
        batcher = Batcher(*encode_pairs(splits["train"], src_vocab, tgt_vocab, tokenizers), settings.batch_size,
                          seed=settings.seed)
    if settings.jit:
        batcher.length_multiple = length_multiple(batcher, JIT_SHAPES, epochs=SAMPLED_EPOCHS if sampled else 1)
    # a sampled cut may split a sentence down to its characters, one piece each (and "▁" for a space)
    longest = max(len(text) + 1 if sampled else len(tokenizer.encode(text))
                  for pair in splits["train"] for text, tokenizer in zip(pair, tokenizers))
    return Prepared(splits["train"], splits["valid"], splits["test"], tokenizers, src_vocab, tgt_vocab, batcher,
                    digest, longest, dropped, notes)


def load_pairs(settings: TrainSettings) -> tuple[dict[str, list[Pair]], tuple[str, str], list[str]]:
    """Train/valid/test pairs, the source/target tokenizer kinds, and notes for the log."""
    if settings.task is not None:
        task = get_task(settings.task)
        n = settings.n_held_out
        return task.make_splits(settings.seed, settings.n_train, n, n), (task.src_level, task.tgt_level), []
    corpus = read_corpus(settings.data, settings.src_col, settings.tgt_col)
    notes = [corpus.ignored_columns] if corpus.ignored_columns else []
    return split_by_source(corpus.pairs, settings.seed), (settings.tokenizer, settings.tokenizer), notes


def train_tokenizers(pairs: list[Pair], kinds: tuple[str, str], vocab_size: int,
                     shared: bool) -> tuple[Tokenizer, Tokenizer]:
    """Tokenizers learned from the training pairs only."""
    if shared:
        if kinds[0] != kinds[1]:
            raise ValueError(f"--shared-vocab needs one tokenizer for both sides, not {kinds[0]} and {kinds[1]}")
        tokenizer = Tokenizer.train(kinds[0], [s for s, _ in pairs] + [t for _, t in pairs], vocab_size)
        return tokenizer, tokenizer
    return (Tokenizer.train(kinds[0], [s for s, _ in pairs], vocab_size),
            Tokenizer.train(kinds[1], [t for _, t in pairs], vocab_size))


def within_length(splits: dict[str, list[Pair]], tokenizers: tuple[Tokenizer, Tokenizer],
                  max_len: int) -> tuple[dict[str, list[Pair]], int]:
    """The splits without pairs of more than `max_len` tokens on either side, and how many went.

    One very long line would otherwise set the model's maximum length, and every batch's
    attention arrays would be sized for it."""
    def fits(pair: Pair) -> bool:
        return all(len(tokenizer.encode(text)) <= max_len for text, tokenizer in zip(pair, tokenizers))

    kept = {name: [p for p in pairs if fits(p)] for name, pairs in splits.items()}
    dropped = sum(len(splits[name]) - len(kept[name]) for name in splits)
    empty = [name for name, pairs in kept.items() if not pairs]
    if empty:
        raise ValueError(f"no {' or '.join(empty)} pair is at most --max-len {max_len} tokens long")
    return kept, dropped


def new_vocabs(train_pairs: list[Pair], tokenizers: tuple[Tokenizer, Tokenizer], shared: bool,
               every_piece: bool = False) -> tuple[Vocab, Vocab]:
    """The tokens of the training pairs' best cut, most frequent first; with `every_piece`, then
    the subword pieces that cut never uses (a sampled cut may)."""
    src_tok, tgt_tok = tokenizers

    def vocab(token_lists: list[list[str]], tokenizer: Tokenizer) -> Vocab:
        built = Vocab.build(token_lists)
        if not every_piece:
            return built
        return Vocab(built.tokens + sorted(set(tokenizer.pieces()) - set(built.ids)))

    if shared:
        both = vocab([src_tok.encode(s) for s, _ in train_pairs] + [tgt_tok.encode(t) for _, t in train_pairs], src_tok)
        return both, both
    return (vocab([src_tok.encode(s) for s, _ in train_pairs], src_tok),
            vocab([tgt_tok.encode(t) for _, t in train_pairs], tgt_tok))


def saved_data(directory: Path, run: dict, digest: str, splits: dict[str, list[Pair]],
               settings: TrainSettings) -> tuple[Vocab, Vocab, dict[str, list[Pair]]]:
    """Vocabularies and held-out pairs of the run being resumed, once its corpus is known to be
    the same; training pairs whose source is held out are left out, so none can leak in."""
    saved = run["corpus"].get("fingerprint")
    if saved != digest:
        what = f"task {settings.task!r}" if settings.task else f"corpus {settings.data}"
        raise RunError(f"--resume: {what} does not give the pairs the run in {directory} was trained on "
                       f"(fingerprint {digest[:12]} now, {str(saved)[:12]} in run.json)")
    src_vocab, tgt_vocab = read_vocabs(directory, run)
    held_out = {name: read_held_out(directory, run, name) for name in ("valid", "test")}
    sources = {s for pairs in held_out.values() for s, _ in pairs}
    return src_vocab, tgt_vocab, {"train": [p for p in splits["train"] if p[0] not in sources], **held_out}


def length_multiple(batcher: Batcher | SampledBatcher, max_shapes: int, epochs: int = 1) -> int:
    """The smallest padding multiple (1, 2, 4, ...) that gives the first `epochs` epochs at most
    `max_shapes` batch shapes (batch size, source length, target length) together.

    The batcher's length buckets already give few shapes (2 to 22 an epoch on the built-in
    tasks), and padding further costs more than the jit's replay saves (multiples of 8 add
    40-50% tokens on the toy tasks), so lengths are padded only as far as needed to fit an
    epoch's shapes in the jit's cache."""
    longest = set()  # (batch size, longest source, longest target)
    for epoch in range(epochs):
        ids = batcher.for_epoch(epoch)
        src_len = [len(s) for s in ids.src_ids]
        tgt_len = [len(t) + 1 for t in ids.tgt_ids]  # BOS or EOS added
        longest |= {(len(i), max(src_len[k] for k in i), max(tgt_len[k] for k in i)) for i in ids.batch_indices(epoch)}
    multiple = 1
    while True:
        shapes = {(n, -(-s // multiple), -(-t // multiple)) for n, s, t in longest}
        if len(shapes) <= max_shapes:
            return multiple
        multiple *= 2
