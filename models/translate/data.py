"""From text pairs to padded batches of token ids.

The pipeline is: read pairs (`read_tsv` or a task generator) -> split them
(`split_pairs`) -> tokenise and build vocabularies (`tokenize`, `Vocab`) ->
encode (`encode_pairs`) -> batch (`Batcher`).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIALS))
LEVELS = ("char", "word")

Pair = tuple[str, str]
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


class DataError(ValueError):
    """Bad input data: the message says which file/line and what is wrong."""


# --- tokens ----------------------------------------------------------------

def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"unknown tokenisation level {level!r}; expected one of {LEVELS}")


def tokenize(text: str, level: str) -> list[str]:
    """"char": every character, spaces included; "word": whitespace-separated words."""
    _check_level(level)
    return list(text) if level == "char" else text.split()


def detokenize(tokens: Iterable[str], level: str) -> str:
    """Inverse of `tokenize` (for "word", runs of whitespace become one space)."""
    _check_level(level)
    return ("" if level == "char" else " ").join(tokens)


class Vocab:
    """A fixed token <-> id mapping whose first ids are the special tokens."""

    def __init__(self, tokens: list[str]):
        if tuple(tokens[:len(SPECIALS)]) != SPECIALS or len(set(tokens)) != len(tokens):
            raise ValueError(f"vocabulary must start with {SPECIALS} and have no duplicates")
        self.tokens = list(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}

    @classmethod
    def build(cls, token_lists: Iterable[list[str]], min_freq: int = 1) -> Vocab:
        """Keep tokens seen at least `min_freq` times, most frequent first.

        Ties are broken by the token itself, so the same data always gives the
        same ids (a checkpoint stays usable with a rebuilt vocabulary).
        """
        counts = Counter(token for tokens in token_lists for token in tokens)
        kept = [t for t, c in counts.items() if c >= min_freq and t not in SPECIALS]
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


# --- reading and splitting -------------------------------------------------

def read_tsv(path: str | Path) -> list[Pair]:
    """Read `source<TAB>target` lines; blank lines are skipped.

    Fields are stripped of surrounding whitespace.  The file is decoded line
    by line so that a bad byte can be reported with its line number.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"corpus file not found: {path}")
    pairs = []
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}, line {lineno}: not valid UTF-8 "
                            f"({e.reason} at byte {e.start})") from None
        if lineno == 1:
            line = line.removeprefix("\ufeff")  # byte-order mark some editors write
        if line.strip():
            pairs.append(_parse_tsv_line(line, path, lineno))
    if not pairs:
        raise DataError(f"{path}: no source<TAB>target pairs found (the corpus is empty)")
    return pairs


def clean_field(text: str) -> str:
    """What a sentence goes through before it is tokenised, in training and in `translate`
    alike: surrounding whitespace (a Windows line's \\r included) is dropped."""
    return text.strip()


def _parse_tsv_line(line: str, path: Path, lineno: int) -> Pair:
    shown = line if len(line) <= 60 else line[:57] + "..."
    fields = line.split("\t")
    if len(fields) != 2:
        problem = "has no tab" if len(fields) == 1 else f"has {len(fields) - 1} tabs"
        raise DataError(f"{path}, line {lineno}: expected 'source<TAB>target' "
                        f"but the line {problem}: {shown!r}")
    source, target = (clean_field(field) for field in fields)
    if not source or not target:
        side = "source" if not source else "target"
        raise DataError(f"{path}, line {lineno}: empty {side}: {shown!r}")
    return source, target


def split_pairs(pairs: list[Pair], seed: int, valid_frac: float = 0.1,
                test_frac: float = 0.1) -> dict[str, list[Pair]]:
    """Shuffle and cut pairs into "train", "valid" and "test".

    Duplicate sources are dropped first (the first occurrence wins): otherwise
    a test source could also be in training and the test score would reward
    memorisation.  Every split gets at least one pair.
    """
    if not (0 < valid_frac < 1 and 0 < test_frac < 1 and valid_frac + test_frac < 1):
        raise ValueError(f"need 0 < valid_frac, test_frac and valid_frac + test_frac < 1, "
                         f"got {valid_frac} and {test_frac}")
    first_target: dict[str, str] = {}
    for source, target in pairs:
        first_target.setdefault(source, target)
    unique = list(first_target.items())
    n = len(unique)
    if n < 3:
        raise DataError(f"need at least 3 pairs with distinct sources to split, got {n}")
    random.Random(seed).shuffle(unique)
    n_test = min(max(1, round(n * test_frac)), n - 2)
    n_valid = min(max(1, round(n * valid_frac)), n - 1 - n_test)
    return {
        "train": unique[n_test + n_valid:],
        "valid": unique[n_test:n_test + n_valid],
        "test": unique[:n_test],
    }


def encode_pairs(pairs: Iterable[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                 src_level: str, tgt_level: str) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of each side, without BOS/EOS (the Batcher adds those)."""
    src_ids, tgt_ids = [], []
    for source, target in pairs:
        src_ids.append(src_vocab.encode(tokenize(source, src_level)))
        tgt_ids.append(tgt_vocab.encode(tokenize(target, tgt_level)))
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

    def batch_indices(self, epoch: int = 0) -> list[np.ndarray]:
        """The example indices of each batch of `epoch`, in batch order."""
        rng = np.random.default_rng(None if self.seed is None else [self.seed, epoch])
        n = len(self.src_ids)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        src_len = np.array([len(s) for s in self.src_ids])
        tgt_len = np.array([len(t) for t in self.tgt_ids])
        batches = []
        for start in range(0, n, self.chunk_size):
            chunk = order[start:start + self.chunk_size]
            chunk = chunk[np.lexsort((tgt_len[chunk], src_len[chunk]))]  # by source, then target length
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches
