"""Who we are in the job: rank, world size, the communicators, and how a failure ends the job.

`init()` reads the job from the environment that `mpiexec` gives each process. A
process started without `mpiexec` is a job of one: rank 0 of 1, mpi4py is never
imported, and every collective returns its input (the single-process identity).

A failure on one rank must end every rank, or the others wait for ever in their next
collective. Three things see to that:
- an exception nobody catches prints its traceback, prefixed with the rank, and calls
  MPI_Abort, which makes `mpiexec` stop the other ranks (`python -m mpi4py` does the same);
- `exit(code)` ends the job from one rank (a user error found on one rank only);
- every wait has a deadline (TINYGRAD_TX_DIST_TIMEOUT seconds, default 600): a rank that
  hangs or was killed without `mpiexec` noticing makes the others fail with a message.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..backends import Backend, get_backend
from .communicators import DistributedError, MpiCommunicator, NcclCommunicator

LAUNCHER_VARIABLES = ("PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")  # MPICH/Hydra, PMIx, Open MPI
INSTALL_HINT = 'pip install "tinygrad-tx[dist]"'
DEFAULT_TIMEOUT_S = 600.0
OUTPUT_GRACE_S = 0.5  # time for mpiexec to forward a failing rank's last lines before MPI_Abort


@dataclass
class Group:
    """This process's place in the job. `mpi` is None in a job of one."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # rank among the processes on this host: picks the GPU
    local_size: int = 1  # processes on this host
    mpi: MpiCommunicator | None = None
    nccl: NcclCommunicator | None = None
    comm: Any = None  # the mpi4py communicator
    timeout: float = DEFAULT_TIMEOUT_S
    gpu_chosen: bool = False

    def communicator(self, backend: Backend) -> MpiCommunicator | NcclCommunicator:
        """NCCL for GPU arrays (made on first use: every rank gets here with the same
        collective), MPI for everything else."""
        if backend.name != "cuda":
            return self.mpi
        if self.nccl is None:
            try:
                self.nccl = NcclCommunicator(self.comm, self.timeout)
            except ImportError as e:
                raise DistributedError(
                    f"device cuda needs NCCL through CuPy (cupy.cuda.nccl), which is unavailable ({e}); install "
                    "it with: python -m cupyx.tools.install_library --library nccl --cuda 12.x") from None
        return self.nccl


_group: Group | None = None


def launched_by_mpi() -> bool:
    """True in a process started by mpiexec/mpirun (its launcher sets these variables)."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def init(device: str | None = None) -> Group:
    """Join the job `mpiexec` started (once; later calls return the same group).

    With device "cuda", each rank takes the GPU `local_rank % number of GPUs`, so ranks on
    one host use different GPUs: call it before the first tensor on "cuda" (even before
    `tx.set_device("cuda")`, which already allocates on the current GPU). A rank may join
    first and name its device later (the ranks can agree on it before any touches a GPU).
    """
    global _group
    if _group is None:
        _group = _join()
    if device == "cuda" and launched_by_mpi() and not _group.gpu_chosen:
        _choose_gpu(_group.local_rank, _group.local_size)
        _group.gpu_chosen = True
    return _group


def _join() -> Group:
    """This process's place in the job mpiexec started; a job of one without mpiexec."""
    if not launched_by_mpi():
        return Group()
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError(f"started by mpiexec, but mpi4py is not installed ({e}): {INSTALL_HINT}") from None
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks that share this host's memory
    timeout = _timeout_from_environment()
    joined = Group(comm.rank, comm.size, local.rank, local.size, MpiCommunicator(comm, timeout), comm=comm,
                   timeout=timeout)
    local.Free()
    if comm.size > 1:
        sys.excepthook = _abort_on_uncaught
    return joined


def _timeout_from_environment() -> float:
    text = os.environ.get("TINYGRAD_TX_DIST_TIMEOUT", str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise DistributedError(f"TINYGRAD_TX_DIST_TIMEOUT must be a positive number of seconds, not {text!r}")
    return seconds


def _choose_gpu(local_rank: int, local_size: int) -> None:
    """Make this rank's GPU current, before CuPy allocates anything on another one."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy or no usable GPU: the backend's error says which, and how to fix it
        get_backend("cuda")
        raise
    cupy.cuda.Device(gpu_of(local_rank, local_size, count)).use()


def gpu_of(local_rank: int, local_size: int, count: int) -> int:
    """The GPU of the rank `local_rank` of `local_size` on a host with `count` GPUs: its own.
    NCCL refuses two ranks of one communicator on one GPU (on a one-GPU H200, two ranks
    failed with NCCL_ERROR_INVALID_USAGE), so more ranks than GPUs is refused here, in words."""
    if local_size > count:
        raise DistributedError(f"{local_size} ranks on this host but {count} GPU(s): data parallelism on "
                               f"cuda needs one GPU per rank; start at most {count} rank(s) per host "
                               "(mpiexec -n N), or use --device cpu")
    return local_rank


def _abort_on_uncaught(kind, value, tb) -> None:
    """sys.excepthook with several ranks: say which rank failed, then end the whole job."""
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write("".join(f"[rank {_group.rank}] {line}\n" for line in text.rstrip().split("\n")))
    sys.stderr.write(f"[rank {_group.rank}] ending all {_group.size} ranks\n")
    _abort(_group, 1)


def _abort(g: Group, code: int) -> None:
    """MPI_Abort, once what this rank wrote has reached `mpiexec`. Hydra forwards each rank's
    output through a pipe and stops reading when a rank aborts, so without the pause the
    message saying why the job ended can be lost (seen: empty stderr, 1 run in 10)."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(OUTPUT_GRACE_S)
    g.comm.Abort(code)


def group() -> Group:
    """The group, joined on first use."""
    return _group if _group is not None else init()


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1 (0 without mpiexec)."""
    return group().rank


def world_size() -> int:
    """The number of processes in the job (1 without mpiexec)."""
    return group().size


def exit(code: int) -> None:  # noqa: A001 (the job's exit, next to the builtin on purpose)
    """End this process with `code`; with several ranks, end them all (MPI_Abort), since an
    error seen by one rank would otherwise leave the others waiting in a collective."""
    g = group()
    if g.size == 1:
        sys.exit(code)
    _abort(g, code)

