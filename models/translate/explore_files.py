"""The run's files as `explore` reads them: as they are on disk now, while `train` writes them.

`read_run_files` reads what a run fixes when it starts (settings, vocabularies,
tokenizers, held-out pairs); `Checkpoints` gives the model of a checkpoint as the file
is now, loading it again whenever `train` wrote it again, and says which checkpoint
and step it is. A checkpoint that is not there yet (before the run's first validation)
is `Waiting`, which the page shows as such; one that is there but does not read is
`Damaged`, and the newest checkpoint that reads is shown in its place, saying so.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tinygrad_tx.inspect.explorer import Waiting

from .corpus import Sources, group_references
from ..text.data import Vocab
from ..text.tokenization import Tokenizer
from ..transformer import Transformer
from .run import (LOCK, SNAPSHOTS, RunError, check_vocabularies, load_checkpoint, read_held_out, read_run_json,
                  read_tokenizers, read_vocabs)

CHECKPOINTS = ("best.npz", "last.npz")
SNAPSHOT = re.compile(rf"{SNAPSHOTS}/step_(\d+)\.npz")
LOADED = 4
"""How many checkpoints' models are kept loaded at once (best, last and the snapshots last looked at)."""
WAIT_FOR_RUN_S = 0.2
"""How often `explore` on a directory `train` is still setting up looks for run.json."""
FIRST_VALIDATION = "no checkpoint yet: {what} appears after the run's first validation (every {every} steps)"


@dataclass
class RunFiles:
    """What a run directory fixes when it starts: settings, vocabularies, tokenizers, held-out pairs."""

    directory: Path
    settings: dict
    src_vocab: Vocab
    tgt_vocab: Vocab
    tokenizers: tuple[Tokenizer, Tokenizer]
    valid: Sources


def read_run_files(directory: Path) -> RunFiles:
    """The run's files, checked; a missing or damaged one is a RunError that names it."""
    if not directory.is_dir():
        raise RunError(f"run directory {directory} does not exist" if not directory.exists()
                       else f"{directory} is a file, not a run directory")
    run = read_run_json(directory)
    src_vocab, tgt_vocab = read_vocabs(directory, run)
    return RunFiles(directory, run, src_vocab, tgt_vocab, read_tokenizers(directory, run),
                    group_references(read_held_out(directory, run, "valid")))


