"""Per-op overhead: a chain of small (8×8) elementwise ops, forward and backward.

At this size the arithmetic is nothing; what is measured is the Python and
bookkeeping cost each framework pays per op: creating a node, walking the graph,
accumulating gradients. tinygrad_tx runs eagerly and under `tx.jit` (the chain
recorded once, then replayed on raw arrays), all in the same process, taking turns.

    python benchmarks/op_overhead.py [--ops 300] [--repeats 30] [--write-docs]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinygrad_tx as tx
from report import written_to_docs


def chain(x, w, n_ops: int):
    """n_ops ops: repeated (mul, add, tanh) on one small tensor."""
    y = x
    for i in range(n_ops // 3):
        y = (y * w + x).tanh()
    return y.sum()


def time_per_op(steps: dict, n_ops: int, repeats: int) -> dict:
    """Median µs per op (forward + backward) of each step over `repeats` runs, after one
    warm-up; the steps take turns, so that on a shared machine all see the same load.
    `steps` maps a name to (make_inputs, step)."""
    samples = {name: [] for name in steps}
    for r in range(repeats + 1):
        for name, (make_inputs, step) in steps.items():
            inputs = make_inputs()
            start = time.perf_counter()
            step(*inputs)
            if r:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) / (n_ops // 3 * 3 + 1) * 1e6 for name, s in samples.items()}


def measure(n_ops: int = 300, repeats: int = 30, device: str = "cpu") -> dict:
    """µs per op for tinygrad_tx eager, tinygrad_tx under tx.jit and (if installed) PyTorch eager."""
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal((8, 8), dtype=np.float32), rng.standard_normal((8, 8), dtype=np.float32) * 0.5

    def ours():
        return (tx.Tensor(x0, requires_grad=True, device=device), tx.Tensor(w0, requires_grad=True, device=device))

    def step(x, w):
        chain(x, w, n_ops).backward()

    steps = {"tinygrad_tx": (ours, step), "tinygrad_tx+jit": (ours, tx.jit(step))}
    try:
        import torch
    except ImportError:
        return time_per_op(steps, n_ops, repeats)

    def theirs():
        return (torch.tensor(x0, requires_grad=True, device=device), torch.tensor(w0, requires_grad=True, device=device))

    steps["torch"] = (theirs, step)
    return time_per_op(steps, n_ops, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    results = measure(args.ops, args.repeats, args.device)
    if "torch" not in results:
        print("torch is not installed: only tinygrad_tx was measured")
    for name, us in results.items():
        print(f"{name:16s} {us:6.2f} µs per op (forward + backward)")
    if "torch" in results:
        for name in ("tinygrad_tx", "tinygrad_tx+jit"):
            print(f"ratio {name} / torch = {results[name] / results['torch']:.2f}")


if __name__ == "__main__":
    with written_to_docs("op_overhead"):
        main()
