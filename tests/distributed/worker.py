"""Run by the tests of this folder (helpers.run_worker) under
`mpiexec -n 2 python worker.py CASE DEVICE OUT_DIR`.

Each case computes on this rank and saves what it got to OUT_DIR/rank<r>.npz; the test
compares those files with values it computes itself, in one process, without MPI.
"""
import sys
import time

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
from tinygrad_tx import nn, optim


def collectives(device: str) -> dict:
    r = dist.rank()
    t = tx.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1), device=device)
    dist.all_reduce(t, op="sum")
    mean = tx.Tensor(np.full(5, r + 1.0, dtype=np.float64), device=device)
    dist.all_reduce(mean)  # op="mean" by default
    host = np.arange(4, dtype=np.int64) + 10 * r
    dist.all_reduce(host, op="sum")
    strided = tx.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) * (r + 1), device=device)
    view = strided.data[:, ::2]  # not contiguous: reduced through a copy, written back
    dist.all_reduce(view, op="sum")
    b = tx.Tensor(np.full(3, 7.0 if r == 1 else -1.0, dtype=np.float32), device=device)
    dist.broadcast(b, root=1)
    loss = tx.Tensor(np.arange(3, dtype=np.float32) * (r + 1), device=device).sum()  # an op's 0-d result
    dist.all_reduce(loss)  # was "'numpy.float32' object does not support item assignment"
    zero_d = (tx.Tensor([float(r)], device=device) * 2.0).sum()
    dist.broadcast(zero_d, root=1)
    dist.barrier()
    return {"sum": t.numpy(), "mean": mean.numpy(), "host": host, "strided": strided.numpy(),
            "broadcast": b.numpy(), "loss": loss.numpy(), "zero_d_broadcast": zero_d.numpy(),
            "count": dist.all_reduce(r + 1, op="sum"),
            "float_mean": dist.all_reduce(float(r), op="mean")}


class Net(nn.Module):
    """Parameters of mixed sizes, one never used, one used on rank 0 only."""

    def __init__(self):
        self.big = nn.Linear(8, 32)
        self.small = nn.Linear(32, 3)
        self.unused = nn.Linear(5, 5)
        self.rank0_only = tx.Tensor(np.ones(8, dtype=np.float32), requires_grad=True)

    def __call__(self, x, use_extra: bool):
        out = self.small(self.big(x).tanh())  # (B, 3)
        if use_extra:
            out = out + (x * self.rank0_only).sum(axis=-1, keepdims=True)
        return out


def data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)


def data_parallel(device: str) -> dict:
    """Three SGD steps; each rank takes rows rank::2 of the global batch."""
    tx.manual_seed(dist.rank())  # different initial weights per rank: the broadcast must fix them
    model = dist.DataParallel(Net().to(device), bucket_mb=600 / 2 ** 20)  # ~600 B: several mixed buckets
    opt = optim.SGD(model.parameters(), lr=0.1)
    grads, calls, early = {}, [], []
    for step in range(3):
        x, y = data(step, 7)  # 7 rows: shards of 4 and 3
        x, y = x[dist.rank()::2], y[dist.rank()::2]
        out = model(tx.Tensor(x, device=device), use_extra=dist.rank() == 0)
        # this rank's part of the global batch's loss (sum over its 7 rows / 7), times the number of
        # ranks, since DataParallel averages the ranks' gradients: their mean is the global gradient
        loss = ((out - tx.Tensor(y, device=device)) ** 2).sum() * (dist.world_size() / 7)
        opt.zero_grad()
        with tx.inspect.profile() as profile:
            loss.backward()
        if step == 0:
            grads = {f"grad.{k}": (p.grad.numpy() if p.grad is not None else np.array(np.nan))
                     for k, p in model.module.named_parameters()}
        opt.step()
        calls.append(model.stats.calls)
        early.append(model.stats.early)
    params = {f"param.{k}": p.numpy() for k, p in model.module.named_parameters()}
    return {**grads, **params, "buckets": np.array([len(b.params) for b in model.buckets]),
            "calls": np.diff([0] + calls), "early_calls": np.diff([0] + early), "profiled_steps": profile.stats["all_reduce"].calls}


def data_parallel_jit(device: str) -> dict:
    """The same six SGD steps eagerly and under tx.jit (a recording, then five replays)."""
    out = {}
    for mode in ("eager", "jit"):
        tx.manual_seed(dist.rank())
        model = dist.DataParallel(Net().to(device), bucket_mb=600 / 2 ** 20)
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            loss = ((model(x, use_extra=dist.rank() == 0) - y) ** 2).sum() * (dist.world_size() / 7)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        run, early = tx.jit(step) if mode == "jit" else step, []
        for i in range(6):
            x, y = data(i, 7)
            run(tx.Tensor(x[dist.rank()::2], device=device), tx.Tensor(y[dist.rank()::2], device=device))
            early.append(model.stats.early)
        out.update({f"{mode}.{k}": p.numpy() for k, p in model.module.named_parameters()})
        out[f"{mode}.early"] = np.diff([0] + early)
    out["replays"] = np.array(run.replays)
    return out


def collectives_jit(device: str) -> dict:
    """Averaging gradients by hand inside a jitted step (no DataParallel), and a broadcast and a
    sum of the loss: six steps eagerly and under tx.jit; replays must make the collectives again."""
    out = {}
    for mode in ("eager", "jit"):
        tx.manual_seed(dist.rank())  # different initial weights per rank: the broadcast inside fixes them
        model = Net().to(device)
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            for p in model.parameters():
                dist.broadcast(p)
            loss = ((model(x, use_extra=False) - y) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
            opt.step()
            return dist.all_reduce(loss.reshape(1), op="sum")  # (1,): a 0-d result was once a NumPy scalar

        run = tx.jit(step) if mode == "jit" else step
        losses = []
        for i in range(6):
            x, y = data(i, 7)
            losses.append(run(tx.Tensor(x[dist.rank()::2], device=device),
                              tx.Tensor(y[dist.rank()::2], device=device)).numpy())
        out.update({f"{mode}.{k}": p.numpy() for k, p in model.named_parameters()})
        out[f"{mode}.losses"] = np.array(losses)
    out["replays"] = np.array(run.replays)
    return out


def fails(device: str) -> dict:
    """Rank 1 raises after a first collective; rank 0 goes on to the next one."""
    dist.all_reduce(np.ones(2), op="sum")
    if dist.rank() == 1:
        raise ValueError("rank 1 fails on purpose")
    dist.all_reduce(np.ones(2), op="sum")
    return {}


def hangs(device: str) -> dict:
    """Rank 1 stops answering; rank 0's next collective must give up at the timeout."""
    dist.all_reduce(np.ones(2), op="sum")
    if dist.rank() == 1:
        time.sleep(120)
    dist.all_reduce(np.ones(2), op="sum")
    return {}


if __name__ == "__main__":
    case, device, out = sys.argv[1:4]
    dist.init(device)
    results = globals()[case](device)
    np.savez(f"{out}/rank{dist.rank()}.npz", **results)
