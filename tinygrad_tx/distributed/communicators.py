"""The two engines that move data between processes: MPI for host arrays, NCCL for GPU arrays.

Both start a collective and hand back a `Pending`; `Pending.wait()` polls it against a
deadline, so a rank that died or hangs ends the job with a message instead of leaving
the others waiting for ever. Reductions here are sums, computed in place in the array
given; the mean is the caller's division.

    MPI  (device "cpu", "strict")  mpi4py's non-blocking Iallreduce / Ibcast / Ibarrier on
                                   host buffers; a device that is not plain NumPy ("strict")
                                   is copied to the host and back through its backend.
    NCCL (device "cuda")           cupy.cuda.nccl on the GPU arrays themselves, on the current
                                   stream (after the kernels that wrote them); the unique id
                                   that ties the ranks' communicators together goes over MPI.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..backends import Backend


class DistributedError(RuntimeError):
    """A collective that could not complete: a rank died, hangs, or the set-up is wrong."""


class Pending:
    """A collective in flight on this rank."""

    def __init__(self, done: Callable[[], bool], finish: Callable[[], None], what: str,
                 timeout: float, on_timeout: Callable[[], None] = lambda: None):
        self.done, self.finish, self.what = done, finish, what
        self.deadline = time.monotonic() + timeout
        self.timeout, self.on_timeout = timeout, on_timeout

    def wait(self) -> None:
        """Return once the collective completed here (its result is in place), or raise
        DistributedError at the deadline. Polls with a pause that grows to 1 ms, so a rank
        waiting for a slower one leaves the CPU to it."""
        pause = 0.0
        while not self.done():
            if time.monotonic() > self.deadline:
                self.on_timeout()
                raise DistributedError(
                    f"{self.what} did not complete within {self.timeout:g} s: another rank has died, "
                    "hangs, or runs different code (set TINYGRAD_TX_DIST_TIMEOUT to wait longer)")
            time.sleep(pause)
            pause = min(2 * pause + 1e-5, 1e-3)
        self.finish()


class MpiCommunicator:
    """Collectives over an mpi4py communicator, on host memory."""

    def __init__(self, comm: Any, timeout: float):
        from mpi4py import MPI

        self.MPI, self.comm, self.timeout = MPI, comm, timeout

    def all_reduce(self, array: Any, backend: Backend) -> Pending:
        """Start summing `array` over the ranks, in place."""
        host, copy_back = _host_buffer(array, backend)
        request = self.comm.Iallreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)
        return Pending(request.Test, copy_back, f"all_reduce of {array.size} values", self.timeout)

    def broadcast(self, array: Any, backend: Backend, root: int) -> Pending:
        """Start overwriting `array` with rank `root`'s, in place."""
        host, copy_back = _host_buffer(array, backend)
        request = self.comm.Ibcast(host, root=root)
        return Pending(request.Test, copy_back, f"broadcast of {array.size} values from rank {root}", self.timeout)

    def barrier(self) -> Pending:
        return Pending(self.comm.Ibarrier().Test, lambda: None, "barrier", self.timeout)


def _host_buffer(array: Any, backend: Backend) -> tuple[np.ndarray, Callable[[], None]]:
    """A contiguous NumPy view of `array` for MPI to work in, and what copies the result back
    (nothing when the view is the array's own memory, as for a contiguous "cpu" array)."""
    host = np.ascontiguousarray(backend.to_host(array)).reshape(-1)
    if isinstance(array, np.ndarray) and np.shares_memory(host, array):
        return host, lambda: None

    def copy_back() -> None:
        array[...] = backend.from_host(host.reshape(array.shape))

    return host, copy_back


class NcclCommunicator:
    """Collectives over NCCL on the current GPU, created collectively by every rank."""

    def __init__(self, mpi_comm: Any, timeout: float):
        import cupy
        from cupy.cuda import nccl

        if not getattr(nccl, "available", True):  # CuPy found no NCCL library at run time
            raise ImportError("CuPy found no NCCL library")
        self.cupy, self.nccl, self.timeout = cupy, nccl, timeout
        unique_id = nccl.get_unique_id() if mpi_comm.rank == 0 else None
        unique_id = mpi_comm.bcast(unique_id, root=0)  # rank 0's id, so all join one communicator
        self.comm = nccl.NcclCommunicator(mpi_comm.size, unique_id, mpi_comm.rank)
        self.types = {np.dtype(np.float16): nccl.NCCL_FLOAT16, np.dtype(np.float32): nccl.NCCL_FLOAT32,
                      np.dtype(np.float64): nccl.NCCL_FLOAT64, np.dtype(np.int32): nccl.NCCL_INT32,
                      np.dtype(np.int64): nccl.NCCL_INT64}

    def all_reduce(self, array: Any, backend: Backend) -> Pending:
        buffer, copy_back = self._contiguous(array)
        stream = self.cupy.cuda.get_current_stream()
        self.comm.allReduce(buffer.data.ptr, buffer.data.ptr, buffer.size, self._type(buffer),
                            self.nccl.NCCL_SUM, stream.ptr)
        return self._pending(stream, copy_back, f"NCCL all_reduce of {array.size} values")

    def broadcast(self, array: Any, backend: Backend, root: int) -> Pending:
        buffer, copy_back = self._contiguous(array)
        stream = self.cupy.cuda.get_current_stream()
        self.comm.bcast(buffer.data.ptr, buffer.size, self._type(buffer), root, stream.ptr)
        return self._pending(stream, copy_back, f"NCCL broadcast of {array.size} values from rank {root}")

    def _type(self, array: Any) -> int:
        try:
            return self.types[np.dtype(array.dtype)]
        except KeyError:
            raise DistributedError(f"NCCL collectives here take {sorted(map(str, self.types))}, "
                                   f"not {array.dtype}") from None

    def _contiguous(self, array: Any) -> tuple[Any, Callable[[], None]]:
        if array.flags.c_contiguous:
            return array, lambda: None
        buffer = self.cupy.ascontiguousarray(array)

        def copy_back() -> None:
            array[...] = buffer

        return buffer, copy_back

    def _pending(self, stream: Any, finish: Callable[[], None], what: str) -> Pending:
        """An event recorded after the NCCL call tells when it is done on this GPU; on timeout the
        communicator is aborted, which is how NCCL frees a kernel stuck waiting for a dead peer."""
        event = self.cupy.cuda.Event(disable_timing=True)
        event.record(stream)
        return Pending(lambda: event.done, finish, what, self.timeout, on_timeout=self.comm.abort)
