"""Parallel corpora as users have them: reading, normalising, splitting by source, describing.

The common public format is the Tatoeba/Anki sentence list,

    Run!<TAB>Cours !<TAB>CC-BY 2.0 (France) Attribution: tatoeba.org #906328 (CM) & #906331 (sacredceltic)
    Run!<TAB>Courez !<TAB>CC-BY 2.0 (France) Attribution: ...

one pair a line, many sources with several translations. So: columns beyond the
two used are ignored (and said once), every translation of a source is a training
pair, the split keeps all pairs of a source together (a test source never leaks
into training), and a held-out source is scored against all of its references.
"""
from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..text.data import DataError, Pair

Sources = list[tuple[str, list[str]]]  # (source, every distinct reference), in corpus order

# Spaces French typography puts before ! ? : ; and inside « » (no-break, narrow no-break,
# thin, figure) become plain spaces; the typographic apostrophe becomes ASCII. The same
# sentence is written both ways within Tatoeba (`Je l'ai vu.`, `Je l’ai vu.`).
_SPACES = re.compile(r"[\u00a0\u2007\u2009\u202f\u200b\ufeff]")


def normalise(text: str) -> str:
    """Unicode NFC, typographic spaces and apostrophes made plain, whitespace runs made one space.

    Applied to both sides when a corpus is read and to every sentence given to
    `translate`, so the model always sees text prepared the same way.
    """
    text = _SPACES.sub(" ", unicodedata.normalize("NFC", text)).replace("\u2019", "'")
    return " ".join(text.split())


@dataclass
class Corpus:
    """The pairs of a file and how the file was laid out."""

    path: Path
    pairs: list[Pair]
    columns: int  # the most tab-separated fields on any line
    src_col: int  # 1-based columns the pairs were taken from
    tgt_col: int

    @property
    def ignored_columns(self) -> str | None:
        """A one-line note when the file has columns that were not used (None otherwise)."""
        if self.columns <= 2:
            return None
        return (f"{self.path} has {self.columns} tab-separated columns: using column {self.src_col} as "
                f"source and {self.tgt_col} as target, ignoring the others")


