"""How a training run starts in its run directory: it claims it (one `train` at a time, run.py's
`claim`) and fills it, or, resumed, reads back the checkpoint it goes on from (checked before the
model is built) and the score its best.npz holds."""
from __future__ import annotations

from pathlib import Path
from typing import IO

from .preparation import Prepared
from .run import (RunError, check_fits, check_new_run_directory, check_vocabularies, claim, create_run,
                  load_checkpoint, write_text)
from .settings import TrainSettings
from ..text.data import Vocab


def claim_run(directory: Path, resume: bool) -> IO:
    """`claim` the run directory; for a new run, then check again that it holds none (the `train`
    that held it may have written a checkpoint)."""
    lock = claim(directory)
    try:
        if not resume:
            check_new_run_directory(directory)
    except RunError:
        lock.close()
        raise
    return lock


def new_run(directory: Path, out: Path, s: TrainSettings, data: Prepared, main: bool) -> None:
    """A new run's files: rank 0 writes the run directory's (`create_run`); another model of an
    ensemble, its own directory `out` for checkpoints and an empty log."""
    if main:
        create_run(directory, s.saved(), data.tokenizers, (data.src_vocab, data.tgt_vocab), data.fingerprint,
                   {"valid": data.valid_pairs, "test": data.test_pairs})
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "metrics.jsonl", "")


def read_last(member: Path, directory: Path, vocabs: tuple[Vocab, Vocab], config: dict) -> dict:
    """last.npz of a run being resumed (in `member`, one model's directory of run `directory`),
    checked against the run's vocabularies and, before it is built, the model `config` describes."""
    path = member / "last.npz"
    state = load_checkpoint(path)
    saved = state.get("config") if isinstance(state.get("config"), dict) else {}
    check_vocabularies(directory, (saved.get("src_vocab"), saved.get("tgt_vocab")), *vocabs)
    check_fits(config, state, path)
    return state


def best_saved(path: Path) -> float:
    """The validation score the best.npz at `path` holds (below every score if there is none yet)."""
    if not path.exists():
        return -1.0
    try:
        return float(load_checkpoint(path)["best"])
    except (KeyError, TypeError, ValueError) as e:
        raise RunError(f"checkpoint {path} is damaged: {type(e).__name__} {e}") from None
