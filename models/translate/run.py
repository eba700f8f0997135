"""A run directory: everything a training run leaves behind, and how it is read back.

    runs/reverse/
      run.json        what was trained: task or data file, tokenisation, model and training settings
      vocab.json      source and target vocabularies
      valid.tsv       the held-out pairs (never seen in training), for `evaluate`
      test.tsv
      last.npz        the latest checkpoint: weights, optimizer, schedule, step, RNG state
      best.npz        the checkpoint with the best validation exact match
      metrics.jsonl   one JSON line per logged step
      curves.png      loss and validation accuracy (with matplotlib installed)

Every file is written to a temporary name and then renamed over the old one, so
a crash or Ctrl-C mid-write never leaves a half-written file in place of a good one.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinygrad_tx as tx

from .data import Pair, Vocab, read_tsv
from ..transformer import Transformer


class RunError(RuntimeError):
    """A run directory or checkpoint that cannot be used; the message says which and why."""


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same directory and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    write_atomically(path, json.dumps(value, indent=2) + "\n")


def write_pairs(path: Path, pairs: list[Pair]) -> None:
    write_atomically(path, "".join(f"{s}\t{t}\n" for s, t in pairs))


@dataclass
class Run:
    """A loaded run: its settings, vocabularies and model."""

    directory: Path
    settings: dict
    src_vocab: Vocab
    tgt_vocab: Vocab
    model: Transformer

    @property
    def levels(self) -> tuple[str, str]:
        return self.settings["src_level"], self.settings["tgt_level"]

    def held_out(self, split: str = "test") -> list[Pair]:
        return read_tsv(self.directory / f"{split}.tsv")


def read_json(path: Path) -> Any:
    if not path.exists():
        raise RunError(f"{path} is missing: is {path.parent} a run directory written by `train`?")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{path} is corrupt ({e})") from None


def load_checkpoint(path: Path) -> dict:
    """The state saved by `save_checkpoint`, with a clear error for a missing or damaged file."""
    if not path.exists():
        raise RunError(f"checkpoint {path} does not exist")
    try:
        return tx.load(path)
    except (ValueError, OSError, KeyError) as e:
        raise RunError(f"checkpoint {path} is unreadable: {e}") from None


def open_run(directory: str | Path, device: str = "cpu", which: str = "best") -> Run:
    """Rebuild the model of a run directory from its settings and its `which` checkpoint."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RunError(f"run directory {directory} does not exist")
    settings = read_json(directory / "run.json")
    vocab = read_json(directory / "vocab.json")
    path = directory / f"{which}.npz"
    try:
        model = Transformer.from_state(load_checkpoint(path), path)
    except (KeyError, TypeError, ValueError) as e:
        raise RunError(f"{path} does not hold a usable model: {e}") from None
    model.to(device).eval()
    return Run(directory, settings, Vocab.from_dict(vocab["src"]), Vocab.from_dict(vocab["tgt"]), model)
