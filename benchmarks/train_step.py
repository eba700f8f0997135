"""One Adam training step of the encoder-decoder Transformer: tinygrad_tx (eager and `tx.jit`) vs PyTorch eager.

Both models have the same shape (embeddings, nn.Transformer-style layers with
post-LN, output layer, dropout 0.1), get the same batch (padded, with a
label-smoothed cross-entropy that ignores padding) and run alternately in one
process; the median of several steps after warm-up is reported, with the
ratios, the achieved matmul GFLOP/s as a fraction of this machine's measured
sgemm rate, and (with --memory) the peak memory of each, each in a fresh process.
On a GPU (--device cuda) each size also gets its kernel launches a step and the jit's
replay captured as one CUDA graph, or what stops the capture (`gpu.py`).
"toy" is the size the translation tasks train at (d_model 64, batches of short sequences).
The first row is the per-op overhead of `op_overhead.py`, so one run prints every row.

With --all (= --memory --busy --main-job) one run prints every row of the speed table:
also the toy step beside a second busy process, and the wall time of the README's main
job, `python -m models train --task reverse`, with the jit and with --no-jit.

    python benchmarks/train_step.py [--config toy,S,M] [--steps 9] [--memory] [--busy] [--main-job] [--all] [--write-docs]
                                    [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import gpu
import op_overhead
import threads
from common import CONFIGS, ours, theirs
from report import written_to_docs
from tinygrad_tx.jit import JitError


def matmul_flops(c: dict) -> float:
    """FLOPs of the step's matrix products: forward, plus twice that for backward."""
    D, F, V, L, N, T = c["d_model"], c["d_ff"], c["vocab"], c["layers"], c["batch"] * c["length"], c["length"]
    attention = 2 * 2 * c["batch"] * T * T * D  # q kᵀ and weights·v, all heads together
    encoder_layer = 2 * N * (4 * D * D + 2 * D * F) + attention
    decoder_layer = 2 * N * (8 * D * D + 2 * D * F) + 2 * attention
    forward = L * (encoder_layer + decoder_layer) + 2 * N * D * V
    return 3 * forward


def sgemm_gflops(device: str) -> float:
    """This machine's float32 matrix-product rate at n = 1024, via the backend's library."""
    import tinygrad_tx as tx

    xp = tx.get_backend(device).xp
    a = xp.asarray(np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32))
    times = []
    for _ in range(6):
        start = time.perf_counter()
        (a @ a).sum().item()
        times.append(time.perf_counter() - start)
    return 2 * 1024 ** 3 / min(times) / 1e9


FRAMEWORKS = {"torch": theirs, "tinygrad_tx": ours, "tinygrad_tx+jit": lambda c, device: ours(c, device, jit=True)}


def set_threads(n: int) -> None:
    """The same number of compute threads for both: NumPy's BLAS (threadpoolctl) and PyTorch."""
    from threadpoolctl import threadpool_limits

    import torch

    threadpool_limits(n, user_api="blas")
    torch.set_num_threads(n)


def gpu_name() -> str:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


