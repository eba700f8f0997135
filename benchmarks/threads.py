"""Training-step time against BLAS threads, alone and beside a second busy process.

OpenBLAS threads wait for work by spinning; two processes with two threads each on
a 2-core machine spin against each other, and a step can become tens of times
slower. This measures the median step (tinygrad_tx, jitted) with 1, 2 and the
library's default number of BLAS threads, alone and while another process runs the
same step in a loop with the same setting, each in fresh processes.

    python benchmarks/threads.py [--config toy] [--steps 15] [--write-docs]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from report import written_to_docs

SETTINGS = ["1", "2", "default"]


def worker(config: str, threads: str, steps: int, jit: bool = True) -> None:
    """Print the median seconds of `steps` steps (steps <= 0: run until killed)."""
    from threadpoolctl import threadpool_limits

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    if threads != "default":
        threadpool_limits(int(threads), user_api="blas")
    step = common.ours(common.CONFIGS[config], "cpu", jit=jit)
    step()
    times = []
    while steps <= 0 or len(times) < steps:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(statistics.median(times))


def spawn(config: str, threads: str, steps: int, jit: bool = True, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    return subprocess.Popen([sys.executable, __file__, "--worker", config, threads, str(steps), str(int(jit))],
                            env=env, text=True, **kwargs)


def measure(config: str, threads: str, steps: int, busy: bool, jit: bool = True) -> float:
    """Median seconds per step of a fresh process, alone or beside a second one stepping the same
    way (as busy as a second training run)."""
    neighbour = spawn(config, threads, 0, jit, stdout=subprocess.DEVNULL) if busy else None
    try:
        if neighbour:
            time.sleep(3)  # let it build its model and start stepping
        out = spawn(config, threads, steps, jit, stdout=subprocess.PIPE).communicate()[0]
    finally:
        if neighbour:
            neighbour.kill()
            neighbour.wait()
    return float(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="toy")
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    print(f"config {args.config}, {os.cpu_count()} cores; median ms per step (jitted)")
    print(f"{'BLAS threads':>12} {'alone':>10} {'beside one busy':>16} {'slow-down':>10}")
    for threads in SETTINGS:
        alone = measure(args.config, threads, args.steps, busy=False)
        busy = measure(args.config, threads, args.steps, busy=True)
        print(f"{threads:>12} {1e3 * alone:>10.1f} {1e3 * busy:>16.1f} {busy / alone:>9.2f}x", flush=True)


if __name__ == "__main__":
    with written_to_docs("threads"):
        main()
