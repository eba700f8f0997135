"""The process group (distributed/group.py): a job of one is the identity without mpiexec,
each rank of a host gets a GPU of its own or a refusal in words, and one failing or hanging
rank ends the whole job."""
import time

import pytest

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist

from .helpers import needs_mpi, run_worker


# -- without mpiexec: a job of one ---------------------------------------------------------

def test_more_ranks_than_gpus_is_refused_in_words():
    """Seen on a one-GPU H200: two ranks took GPU 0 both (local rank % GPUs) and NCCL failed
    with NCCL_ERROR_INVALID_USAGE and a traceback on each rank. Each rank has its own GPU."""
    assert [dist.group.gpu_of(r, 2, 2) for r in range(2)] == [0, 1]
    assert dist.group.gpu_of(1, 2, 8) == 1
    with pytest.raises(dist.DistributedError, match=r"2 ranks on this host but 1 GPU\(s\).*one GPU per rank"):
        dist.group.gpu_of(0, 2, 1)


def test_single_process_is_the_identity(device):
    assert not dist.launched_by_mpi()
    assert (dist.rank(), dist.world_size()) == (0, 1)
    t = tx.Tensor([1.0, 2.0], device=device)
    assert dist.all_reduce(t) is t and dist.broadcast(t) is t
    assert t.numpy().tolist() == [1.0, 2.0]
    assert dist.all_reduce(3, op="sum") == 3
    dist.barrier()
    model = tx.nn.Linear(2, 2).to(device)
    wrapped = dist.DataParallel(model)
    assert wrapped.buckets == [] and all(p._ready_hooks == () for p in model.parameters())
    assert wrapped.parameters() == model.parameters()  # the wrapper passes on to its module
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(t, op="max")


# -- with mpiexec ---------------------------------------------------------------------------

@needs_mpi
@pytest.mark.parametrize("case, message", [
    ("fails", "ValueError: rank 1 fails on purpose"),
    ("hangs", "did not complete within 2 s"),
])
def test_one_failing_rank_ends_the_job(case, message, tmp_path):
    started = time.monotonic()
    done = run_worker(case, "cpu", tmp_path, timeout=60, env={"TINYGRAD_TX_DIST_TIMEOUT": "2"})
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert message in done.stderr and "ending all 2 ranks" in done.stderr, done.stderr
