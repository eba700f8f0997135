"""all_reduce, broadcast and barrier on Tensors, device arrays, NumPy arrays and numbers.

Every rank must call the same collectives in the same order, as in MPI. In a job of
one they return their input unchanged. They are replayable (`observers.replayable`): the
profiler times them, and inside a `tx.jit` step a replay calls them again on its own arrays,
so the ranks stay in step and in agreement.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import observers
from ..backends import Backend, backend_of
from ..tensor import Tensor
from .group import group

OPS = ("mean", "sum")


@observers.replayable
def all_reduce(t: Any, op: str = "mean") -> Any:
    """The sum or mean of `t` over all ranks.

    A Tensor or an array is reduced in place (every rank ends with the same values) and
    returned; a Python number gives a new number. A mean of integers is a float array.
    """
    if op not in OPS:
        raise ValueError(f"all_reduce: op must be one of {OPS}, not {op!r}")
    if isinstance(t, (int, float)):
        return _all_reduce(np.array(t, dtype=np.float64 if isinstance(t, float) or op == "mean" else np.int64),
                           op).item()
    return _all_reduce(t, op)


def _all_reduce(t: Any, op: str) -> Any:
    g = group()
    if g.size == 1:
        return t
    array, backend = _array_of(t)
    if op == "mean" and not np.issubdtype(np.dtype(array.dtype), np.floating):
        raise TypeError(f"all_reduce(op='mean') needs a floating array, not {array.dtype}; use op='sum'")
    g.communicator(backend).all_reduce(array, backend).wait()
    if op == "mean":
        array *= 1 / g.size
    _changed(t)
    return t


@observers.replayable
def broadcast(t: Any, root: int = 0) -> Any:
    """Rank `root`'s values of `t`, copied in place into `t` on every rank; returns `t`."""
    g = group()
    if not 0 <= root < g.size:
        raise ValueError(f"broadcast: root {root} is not a rank of this job of {g.size}")
    if g.size == 1:
        return t
    array, backend = _array_of(t)
    g.communicator(backend).broadcast(array, backend, root).wait()
    _changed(t)
    return t


@observers.replayable
def barrier() -> None:
    """Wait until every rank has called barrier()."""
    g = group()
    if g.size > 1:
        g.mpi.barrier().wait()


def _array_of(t: Any) -> tuple[Any, Backend]:
    if isinstance(t, Tensor):
        return t.data, t.backend
    return t, backend_of(t)


def _changed(t: Any) -> None:
    """A Tensor changed in place: a graph that saved its old values must refuse to backpropagate."""
    if isinstance(t, Tensor):
        t.bump_version()