def time_side_by_side(steps: dict, repeats: int, warmup: int = 2) -> dict:
    """Median seconds per step for each framework, run alternately so all see the same machine."""
    samples = {name: [] for name in steps}
    for i in range(warmup + repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            if i >= warmup:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def peak_memory(config: str, framework: str, device: str) -> float:
    """MiB of peak resident memory added by building the model and running 3 steps (fresh process)."""
    code = (f"import sys; sys.path.insert(0, 'benchmarks'); import train_step as b; "
            f"print(b.measure_in_process({config!r}, {framework!r}, {device!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20


def measure_in_process(config: str, framework: str, device: str) -> float:
    """Peak resident memory during 3 steps, minus what the process held before building the model.

    Sampled every millisecond by a thread: the process's own high-water mark is no use,
    as importing torch peaks higher than a small model's step. On a GPU: the device memory
    held at the peak, by CuPy's memory pool for tinygrad_tx and by PyTorch's caching allocator.
    """
    import threading

    import torch  # noqa: F401  (imported by both runs, so the baseline is the same)

    import tinygrad_tx  # noqa: F401

    if device == "cuda":
        return gpu_peak_mib(config, framework)
    before, peak, done = resident_mib(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident_mib())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    step = FRAMEWORKS[framework](CONFIGS[config], device)
    for _ in range(3):
        step()
    done.set()
    sampler.join()
    return peak[0] - before


def gpu_peak_mib(config: str, framework: str) -> float:
    """MiB of GPU memory held at the peak of 3 steps: PyTorch's reserved bytes, or the bytes
    CuPy's pool holds (a pool keeps what it freed for reuse, so what it holds after the steps
    is what the peak needed)."""
    import cupy
    import torch

    step = FRAMEWORKS[framework](CONFIGS[config], "cuda")
    for _ in range(3):
        step()
    if framework == "torch":
        return torch.cuda.max_memory_reserved() / 2 ** 20
    return cupy.get_default_memory_pool().total_bytes() / 2 ** 20


def gpu_rows(name: str, row: dict, steps: int) -> None:
    """On a GPU: kernel launches a step for each framework, and the jit's replay launched as one
    CUDA graph (`tx.jit(step, cuda_graph=True)`): its time and whether its losses are the plain
    replay's bit for bit, or why it cannot be captured."""
    c = CONFIGS[name]
    try:
        counts = {f: gpu.launches(make(c, "cuda")) for f, make in FRAMEWORKS.items()}
    except Exception as error:  # noqa: BLE001  (the profiler may not see CUPTI: the row says so)
        print(f"   launches a step: not counted ({type(error).__name__}: {error})")
    else:
        row["launches"] = counts
        print("   launches a step: " + ", ".join(f"{f} {n['kernels']} kernels + {n['copies']} copies/memsets"
                                               for f, n in counts.items()))
    try:
        graph, replay = (gpu.losses(lambda: ours(c, "cuda", jit=True, cuda_graph=g)) for g in (True, False))
    except JitError as error:
        row["cuda_graph"] = str(error)
        print(f"   jit replay as one CUDA graph: {str(error).removeprefix('jit: ')}")
        return
    graphed = ours(c, "cuda", jit=True, cuda_graph=True)
    t = time_side_by_side({"torch": theirs(c, "cuda"), "graph": graphed}, steps)
    kernels = gpu.launches(graphed)
    graph_mib = sum(tape.graph.nbytes() for tape in graphed.run.tapes.values() if tape.graph) / 2 ** 20
    differs = max(abs(a - b) / abs(b) for a, b in zip(graph, replay))
    row["cuda_graph"] = {"ms": 1e3 * t["graph"], "ratio": t["graph"] / t["torch"], "kernels": kernels,
                         "graph_mib": graph_mib, "loss_relative_difference": differs}
    print(f"   jit replay as one CUDA graph: {1e3 * t['graph']:.1f} ms (ratio {t['graph'] / t['torch']:.2f}); "
          f"{kernels['kernels']} kernels + {kernels['copies']} copies/memsets run a step, the graph's among them; "
          f"the graph's own memory {graph_mib:.0f} MiB; losses over {len(graph)} steps "
          + ("equal to the plain replay's, bit for bit" if graph == replay else
             f"within {differs:.1e} (relative) of the plain replay's (its products are cuBLAS called directly)"))


def main_job(jit: bool) -> tuple[float, str]:
    """Wall seconds of `python -m models train --task reverse` in a fresh process (into a
    temporary run directory), and its held-out report line."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "models", "train", "--task", "reverse", "--out", os.path.join(tmp, "run")]
        start = time.perf_counter()
        done = subprocess.run(command + ([] if jit else ["--no-jit"]), capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
    report = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("held-out")]
    return seconds, report[-1] if report else "(no held-out line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="toy,S,M", help="comma-separated, from: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--memory", action="store_true", help="also measure peak memory (fresh processes)")
    parser.add_argument("--busy", action="store_true", help="also time the toy step beside a second busy process")
    parser.add_argument("--main-job", action="store_true",
                        help="also time `python -m models train --task reverse`, jit and --no-jit (about 2 minutes)")
    parser.add_argument("--all", action="store_true", help="--memory --busy --main-job: every row")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS threads for NumPy and intra-op threads for PyTorch (default 1: on a "
                             "shared 2-core machine more threads spin against each other)")
    args = parser.parse_args()
    if args.all:
        args.memory = args.busy = args.main_job = True
    set_threads(args.threads)
    names = args.config.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown config {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    peak = sgemm_gflops(args.device)
    print(f"sgemm on this machine: {peak:.0f} GFLOP/s (n = 1024)" + (f"; {gpu_name()}" if args.device == "cuda" else ""))
    results = {"op": op_overhead.measure(device=args.device)}
    op = results["op"]
    print(f"small op 8x8, forward + backward: torch {op['torch']:.2f} µs; tinygrad_tx eager {op['tinygrad_tx']:.2f} µs "
          f"(ratio {op['tinygrad_tx'] / op['torch']:.2f}), jit {op['tinygrad_tx+jit']:.2f} µs "
          f"(ratio {op['tinygrad_tx+jit'] / op['torch']:.2f})")
    for name in names:
        c = CONFIGS[name]
        t = time_side_by_side({f: make(c, args.device) for f, make in FRAMEWORKS.items()}, args.steps)
        gflop = matmul_flops(c) / 1e9
        row = {"torch_ms": 1e3 * t["torch"], "eager_ms": 1e3 * t["tinygrad_tx"], "jit_ms": 1e3 * t["tinygrad_tx+jit"],
               "eager_ratio": t["tinygrad_tx"] / t["torch"], "jit_ratio": t["tinygrad_tx+jit"] / t["torch"],
               "gflop": gflop, "jit_of_peak": gflop / t["tinygrad_tx+jit"] / peak}
        print(f"{name}: torch {row['torch_ms']:.1f} ms/step; tinygrad_tx eager {row['eager_ms']:.1f} ms "
              f"(ratio {row['eager_ratio']:.2f}), jit {row['jit_ms']:.1f} ms (ratio {row['jit_ratio']:.2f}); "
              f"{gflop:.2f} GFLOP of matmuls a step, jit at {100 * row['jit_of_peak']:.0f}% of sgemm")
        if args.memory:
            for f in FRAMEWORKS:
                row[f + "_mib"] = peak_memory(name, f, args.device)
            print(f"   peak memory added: torch {row['torch_mib']:.0f} MiB, tinygrad_tx eager "
                  f"{row['tinygrad_tx_mib']:.0f} MiB (ratio {row['tinygrad_tx_mib'] / row['torch_mib']:.2f}), "
                  f"jit {row['tinygrad_tx+jit_mib']:.0f} MiB (ratio {row['tinygrad_tx+jit_mib'] / row['torch_mib']:.2f})")
        if args.device == "cuda":
            gpu_rows(name, row, args.steps)
        results[name] = row
    if args.busy:
        row = {}
        for mode, jit in (("jit", True), ("eager", False)):
            alone, beside = (threads.measure("toy", str(args.threads), 15, busy, jit) for busy in (False, True))
            row[mode] = {"alone_ms": 1e3 * alone, "beside_ms": 1e3 * beside, "slowdown": beside / alone}
        print(f"toy step beside one busy process ({args.threads} BLAS thread(s), fresh processes): " + "; ".join(
            f"{mode} {r['alone_ms']:.1f} ms alone, {r['beside_ms']:.1f} ms beside ({r['slowdown']:.2f}x)"
            for mode, r in row.items()))
        results["busy"] = row
    if args.main_job:
        (jit_s, jit_report), (eager_s, eager_report) = main_job(True), main_job(False)
        print(f"main job `python -m models train --task reverse`: jit {jit_s:.1f} s, --no-jit {eager_s:.1f} s "
              f"(ratio {jit_s / eager_s:.2f})\n   jit: {jit_report}\n   --no-jit: {eager_report}")
        results["main_job"] = {"jit_s": jit_s, "eager_s": eager_s}
    print(json.dumps(results))


if __name__ == "__main__":
    with written_to_docs("train_step_cuda" if "cuda" in sys.argv[1:] else "train_step"):
        main()
