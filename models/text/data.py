"""From text pairs to padded batches of token ids.

The pipeline is: read pairs (`corpus.read_corpus` or a task generator) -> split
them (`corpus.split_by_source`) -> tokenise and build vocabularies
(`tokenization.Tokenizer`, `Vocab`) -> encode (`encode_pairs`) -> batch (`Batcher`).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Iterator

import numpy as np

from .tokenization import Tokenizer

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIALS))

Pair = tuple[str, str]
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


class DataError(ValueError):
    """Bad input data: the message says which file/line and what is wrong."""


# --- vocabulary --------------------------------------------------------------

class Vocab:
    """A fixed token <-> id mapping whose first ids are the special tokens.

    Text is text: a special id comes only from the program (BOS and EOS around a sentence, PAD to
    fill a batch, UNK for a token never seen), never from a user's characters. So `ids`, which
    `encode` reads, holds the text's tokens alone, and a corpus's literal `<eos>` is a token of its
    own, after the specials, not the end of its sentence (it was: a word tokenizer's `<eos>` taught
    the model to stop there, and a source's `<pad>` was masked out)."""

    def __init__(self, tokens: list[str]):
        n = len(SPECIALS)
        if tuple(tokens[:n]) != SPECIALS or len(set(tokens[n:])) != len(tokens) - n:
            raise ValueError(f"vocabulary must start with {SPECIALS} and have no duplicates after them")
        self.tokens = list(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens) if i >= n}  # the text's tokens

    @classmethod
    def build(cls, token_lists: Iterable[list[str]], min_freq: int = 1) -> Vocab:
        """Keep tokens seen at least `min_freq` times, most frequent first.

        Ties are broken by the token itself, so the same data always gives the
        same ids (a checkpoint stays usable with a rebuilt vocabulary).
        """
        counts = Counter(token for tokens in token_lists for token in tokens)
        kept = [t for t, c in counts.items() if c >= min_freq]  # a literal "<eos>" too: text, not a special
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + kept)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: Iterable[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = [self.ids.get(token, UNK_ID) for token in tokens]
        return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first EOS, without PAD and BOS (model output -> text)."""
        tokens = []
        for i in map(int, ids):
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                tokens.append(self.tokens[i])
        return tokens

    def to_dict(self) -> dict:
        """JSON-serialisable form, saved next to model checkpoints."""
        return {"tokens": list(self.tokens)}

    @classmethod
    def from_dict(cls, d: dict) -> Vocab:
        return cls(d["tokens"])


# --- encoding ----------------------------------------------------------------

def encode_pairs(pairs: Iterable[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                 tokenizers: tuple[Tokenizer, Tokenizer]) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of each side, without BOS/EOS (the Batcher adds those)."""
    src_ids, tgt_ids = [], []
    for source, target in pairs:
        src_ids.append(src_vocab.encode(tokenizers[0].encode(source)))
        tgt_ids.append(tgt_vocab.encode(tokenizers[1].encode(target)))
    return src_ids, tgt_ids


# --- batching --------------------------------------------------------------

def pad(seqs: list[list[int]], pad_id: int = PAD_ID, multiple: int = 1) -> np.ndarray:
    """Stack sequences into an int64 (len(seqs), longest) array, padding on the right; with
    `multiple`, the length is rounded up to a multiple of it (a few shapes for `tx.jit`)."""
    longest = max(map(len, seqs), default=0)
    out = np.full((len(seqs), -(-longest // multiple) * multiple), pad_id, dtype=np.int64)
    for row, seq in enumerate(seqs):
        out[row, :len(seq)] = seq
    return out


class Batcher:
    """Length-bucketed, padded batches that are reproducible per epoch.

    Padding is wasted compute, so each batch should hold sequences of similar
    length.  Sorting the whole data set by length would make every epoch
    identical, so instead the (shuffled) examples are cut into chunks of
    `chunk_batches * batch_size`, each chunk is sorted by length and cut into
    batches, and finally the order of the batches is shuffled.

    The randomness of epoch `e` comes only from (seed, e), so a run resumed
    at epoch `e` sees exactly the batches an uninterrupted run would.  With
    `seed=None` every call draws fresh randomness instead.

    `length_multiple` pads every batch to a length that is a multiple of it: a
    little wasted compute, in exchange for a handful of shapes, each of which a
    jitted training step records once and then replays.
    """

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]], batch_size: int,
                 seed: int | None = 0, shuffle: bool = True, chunk_batches: int = 50, length_multiple: int = 1):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        if not src_ids:
            raise ValueError("cannot batch an empty data set")
        if batch_size < 1 or chunk_batches < 1:
            raise ValueError(f"batch_size and chunk_batches must be >= 1, got {batch_size}, {chunk_batches}")
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.chunk_size = chunk_batches * batch_size
        self.length_multiple = length_multiple
        # whose length orders a chunk first: "source" or "target" (docs/results/translate-experiments.md)
        self.sort_first = "source"

    def __len__(self) -> int:
        """Batches per epoch (only the very last batch may be smaller)."""
        return -(-len(self.src_ids) // self.batch_size)

    def batches(self, epoch: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Batch]:
        """Yield (src, tgt_in, tgt_out): src (B, S); tgt_in = BOS + target and
        tgt_out = target + EOS, both (B, T).  All int64, padded with PAD_ID.

        With `shards` > 1 (data parallelism), each batch is dealt out row by row and
        only rows `shard`, `shard + shards`, ... are yielded, padded to their own
        length. A part left empty by a short last batch gets the batch's first row
        with a target of padding only: it adds nothing to the loss or the gradients,
        but that process still takes the step with the others."""
        for index in self.batch_indices(epoch):
            rows = index[shard::shards]
            empty = len(rows) == 0
            rows = index[:1] if empty else rows
            targets = [self.tgt_ids[i] for i in rows]
            m = self.length_multiple
            tgt_out = pad([t + [EOS_ID] for t in targets], multiple=m)
            yield (pad([self.src_ids[i] for i in rows], multiple=m), pad([[BOS_ID] + t for t in targets], multiple=m),
                   np.full_like(tgt_out, PAD_ID) if empty else tgt_out)

    def for_epoch(self, epoch: int) -> Batcher:
        """The batcher of `epoch`'s token ids: these ids are every epoch's."""
        return self

    def batch_indices(self, epoch: int = 0) -> list[np.ndarray]:
        """The example indices of each batch of `epoch`, in batch order."""
        rng = np.random.default_rng(None if self.seed is None else [self.seed, epoch])
        n = len(self.src_ids)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        src_len = np.array([len(s) for s in self.src_ids])
        tgt_len = np.array([len(t) for t in self.tgt_ids])
        first, then = (src_len, tgt_len) if self.sort_first == "source" else (tgt_len, src_len)
        batches = []
        for start in range(0, n, self.chunk_size):
            chunk = order[start:start + self.chunk_size]
            chunk = chunk[np.lexsort((then[chunk], first[chunk]))]  # by `first`, then `then` (lexsort: last key first)
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


class SampledBatcher:
    """A `Batcher` whose training pairs are cut into subwords anew every epoch
    (`Tokenizer.sample`: subword regularisation), the cut a function of (seed, epoch) only,
    so a resumed run sees exactly the batches an uninterrupted one would."""

    def __init__(self, pairs: list[Pair], vocabs: tuple[Vocab, Vocab], tokenizers: tuple[Tokenizer, Tokenizer],
                 alpha: float, batch_size: int, seed: int = 0, length_multiple: int = 1):
        if not pairs:
            raise ValueError("cannot batch an empty data set")
        self.pairs, self.vocabs, self.tokenizers, self.alpha = pairs, vocabs, tokenizers, alpha
        self.batch_size, self.seed, self.length_multiple = batch_size, seed, length_multiple
        self._cached: tuple[int, Batcher] | None = None  # the epoch being trained, cut once

    def __len__(self) -> int:
        return -(-len(self.pairs) // self.batch_size)

    def for_epoch(self, epoch: int) -> Batcher:
        """A `Batcher` of `epoch`'s cut of the pairs."""
        if self._cached is None or self._cached[0] != epoch:
            ids = []
            for side, (vocab, tokenizer) in enumerate(zip(self.vocabs, self.tokenizers)):
                # a 32-bit seed for sentencepiece from (seed, epoch, side): independent draws for each
                seed = int(np.random.SeedSequence([self.seed, epoch, side]).generate_state(1)[0])
                texts = [pair[side] for pair in self.pairs]
                ids.append([vocab.encode(tokens) for tokens in tokenizer.sample(texts, self.alpha, seed)])
            self._cached = epoch, Batcher(ids[0], ids[1], self.batch_size, seed=self.seed)
        self._cached[1].length_multiple = self.length_multiple
        return self._cached[1]

    def batches(self, epoch: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Batch]:
        """`Batcher.batches` of `epoch`'s cut."""
        return self.for_epoch(epoch).batches(epoch, shard, shards)
