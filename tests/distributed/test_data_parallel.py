"""DataParallel over two processes (distributed/data_parallel.py): a batch split over the
ranks gives one process's parameters, with one all-reduce per bucket started while backward
runs, eagerly and under tx.jit."""
import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import optim

from .helpers import RANKS, load_worker, needs_mpi, one_gpu_per_rank, replayed_as_eager, results, run_worker


@needs_mpi
def test_data_parallel_equals_one_process_with_the_whole_batch(device, tmp_path):
    """Buckets of mixed sizes, a parameter no rank uses, one used on rank 0 only, a batch
    of 7 rows split 4 + 3: three SGD steps give one process's parameters."""
    one_gpu_per_rank(device)
    done = run_worker("data_parallel", device, tmp_path)
    assert done.returncode == 0, done.stderr
    ranks = results(tmp_path)
    buckets = ranks[0]["buckets"]
    assert len(buckets) > 1 and len(set(buckets.tolist())) > 1
    assert ranks[0]["calls"][1:].tolist() == [len(buckets)] * 2  # one call per bucket, not per parameter
    # the first step finds the order gradients finish in; then buckets start while backward runs
    assert ranks[0]["early_calls"][0] == 0 and (ranks[0]["early_calls"][1:] > 0).all()
    assert ranks[0]["profiled_steps"] == 1  # the profiler's "all_reduce" row

    worker = load_worker()
    tx.manual_seed(0)  # rank 0's weights, which DataParallel broadcast
    model = worker.Net().to(device)
    opt = optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = worker.data(step, 7)
        opt.zero_grad()
        for shard in range(RANKS):  # the same rows per forward, the whole batch's loss
            out = model(tx.Tensor(x[shard::2], device=device), use_extra=shard == 0)
            loss = ((out - tx.Tensor(y[shard::2], device=device)) ** 2).sum() * (1 / 7)
            loss.backward()
        if step == 0:
            for name, p in model.named_parameters():
                for got in ranks:
                    if p.grad is None:
                        assert np.isnan(got[f"grad.{name}"]), f"{name} got a gradient no rank computed"
                    else:
                        np.testing.assert_allclose(got[f"grad.{name}"], p.grad.numpy(), rtol=1e-5, atol=1e-6,
                                                   err_msg=name)
        opt.step()
    for name, p in model.named_parameters():
        for got in ranks:
            np.testing.assert_allclose(got[f"param.{name}"], p.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


@needs_mpi
def test_data_parallel_under_jit_equals_eager_and_still_overlaps(device, tmp_path):
    """Replayed steps deliver each parameter's gradient to DataParallel's hook as eager
    backward does: the same parameters bit for bit, all-reduces started during backward."""
    ranks = replayed_as_eager("data_parallel_jit", device, tmp_path)  # "early": buckets started before the end
    assert (ranks[0]["jit.early"][1:] > 0).all()  # (rank 1's first bucket waits for rank0_only, which it never uses)