def wait_for_run_json(directory: str | Path) -> None:
    """`train` has claimed `directory` (train.lock) but not yet written run.json: wait for it,
    so `explore` can start with the run (Ctrl-C stops the wait)."""
    directory = Path(directory)
    if directory.is_dir() and (directory / LOCK).exists() and not (directory / "run.json").exists():
        print(f"waiting for `train` to write {directory / 'run.json'} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        while not (directory / "run.json").exists():
            time.sleep(WAIT_FOR_RUN_S)
        time.sleep(WAIT_FOR_RUN_S)  # the files written right after it (vocab.json, valid.tsv)


class Checkpoints:
    """The run's checkpoints as they are on disk now: a file is loaded again whenever it changed
    (`train` replaces each by renaming a new file over it, so a new file is a new inode)."""

    def __init__(self, files: RunFiles, device: str):
        self.files, self.device = files, device
        self._loaded: dict[str, tuple[tuple, Transformer, dict]] = {}  # name -> (stamp, model, about)
        self._training: dict[str, dict] = {}  # name -> the loaded file's optimizer, schedule and step
        self._shown_instead: dict[str, tuple] = {}  # a damaged name -> (its stamp, the other's about, about shown)

    def names(self) -> list[str]:
        """The snapshots of `train --snapshots` in step order, then last.npz and best.npz: the names
        the page may ask for (looked up in this list, never joined to a path as given)."""
        directory = self.files.directory
        snapshots = [f"{SNAPSHOTS}/{path.name}" for path in sorted(directory.glob(f"{SNAPSHOTS}/step_*.npz"))]
        return snapshots + [name for name in reversed(CHECKPOINTS) if (directory / name).is_file()]

    def get(self, name: str, what: str, missing: str | None = None) -> tuple[Transformer, dict]:
        """The model of checkpoint `name` as it is now, and {"checkpoint", "step"}; `Waiting` (saying
        that `what` waits for it) when the file is not there yet: `missing` says why it is not
        there, if not because the run has not validated yet. A last.npz or best.npz that does not
        read is damaged (`train` writes each whole, so no later look will read it): the newest
        checkpoint that reads is shown instead, its "damaged" saying so; `Damaged` if none reads."""
        try:
            return self._get(name, what, missing)
        except Damaged as damage:
            if name not in CHECKPOINTS:
                raise
            return self._instead(name, what, damage)

    def training_state(self, name: str) -> dict:
        """What checkpoint `name`, as `get` last loaded it, holds beside the weights (optimizer,
        schedule, step): {} for a snapshot, which holds the weights alone."""
        return self._training.get(name, {})

    def _get(self, name: str, what: str, missing: str | None = None) -> tuple[Transformer, dict]:
        path = self.files.directory / name
        for _ in range(3):  # a file replaced while it was read is read again
            version = stamp(path)
            if version is None:
                raise Waiting(missing or FIRST_VALIDATION.format(what=what, every=self._every()))
            if name in self._loaded and self._loaded[name][0] == version:
                self._loaded[name] = self._loaded.pop(name)  # looked at now: the last to go
                return self._loaded[name][1:]
            try:
                state = load_checkpoint(path)
            except RunError as e:
                raise Damaged(str(e)) from None
            if stamp(path) == version:
                break
        model = self._model(state, path)
        snapshot = SNAPSHOT.fullmatch(name)
        step = int(snapshot[1]) if snapshot else int(state["step"]) if "step" in state else None
        self._loaded.pop(name, None)
        self._loaded[name] = (version, model, {"checkpoint": name, "step": step})
        self._training[name] = {key: value for key, value in state.items() if key != "weights"}
        while len(self._loaded) > LOADED:  # the one looked at longest ago goes
            gone = next(iter(self._loaded))
            del self._loaded[gone]
            self._training.pop(gone, None)
        return self._loaded[name][1:]

    def _instead(self, name: str, what: str, damage: Damaged) -> tuple[Transformer, dict]:
        """For a damaged `name`: the newest checkpoint of the run that reads (the highest step; at
        one step, best.npz or last.npz before a snapshot), its "damaged" saying what happened."""
        version, kept = stamp(self.files.directory / name), self._shown_instead.get(name)
        if kept and kept[0] == version:  # the same answer object while nothing changed: views made from it stay
            try:
                model, about = self._get(kept[1]["checkpoint"], what)
                if about is kept[1]:
                    return model, kept[2]
            except Waiting:
                pass
        found = None
        for other in reversed(self.names()):  # best.npz and last.npz, then the snapshots from the newest
            step = _snapshot_step(other)
            if other == name or (found and 0 <= step <= (found[1]["step"] or -1)):
                continue
            try:
                model, about = self._get(other, what)
            except Waiting:
                continue
            if found is None or (about["step"] or -1) > (found[1]["step"] or -1):
                found = model, about
        if found is None:
            raise Damaged(f"{damage}, and no other checkpoint of the run reads")
        model, about = found
        shown = {**about, "damaged": f"{damage}. Shown instead: {about['checkpoint']}, step {about['step']}, "
                                     "the newest checkpoint of the run that reads"}
        self._shown_instead[name] = (version, about, shown)
        return model, shown

    def _model(self, state: dict, path: Path) -> Transformer:
        try:
            model = Transformer.from_state(state, path)
        except (KeyError, TypeError, ValueError) as e:
            raise Damaged(f"{path} does not hold a usable model: {e}") from None
        files = self.files
        try:
            check_vocabularies(files.directory, (model.config.src_vocab, model.config.tgt_vocab),
                               files.src_vocab, files.tgt_vocab)
        except RunError as e:
            raise Damaged(str(e)) from None
        return model.to(self.device).eval()

    def _every(self) -> str:
        return str(self.files.settings.get("settings", {}).get("eval_every", "?"))


class Damaged(Waiting):
    """A checkpoint that is there but does not read (cut short, or not a model): said as such,
    never as one to wait for."""


def _snapshot_step(name: str) -> int:
    """The step of a snapshot by its name; -1 for last.npz and best.npz (their step is inside)."""
    match = SNAPSHOT.fullmatch(name)
    return int(match[1]) if match else -1


def stamp(path: Path) -> tuple | None:
    """What tells one version of a file from the next (None: no file)."""
    try:
        s = path.stat()
    except FileNotFoundError:
        return None
    return s.st_ino, s.st_mtime_ns, s.st_size
