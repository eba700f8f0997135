"""Data-parallel scaling of a Transformer training step: 1 and 2 ranks measured, 8 and 64 projected.

    python benchmarks/scaling.py [--config S|M] [--steps 9] [--ranks 1 2] [--write-docs]

Each measurement is `mpiexec -n N` of this script with one BLAS thread per rank. Every
rank keeps the config's batch (weak scaling: the global batch grows with N), so ideal
scaling keeps the step time and multiplies tokens/s by N. A step is what the trainer
does: the global token count (one tiny all-reduce), forward, the padding-aware loss,
backward with DataParallel's bucketed all-reduce, and an Adam step. Reported per N:
the median step time, tokens/s, and the seconds per step this rank spent starting and
waiting for all-reduces (what backward did not hide), plus the profiler's rows for one
step of rank 0 (`all_reduce` is DataParallel's row).

The projection uses the bytes all-reduced per step and the ring all-reduce cost model,
    t(N) = 2 (N - 1) / N · bytes / bandwidth + 2 (N - 1) · α · buckets,
with per-message latency α = 25 µs on 10 Gbit/s Ethernet (TCP) and 3 µs on 100 Gbit/s
(RDMA), and no overlap with backward (a lower bound on efficiency). Weak scaling keeps
the measured one-rank step time per rank; strong scaling splits a global batch of 64
sequences, so the compute per rank shrinks as 1/N while the bytes to send do not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from common import CONFIGS, PAD, make_batch
from report import written_to_docs

LINKS = {"10 Gbit/s": (10e9 / 8, 25e-6), "100 Gbit/s": (100e9 / 8, 3e-6)}  # bytes/s, α
STRONG_GLOBAL_BATCH = 64


def worker(config: str, steps: int, warmup: int = 2) -> None:
    """One rank: time `steps` training steps and print rank 0's figures as one JSON line."""
    import tinygrad_tx as tx
    import tinygrad_tx.distributed as dist
    import tinygrad_tx.functional as F
    from models import Transformer

    dist.init()
    c = CONFIGS[config]
    tx.manual_seed(0)
    model = Transformer(c["vocab"], c["vocab"], d_model=c["d_model"], num_heads=c["heads"],
                        num_encoder_layers=c["layers"], num_decoder_layers=c["layers"], d_ff=c["d_ff"],
                        dropout=0.1, max_len=c["length"], pad_id=PAD)
    parallel = dist.DataParallel(model)
    opt = tx.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt_in, tgt_out = make_batch(c, seed=dist.rank())  # each rank its own shard
    target = tx.Tensor(tgt_out)

    def step() -> int:
        n_tokens = dist.all_reduce(int((tgt_out != PAD).sum()), op="sum")
        loss = F.cross_entropy(parallel(src, tgt_in), target, ignore_index=PAD, label_smoothing=0.1,
                               reduction="sum") / (n_tokens / dist.world_size())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return n_tokens

    times, comm, tokens = [], [], 0
    for i in range(warmup + steps):
        dist.barrier()  # start together: waiting for a slower rank then shows up in the all-reduce
        before, start = parallel.stats.seconds, time.perf_counter()
        tokens = step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
            comm.append(parallel.stats.seconds - before)
    with tx.inspect.profile() as profile:
        step()
    rows = [line for line in profile.table().splitlines() if line.split()[0] in ("op", "all_reduce", "total")]
    if dist.rank() == 0:
        print(json.dumps({"ranks": dist.world_size(), "step_s": statistics.median(times),
                          "all_reduce_s": statistics.median(comm), "tokens": tokens,
                          "bytes": sum(p.data.nbytes for p in model.parameters()),
                          "buckets": len(parallel.buckets), "profile": rows,
                          "early": parallel.stats.early / max(parallel.stats.calls, 1)}))


def ring_seconds(n: int, nbytes: int, buckets: int, bandwidth: float, alpha: float) -> float:
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha * buckets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="S", choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.config, args.steps)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    measured = {}
    for n in args.ranks:
        out = subprocess.run(["mpiexec", "-n", str(n), sys.executable, __file__, "--worker", "--config",
                              args.config, "--steps", str(args.steps)], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"mpiexec -n {n} failed:\n{out.stderr}")
        measured[n] = json.loads(out.stdout.strip().splitlines()[-1])

    c = CONFIGS[args.config]
    print(f"config {args.config}: d_model {c['d_model']}, {c['layers']}+{c['layers']} layers, vocab {c['vocab']}, "
          f"batch {c['batch']}x{c['length']} per rank, 1 BLAS thread per rank")
    print(f"{'ranks':>5}{'step ms':>10}{'tokens/s':>11}{'speed-up':>10}{'all-reduce ms':>15}{'share':>8}")
    base = measured[min(measured)]
    for n, m in measured.items():
        rate = m["tokens"] / m["step_s"]
        print(f"{n:>5}{1e3 * m['step_s']:>10.1f}{rate:>11.0f}{rate / (base['tokens'] / base['step_s']):>10.2f}"
              f"{1e3 * m['all_reduce_s']:>15.2f}{100 * m['all_reduce_s'] / m['step_s']:>7.1f}%")
    widest = measured[max(measured)]
    print(f"{100 * widest['early']:.0f}% of the all-reduces with {widest['ranks']} ranks started while backward ran")
    print(f"\nprofiler, one step of rank 0 with {widest['ranks']} ranks (instrumented, so slower):")
    print("\n".join("   " + row for row in widest["profile"]))

    nbytes, buckets, compute = widest["bytes"], max(widest["buckets"], 1), base["step_s"]
    print(f"\nprojection: {nbytes / 2 ** 20:.1f} MiB all-reduced per step in {buckets} bucket(s); "
          f"one-rank step {1e3 * compute:.0f} ms; ring all-reduce, no overlap")
    print(f"{'ranks':>5}{'link':>12}{'all-reduce ms':>15}{'weak eff.':>11}{'strong eff.':>13}")
    for n in (8, 64):
        for link, (bandwidth, alpha) in LINKS.items():
            t = ring_seconds(n, nbytes, buckets, bandwidth, alpha)
            strong = compute * c["batch"] / STRONG_GLOBAL_BATCH / n  # a global batch of 64 sequences over n ranks
            print(f"{n:>5}{link:>12}{1e3 * t:>15.2f}{100 * compute / (compute + t):>10.0f}%"
                  f"{100 * strong / (strong + t):>12.0f}%")
    for link, (bandwidth, alpha) in LINKS.items():
        half = next((n for n in range(2, 100_000) if compute * c["batch"] / STRONG_GLOBAL_BATCH / n
                     < ring_seconds(n, nbytes, buckets, bandwidth, alpha)), None)
        print(f"strong scaling, {link}: below 50% efficiency from {half} ranks, where a rank's share of the "
              f"batch computes faster than the gradients ({nbytes / 2 ** 20:.1f} MiB) cross the ring")


if __name__ == "__main__":
    with written_to_docs("scaling"):
        main()
