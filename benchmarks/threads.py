"""BLAS threads, alone and beside one busy process: a library script, and a training step.

OpenBLAS, NumPy's BLAS, starts a thread per core, and its threads wait for work by
spinning. Beside another busy process those threads take turns with it for the cores,
and a step can become tens of times slower. So the engine limits NumPy's BLAS to one
thread when it is imported (`tinygrad_tx/backends/threads.py`; `tx.set_num_threads` changes it).

First table: `python examples/copy_task.py` as a user runs it, with no BLAS variable
set, in a fresh process, alone and beside one busy process (a Python loop keeping one
core busy), with the library's default and with NumPy's own (a thread per core, what a
script got before the engine set it). Second table: the median training step
(tinygrad_tx, jitted) with 1, 2 and NumPy's own number of threads, alone and beside a
second process stepping the same way (as busy as a second training run).

    python benchmarks/threads.py [--script-steps 300] [--config toy] [--steps 15] [--write-docs]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import written_to_docs

SETTINGS = ["1", "2", "numpy"]
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "copy_task.py"
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def clean_env() -> dict:
    """The environment with no BLAS variable set: the library's own default decides."""
    return {k: v for k, v in os.environ.items() if k not in BLAS_VARIABLES}


def busy_neighbour() -> subprocess.Popen:
    """One busy process: a Python loop, one core's worth of work."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def numpys_own() -> int:
    """The threads NumPy's BLAS started with; called before tinygrad_tx is imported and sets its default."""
    import numpy  # noqa: F401 - loads the BLAS
    from threadpoolctl import threadpool_info

    return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")


def script_with_numpys_own(steps: int) -> None:
    """Run copy_task.py as its user would, but with the threads NumPy's BLAS started with."""
    import runpy

    own = numpys_own()
    import tinygrad_tx as tx

    tx.set_num_threads(own)
    sys.argv = [str(SCRIPT), "--steps", str(steps)]
    runpy.run_path(str(SCRIPT), run_name="__main__")


def run_script(threads: str, busy: bool, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds of `python examples/copy_task.py --steps N` in a fresh process, with the
    library's default threads ("default") or NumPy's own ("numpy"), alone or beside a busy process."""
    command = [sys.executable, str(SCRIPT), "--steps", str(steps)] if threads == "default" else \
        [sys.executable, __file__, "--script-with-numpys-own", str(steps)]
    neighbour = busy_neighbour() if busy else None
    try:
        start = time.perf_counter()
        script = subprocess.Popen(command, env=clean_env(), stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(script.pid, 0)  # this child's own CPU time, not the neighbour's
        wall = time.perf_counter() - start
    finally:
        if neighbour:
            neighbour.kill()
            neighbour.wait()
    if status != 0:
        raise RuntimeError(f"{SCRIPT.name} failed ({status})")
    return wall, usage.ru_utime + usage.ru_stime


def worker(config: str, threads: str, steps: int, jit: bool = True) -> None:
    """Print the median seconds of `steps` steps (steps <= 0: run until killed)."""
    own = numpys_own()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common
    import tinygrad_tx as tx

    tx.set_num_threads(own if threads == "numpy" else int(threads))
    step = common.ours(common.CONFIGS[config], "cpu", jit=jit)
    step()
    times = []
    while steps <= 0 or len(times) < steps:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(statistics.median(times))


def spawn(config: str, threads: str, steps: int, jit: bool = True, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--worker", config, threads, str(steps), str(int(jit))],
                            env=clean_env(), text=True, **kwargs)


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
    if len(sys.argv) > 1 and sys.argv[1] == "--script-with-numpys-own":
        script_with_numpys_own(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script-steps", type=int, default=300, help="copy_task.py's steps (its default: 300)")
    parser.add_argument("--config", default="toy")
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    print(f"`python examples/copy_task.py --steps {args.script_steps}`, no BLAS variable set: wall s (CPU s)")
    print(f"{'BLAS threads':>22} {'alone':>14} {'beside one busy':>16} {'slow-down':>10}")
    from tinygrad_tx.backends.threads import DEFAULT

    for threads, label in (("default", f"library default ({DEFAULT})"), ("numpy", "NumPy's own (per core)")):
        alone = run_script(threads, False, args.script_steps)
        busy = run_script(threads, True, args.script_steps)
        print(f"{label:>22} {alone[0]:>6.1f} ({alone[1]:>5.1f}) {busy[0]:>7.1f} ({busy[1]:>5.1f}) "
              f"{busy[0] / alone[0]:>9.2f}x", flush=True)
    print(f"\nconfig {args.config}: median ms per training step (jitted), beside a second one stepping alike")
    print(f"{'BLAS threads':>22} {'alone':>14} {'beside one busy':>16} {'slow-down':>10}")
    for threads in SETTINGS:
        alone = measure(args.config, threads, args.steps, busy=False)
        busy = measure(args.config, threads, args.steps, busy=True)
        label = "NumPy's own (per core)" if threads == "numpy" else threads
        print(f"{label:>22} {1e3 * alone:>14.1f} {1e3 * busy:>16.1f} {busy / alone:>9.2f}x", flush=True)


if __name__ == "__main__":
    with written_to_docs("threads"):
        main()
