"""How a training run starts in its run directory: it claims it (one `train` at a time, run.py's
`claim`), and a resumed run reads back the checkpoint it goes on from, checked before the model
is built."""
from __future__ import annotations

from pathlib import Path
from typing import IO

from .run import RunError, check_fits, check_new_run_directory, check_vocabularies, claim, load_checkpoint
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


def read_last(member: Path, directory: Path, vocabs: tuple[Vocab, Vocab], config: dict) -> dict:
    """last.npz of a run being resumed (in `member`, one model's directory of run `directory`),
    checked against the run's vocabularies and, before it is built, the model `config` describes."""
    path = member / "last.npz"
    state = load_checkpoint(path)
    saved = state.get("config") if isinstance(state.get("config"), dict) else {}
    check_vocabularies(directory, (saved.get("src_vocab"), saved.get("tgt_vocab")), *vocabs)
    check_fits(config, state, path)
    return state
