"""Data parallelism across processes started by `mpiexec` (`import tinygrad_tx.distributed as dist`).

    mpiexec -n 4 python train.py

    dist.init()                         # from mpiexec's environment; a job of one without it
    model = dist.DataParallel(model)    # rank 0's parameters everywhere; averaged gradients
    for step ...:
        src, tgt = my_shard_of(global_batch, dist.rank(), dist.world_size())
        loss = ...; optimizer.zero_grad(); loss.backward(); optimizer.step()

Each rank computes gradients on its shard of the batch, an all-reduce averages them,
and every rank applies the same update, so the ranks' models stay identical.
Device "cpu" communicates over MPI (mpi4py); "cuda" over NCCL (CuPy's cupy.cuda.nccl).
Without mpiexec every call is the single-process identity.

Files: `group.py` (joining the job, ending it on failure), `communicators.py` (MPI and
NCCL, with timeouts), `collectives.py` (all_reduce, broadcast, barrier),
`data_parallel.py` (bucketed gradient averaging during backward).
"""
from .collectives import all_reduce, barrier, broadcast
from .communicators import DistributedError
from .data_parallel import CommStats, DataParallel
from .group import exit, init, launched_by_mpi, rank, world_size

__all__ = ["init", "rank", "world_size", "all_reduce", "broadcast", "barrier", "DataParallel", "CommStats",
           "DistributedError", "exit", "launched_by_mpi"]
