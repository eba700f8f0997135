"""DataParallel: every rank holds the same model, computes gradients on its own shard of
the batch, and `backward()` returns with the gradients averaged over the ranks, so every
rank's optimizer makes the same update. As PyTorch's DDP and Horovod do it:

1. At construction, rank 0's parameters are broadcast, so all ranks start equal.
2. Parameters are grouped into buckets of about `bucket_mb` MiB (one all-reduce per bucket,
   not per parameter: each call has a fixed latency), first in reverse order of creation,
   roughly the order backward finishes them (last layer first); after the first backward,
   in the order rank 0 actually saw them finish, parameters without a gradient last (a
   bucket waiting for a gradient that never comes would hold back every bucket after it).
3. A post-accumulate-grad hook on each parameter copies its finished gradient into its
   bucket's flat buffer during backward; a full bucket starts a non-blocking all-reduce at
   once, while backward goes on through the earlier layers.
4. Buckets start strictly in bucket order on every rank, whatever order gradients finish
   in: MPI and NCCL match collectives by their order, so ranks must agree on it.
5. When the walk ends, the buckets still open (parameters that got no gradient on this rank)
   start with zeros in those places, every bucket is waited for, divided by the number of
   ranks, and each parameter's `.grad` becomes its slice of the averaged buffer. Each bucket
   carries one extra slot per parameter, 1 where this rank had a gradient: a parameter keeps
   `.grad = None` only if no rank gave it one (as in a single process), and otherwise gets
   the average with zeros for the ranks that did not use it.

In a job of one, DataParallel registers nothing and costs nothing.
Take one backward per optimizer step (or zero_grad between): accumulated gradients
are averaged again at each backward, which is harmless only because they are equal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np

from .. import observers
from ..leaf_sink import queue_callback
from ..nn import Module
from ..tensor import Tensor
from .collectives import broadcast
from .communicators import Pending
from .group import group


@dataclass
class CommStats:
    """What DataParallel sent: all-reduce calls, bytes, and the seconds this rank spent in them
    (starting them and waiting for them; the part hidden behind backward is not counted)."""

    calls: int = 0
    early: int = 0  # calls started by a gradient hook, while backward was still running
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class _Bucket:
    params: list[Tensor]
    slices: list[tuple[int, int]]  # where each parameter's gradient lives in the flat buffer
    size: int  # gradient elements; the flat buffer has one "had a gradient" slot per parameter after them
    flat: Any = None  # this step's buffer, made when its first gradient arrives
    ready: int = 0
    pending: Pending | None = field(default=None, repr=False)


class DataParallel:
    """Wrap `module` for data-parallel training; calling the wrapper calls the module."""

    def __init__(self, module: Module, bucket_mb: float = 2.0):
        self.module = module
        self.stats = CommStats()
        self.buckets: list[_Bucket] = []
        if group().size == 1:
            return
        params = [p for p in module.parameters() if p.requires_grad]
        for p in params:
            broadcast(p, root=0)
        self.params, self.bucket_bytes = params, int(bucket_mb * 2 ** 20)
        self._index = {id(p): i for i, p in enumerate(params)}
        self._fill(params[::-1])
        self._arrivals: list[int] | None = []  # indices into params in finishing order, in the first step
        self._next = 0  # the next bucket to start
        self._step_seconds = 0.0
        for p in params:
            p.register_post_accumulate_grad_hook(self._gradient_ready)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # parameters(), state_dict(), train(), ...: the module's
        if name == "module":  # not set yet (copy, pickle): no module to ask
            raise AttributeError(name)
        return getattr(self.module, name)

    def _fill(self, order: list[Tensor]) -> None:
        self.buckets = _make_buckets(order, self.bucket_bytes)
        self._where = {id(p): (b, i) for b in self.buckets for i, p in enumerate(b.params)}

    def _gradient_ready(self, p: Tensor) -> None:
        if self._arrivals is not None:
            self._arrivals.append(self._index[id(p)])
        bucket, i = self._where[id(p)]
        start, stop = bucket.slices[i]
        flat = self._buffer(bucket, p)
        flat[start:stop] = p.grad.data.reshape(-1)
        flat[bucket.size + i] = 1
        bucket.ready += 1
        queue_callback(self._finish)
        self._start_buckets(every=False)

    def _buffer(self, bucket: _Bucket, p: Tensor) -> Any:
        if bucket.flat is None:
            bucket.flat = p.backend.xp.zeros(bucket.size + len(bucket.params), dtype=p.dtype)
        return bucket.flat

    def _start_buckets(self, every: bool) -> None:
        """Start the buckets in order, as far as they are full (all of them with `every`)."""
        started, first_started = perf_counter(), self._next
        while self._next < len(self.buckets):
            bucket = self.buckets[self._next]
            if not every and bucket.ready < len(bucket.params):
                break
            first = bucket.params[0]
            flat = self._buffer(bucket, first)
            bucket.pending = group().communicator(first.backend).all_reduce(flat, first.backend)
            self.stats.calls += 1
            self.stats.early += not every
            self.stats.bytes += flat.nbytes
            self._next += 1
        if self._next > first_started:
            for bucket in self.buckets[:self._next]:
                bucket.pending.done()  # MPI moves data only inside MPI calls: testing a request is one
            self._step_seconds += perf_counter() - started

    def _finish(self) -> None:
        """End of backward: start what is left, wait for everything, hand out the averages."""
        self._start_buckets(every=True)
        started = perf_counter()
        for bucket in self.buckets:
            bucket.pending.wait()
        self._step_seconds += perf_counter() - started
        scale = 1 / group().size
        for bucket in self.buckets:
            flat = bucket.flat
            flat *= scale
            had_gradient = bucket.params[0].backend.to_host(flat[bucket.size:])  # (n_params,) on the host
            for p, (start, stop), count in zip(bucket.params, bucket.slices, had_gradient):
                if count > 0:
                    p.grad = Tensor._from_op(flat[start:stop].reshape(p.shape), p.backend)
            bucket.flat, bucket.ready, bucket.pending = None, 0, None
        self._next = 0
        self.stats.seconds += self._step_seconds
        observers.show_collective("all_reduce", self._step_seconds)  # the profiler's "all_reduce" row
        self._step_seconds = 0.0
        if self._arrivals is not None:
            self._rebucket()

    def _rebucket(self) -> None:
        """Once, after the first backward: buckets in the order rank 0's gradients finished
        (every rank must use the same buckets, so rank 0's order is broadcast)."""
        seen = set(self._arrivals)
        order = np.array(self._arrivals + [i for i in range(len(self.params)) if i not in seen], dtype=np.int64)
        broadcast(order, root=0)
        self._fill([self.params[i] for i in order.tolist()])
        self._arrivals = None


def _make_buckets(params: list[Tensor], bucket_bytes: int) -> list[_Bucket]:
    """Consecutive parameters, each bucket closed as soon as it holds `bucket_bytes` or more;
    one device and dtype per bucket."""
    buckets: list[_Bucket] = []
    current: list[Tensor] = []

    def close() -> None:
        if current:
            ends = np.cumsum([0] + [p.size for p in current])
            buckets.append(_Bucket(list(current), list(zip(ends[:-1].tolist(), ends[1:].tolist())), int(ends[-1])))
            current.clear()

    for p in params:
        if current and (p.backend is not current[0].backend or p.dtype != current[0].dtype):
            close()
        current.append(p)
        if sum(q.data.nbytes for q in current) >= bucket_bytes:
            close()
    close()
    return buckets
