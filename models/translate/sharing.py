"""Translating on every rank of an `mpiexec` job: `train`'s last beam searches, shared out.

A run ends by choosing its decoding on the validation set and reporting on the test set
(tuning.py, `report`). Those beam searches took rank 0 alone 60 to 80 s of a ten-minute run
on the Tatoeba list, two models' ensemble, while the other rank waited. By then every rank
can read every model of the run (the ranks of an ensemble wait for each other's
checkpoints; data-parallel ranks share one), so each rank translates every world_size-th
sentence and one all-reduce hands every rank all the outputs: the strings one process
would have made alone, in about 1/world_size of its time. In a job of one, this is
`translate` itself.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tinygrad_tx.distributed as dist

from .evaluation import translate
from .run import Run


def translate_shared(run: Run, sentences: Sequence[str], beam: int, length_penalty: float) -> list[str]:
    """`translate` with `run`'s models, each rank of the job taking every world_size-th sentence;
    every rank returns every output. A collective: every rank calls it with the same sentences."""
    rank, size = dist.rank(), dist.world_size()
    mine = translate(run.model, list(sentences)[rank::size], run.src_vocab, run.tgt_vocab, run.tokenizers, beam,
                     length_penalty=length_penalty)
    return mine if size == 1 else gather_texts(mine, len(sentences), rank, size)


def gather_texts(mine: list[str], n: int, rank: int, size: int) -> list[str]:
    """All `n` texts, where this rank holds those at `rank`, `rank + size`, ...: each text goes
    as its UTF-8 bytes, at its place in one array the ranks sum (every other rank adds zeros
    there). Two all-reduces: the texts' lengths, then their bytes."""
    encoded = [text.encode("utf-8") for text in mine]
    lengths = np.zeros(n, dtype=np.int64)
    lengths[rank::size] = [len(b) for b in encoded]
    dist.all_reduce(lengths, op="sum")
    ends = np.cumsum(lengths)
    starts = ends - lengths
    data = np.zeros(int(ends[-1]) if n else 0, dtype=np.int32)  # int32: MPI and NCCL both sum it
    for i, b in zip(range(rank, n, size), encoded):
        data[starts[i]:ends[i]] = np.frombuffer(b, dtype=np.uint8)
    dist.all_reduce(data, op="sum")
    raw = data.astype(np.uint8).tobytes()
    return [raw[s:e].decode("utf-8") for s, e in zip(starts, ends)]
