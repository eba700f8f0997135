"""The ranks of an `mpiexec` run: what they must agree on, and how a problem stops all of them at once.

Started by `mpiexec -n N` (or by `train --processes N` itself, launch.py), the same run is
data-parallel (`tinygrad_tx.distributed`): `--batch-size` stays the global batch, and each
process trains on its share of every batch of the same seeded order, so the data a step sees
does not depend on N and a run may be resumed with another N. Only rank 0 prints, validates
and writes the run directory; every rank reads it (on several hosts, a shared file system).
With `--members N` the N ranks instead train the N models of an ensemble, one each (launch.py
says when that pays): no gradient is averaged; every rank takes whole batches, in the same
order, with its own initial weights (the seed plus its rank: the first model starts from a
one-model run's weights) and dropout masks, and validates and keeps its own checkpoints
(`member_directory`).

Every rank reads the corpus and the settings for itself, so nothing else makes them equal: a
corpus shuffled on one host would put rank 0's test pairs into another rank's training, and
another --lr would train without a word. So the ranks compare, and a difference stops every
rank with one line that names it. Each comparison comes before the first collective that
depends on what it compares, since a rank on another path waits in a collective the others
never join (--resume on one rank only: it alone read last.npz, and both hung ten minutes):

1. `parsed_together`: every rank parsed its command line, and all run the same command on
   the same device (a rank that argparse stopped would leave the others in MPI_Init for ever);
2. `check_settings_agree`: every train setting, before any of them chooses a path;
3. `check_data_agree`: the corpus, the vocabularies and (resuming) last.npz, before the model
   is built from them.

While they train, the ranks step together: one small all-reduce before every step
(`step_news`) carries what would otherwise part them, so every rank stops, or changes its
schedule, at the same step.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
from typing import Callable

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist

from .preparation import Prepared
from .run import RunError
from .settings import TrainSettings, flag


class EveryRankError(RunError):
    """Raised on every rank together, so every rank can exit normally (none is left waiting in
    a collective: the job need not be aborted). `shown` on one rank only: it prints the line."""

    def __init__(self, message: str, shown: bool):
        super().__init__(message)
        self.shown = shown


def on_every_rank(error: Exception | None) -> None:
    """Raise on every rank if any rank has `error` (a collective: every rank must call it).
    The lowest rank with an error shows it."""
    failed = np.zeros(dist.world_size(), dtype=np.int64)
    failed[dist.rank()] = error is not None
    failed = dist.all_reduce(failed, op="sum")
    if failed.any():
        shown = dist.rank() == int(np.argmax(failed))
        raise EveryRankError(str(error) if error is not None else "another rank failed", shown) from None


CHECKS_FAIL_WITH = (RunError, ValueError, FileNotFoundError, tx.DeviceError)
"""What a check of the user's arguments and files raises (DataError is a ValueError)."""


def together(check, *args):
    """`check(*args)` on every rank, then one collective: if it failed on any rank, every rank
    raises (shown by one), so an error in the arguments or files, which every rank meets alike,
    is printed once and ends the job without an MPI abort. Every rank must call it."""
    error = result = None
    try:
        result = check(*args)
    except CHECKS_FAIL_WITH as e:
        error = e
    on_every_rank(error)
    return result


def parsed_together(parse: Callable[[], argparse.Namespace]) -> argparse.Namespace | None:
    """`parse()` (argparse's parse_args) on every rank of an mpiexec job, then the job's first
    collective: if a rank's command line was refused, every rank stops (the lowest such rank
    printing the parser's one line); if the ranks run different commands or devices,
    every rank stops too. None where every rank was asked for --help (and printed it)."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):  # argparse's usage and error, said once below instead
            args, refused = parse(), None
    except SystemExit as e:
        args = refused = None
        if e.code:  # argparse's refusal (--help exits with 0)
            said = errors.getvalue().strip().splitlines() or [f"exit status {e.code}"]
            refused = RunError(f"{said[-1].removeprefix('error: ')} (the command line of rank {dist.rank()})")
    on_every_rank(refused)  # the job's first collective joins it (no GPU taken: the device is agreed on first)
    command = "--help" if args is None else args.command
    agree({"the command": _hash(command), "--device": _hash(getattr(args, "device", None))},
          "every rank must be given the same command line")
    return args


def check_settings_agree(settings: TrainSettings) -> None:
    """Refuse, on every rank, to train when ranks differ in any setting: before any of them decides
    what a rank does (--resume: whether it reads last.npz), or sizes what it sends."""
    agree({flag(name): _hash(value) for name, value in vars(settings).items()},
          "every rank must be given the same corpus and settings")


def check_data_agree(data: Prepared, checkpoint: dict | None) -> None:
    """Refuse, on every rank, to train when ranks differ in data, vocabularies or (resuming) the
    checkpoint they start from (a run directory copied to each host, not shared, may be stale)."""
    what = {"the corpus (fingerprint of its split pairs)": _hash(data.fingerprint),
            "the source vocabulary": _hash(data.src_vocab.tokens), "the target vocabulary": _hash(data.tgt_vocab.tokens)}
    if checkpoint is not None:
        what["the checkpoint last.npz"] = _weights_hash(checkpoint["weights"])
    agree(what, "every rank must be given the same corpus and run directory")


def agree(digests: dict[str, int], advice: str) -> None:
    """Stop every rank, rank 0 printing one line that names them, if any of `digests` differs
    from rank 0's. A collective: every rank calls it with the same names, in the same order."""
    if dist.world_size() == 1:
        return
    mine = np.array(list(digests.values()), dtype=np.int64)
    root = dist.broadcast(mine.copy(), root=0)
    differ = dist.all_reduce((mine != root).astype(np.int64), op="sum")
    names = [name for name, n in zip(digests, differ) if n]
    if names:
        raise EveryRankError(f"the {dist.world_size()} ranks of this mpiexec job do not agree on {', '.join(names)} "
                             f"({max(differ)} differ from rank 0): {advice}", shown=dist.rank() == 0)


def _hash(value) -> int:
    """A 56-bit digest of a JSON-able value (fits an int64 that MPI can compare)."""
    return int.from_bytes(hashlib.sha256(json.dumps(value).encode()).digest()[:7], "big")


def _weights_hash(weights: dict) -> int:
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name]).tobytes())
    return int.from_bytes(digest.digest()[:7], "big")


def check_members(members: int) -> None:
    """An ensemble's models train on a process each: --members N needs N ranks."""
    if members > 1 and dist.world_size() != members:
        raise ValueError(f"--members {members} trains each model on a process of its own, but this job has "
                         f"{dist.world_size()}: leave mpiexec out (train starts the processes) or run "
                         f"mpiexec -n {members}")


def step_news(tokens: int, stopping: bool, planned: int, time_up: bool) -> tuple[int, bool, int, bool]:
    """Before each training step, summed over the ranks: the batch's real `tokens`, whether any
    rank was asked to stop (interrupts.py), and rank 0's word on a --time budget (every other
    rank gives 0): the last step it `planned` now (0 if none), and whether the time is up."""
    news = dist.all_reduce(np.array([tokens, stopping, planned, time_up], dtype=np.int64), op="sum")
    return int(news[0]), bool(news[1]), int(news[2]), bool(news[3])