def text_lines(data: bytes, where: str) -> list[str]:
    """The lines of `data`, as every reader of this app splits text: UTF-8 checked, BOM removed,
    split at LF (a CR before it removed), or at CR in text without a single LF (old Mac endings).

    Nothing else ends a line: in text with LFs a lone CR is whitespace inside a line, and so are
    a form feed, \\x0b, \\x1c-\\x1e, \\x85, U+2028 and U+2029, at all of which `str.splitlines()`
    would cut (`normalise` makes them spaces). A last line needs no ending; blank lines are kept."""
    ending = b"\r" if b"\n" not in data else b"\n"
    raws = data.split(ending)
    if raws[-1] == b"":
        raws.pop()  # the ending of the last line, or no text at all
    lines = []
    for lineno, raw in enumerate(raws, start=1):
        try:
            line = raw.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as e:
            raise DataError(f"{where}, line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        lines.append(line.removeprefix("\ufeff") if lineno == 1 else line)  # a byte-order mark some editors write
    return lines


def _lines(path: Path):
    """(line number, text) of each non-blank line of a corpus file."""
    if not path.is_file():
        raise DataError(f"corpus file not found: {path}")
    for lineno, line in enumerate(text_lines(path.read_bytes(), str(path)), start=1):
        if line.strip():
            yield lineno, line


def _shown(line: str) -> str:
    return repr(line if len(line) <= 60 else line[:57] + "...")


def read_corpus(path: str | Path, src_col: int = 1, tgt_col: int = 2, allow_empty: bool = False) -> Corpus:
    """Read normalised (source, target) pairs from tab-separated columns `src_col`, `tgt_col` (1-based).

    Blank lines are skipped; a line with too few columns or (unless `allow_empty`,
    which `describe` uses to count them) an empty side is an error naming the line.
    """
    path = Path(path)
    if src_col < 1 or tgt_col < 1 or src_col == tgt_col:
        raise DataError(f"source and target columns must be two different numbers >= 1, got {src_col} and {tgt_col}")
    pairs, columns, needed = [], 0, max(src_col, tgt_col)
    for lineno, line in _lines(path):
        fields = line.split("\t")
        columns = max(columns, len(fields))
        if len(fields) < needed:
            problem = "has no tab" if len(fields) == 1 else f"has only {len(fields)} columns"
            raise DataError(f"{path}, line {lineno}: expected 'source<TAB>target' (columns {src_col} and "
                            f"{tgt_col}) but the line {problem}: {_shown(line)}")
        source, target = normalise(fields[src_col - 1]), normalise(fields[tgt_col - 1])
        if not allow_empty and not (source and target):
            raise DataError(f"{path}, line {lineno}: empty {'source' if not source else 'target'}: {_shown(line)}")
        pairs.append((source, target))
    if not pairs:
        raise DataError(f"{path}: no source<TAB>target pairs found (the corpus is empty)")
    return Corpus(path, pairs, columns, src_col, tgt_col)


def read_tsv(path: str | Path) -> list[Pair]:
    """The pairs of a two-column file (held-out splits in a run directory)."""
    return read_corpus(path).pairs


def group_references(pairs: list[Pair]) -> Sources:
    """Each distinct source with all of its distinct targets, in order of first appearance."""
    refs: dict[str, list[str]] = {}
    for source, target in pairs:
        targets = refs.setdefault(source, [])
        if target not in targets:
            targets.append(target)
    return list(refs.items())


def split_by_source(pairs: list[Pair], seed: int, valid_frac: float = 0.05, test_frac: float = 0.1,
                    max_valid: int = 500, max_test: int = 2000) -> dict[str, list[Pair]]:
    """Cut pairs into "train", "valid" and "test" so that all pairs of a source land in one split.

    Every translation of a training source is kept (exact duplicate pairs once);
    a held-out source is scored against all of its translations. Validation only
    picks the best checkpoint, so it is capped at `max_valid` sources to keep it
    quick; the test split at `max_test` (a WMT test set's size: beam search over
    10% of a 100k-source corpus would take minutes, and what it adds is training
    data). Every split gets at least one source.
    """
    if not (0 < valid_frac < 1 and 0 < test_frac < 1 and valid_frac + test_frac < 1):
        raise ValueError(f"need 0 < valid_frac, test_frac and valid_frac + test_frac < 1, "
                         f"got {valid_frac} and {test_frac}")
    sources = group_references(pairs)
    n = len(sources)
    if n < 3:
        raise DataError(f"need at least 3 distinct sources to split, got {n}")
    random.Random(seed).shuffle(sources)
    n_test = min(max(1, round(n * test_frac)), max_test, n - 2)
    n_valid = min(max(1, round(n * valid_frac)), max_valid, n - 1 - n_test)
    cuts = {"test": sources[:n_test], "valid": sources[n_test:n_test + n_valid],
            "train": sources[n_test + n_valid:]}
    return {name: [(s, t) for s, targets in part for t in targets] for name, part in cuts.items()}


def percentiles(values: list[int], qs=(50, 90, 99, 100)) -> str:
    """"p50 4, p90 7, p99 11, max 15" (nearest-rank percentiles)."""
    ordered = sorted(values)
    parts = []
    for q in qs:
        value = ordered[min(len(ordered) - 1, max(0, -(-q * len(ordered) // 100) - 1))]
        parts.append(f"{'max' if q == 100 else f'p{q}'} {value}")
    return ", ".join(parts)


def describe(corpus: Corpus, tokenizer_kind: str, vocab_size: int, long_tokens: int = 60) -> list[str]:
    """What a user checks before training: sizes, references per source, lengths, tokens, oddities."""
    from ..text.tokenization import Tokenizer  # the tokenizer trains on the whole file here: a preview

    pairs = corpus.pairs
    sources = group_references(pairs)
    refs = Counter(len(targets) for _, targets in sources)
    duplicates = len(pairs) - sum(len(targets) for _, targets in sources)
    lines = [f"{corpus.path}: {len(pairs)} pairs, {len(sources)} distinct sources, "
             f"{len({t for _, t in pairs})} distinct targets"]
    if corpus.ignored_columns:
        lines.append(corpus.ignored_columns)
    shown = ", ".join(f"{k}: {refs[k]}" for k in sorted(refs)[:6]) + (", ..." if len(refs) > 6 else "")
    lines.append(f"distinct references per source: mean {(len(pairs) - duplicates) / len(sources):.2f}, "
                 f"max {max(refs)} "
                 f"(sources with k references, {shown})")
    for side, column, texts in (("source", corpus.src_col, [s for s, _ in pairs]),
                                ("target", corpus.tgt_col, [t for _, t in pairs])):
        texts = [t for t in texts if t]
        if not texts:  # nothing to count, nor to learn pieces from
            raise DataError(f"{corpus.path}: every {side} (column {column}) is empty: no text to describe or train on")
        tokenizer = Tokenizer.train(tokenizer_kind, texts, vocab_size)
        tokens = [tokenizer.encode(t) for t in texts]
        held = len(texts) // 10  # unknown rate: tokens of the last 10% unseen in the first 90%
        seen = {tok for toks in tokens[:len(texts) - held] for tok in toks}
        unseen = [tok not in seen for toks in tokens[len(texts) - held:] for tok in toks]
        lines.append(f"{side}: characters per sentence {percentiles([len(t) for t in texts])}; "
                     f"{tokenizer_kind} tokens per sentence {percentiles([len(t) for t in tokens])}; "
                     f"vocabulary {len(seen | {tok for toks in tokens for tok in toks})}, "
                     f"unknown rate {100 * sum(unseen) / max(len(unseen), 1):.1f}% "
                     f"(last 10% of lines against a vocabulary from the rest)")
    empty = sum(1 for s, t in pairs if not s or not t)
    identical = sum(1 for s, t in pairs if s and s == t)
    long = sum(1 for s, t in pairs if max(len(s.split()), len(t.split())) > long_tokens)
    lines.append(f"duplicate pairs: {duplicates}; empty side: {empty}; identical sides: {identical}; "
                 f"longer than {long_tokens} words: {long}")
    return lines
