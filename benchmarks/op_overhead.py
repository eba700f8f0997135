"""Per-op overhead: a chain of small (8×8) elementwise ops, forward and backward.

At this size the arithmetic is nothing; what is measured is the Python and
bookkeeping cost each framework pays per op: creating a node, walking the graph,
accumulating gradients. tinygrad_tx runs eagerly and under `tx.jit` (the chain
recorded once, then replayed on raw arrays); all run in the same process.

    python benchmarks/op_overhead.py [--ops 300] [--repeats 30]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinygrad_tx as tx


def chain(x, w, n_ops: int):
    """n_ops ops: repeated (mul, add, tanh) on one small tensor."""
    y = x
    for i in range(n_ops // 3):
        y = (y * w + x).tanh()
    return y.sum()


def time_per_op(make_inputs, n_ops: int, repeats: int, step=None) -> float:
    """Median µs per op (forward + backward) over `repeats` runs, after one warm-up."""
    step = step or (lambda x, w: chain(x, w, n_ops).backward())
    samples = []
    for r in range(repeats + 1):
        x, w = make_inputs()
        start = time.perf_counter()
        step(x, w)
        elapsed = time.perf_counter() - start
        if r:
            samples.append(elapsed)
    return statistics.median(samples) / (n_ops // 3 * 3 + 1) * 1e6


def measure(n_ops: int = 300, repeats: int = 30, device: str = "cpu") -> dict:
    """µs per op for tinygrad_tx eager, tinygrad_tx under tx.jit and (if installed) PyTorch eager."""
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal((8, 8), dtype=np.float32), rng.standard_normal((8, 8), dtype=np.float32) * 0.5

    def ours():
        return (tx.Tensor(x0, requires_grad=True, device=device), tx.Tensor(w0, requires_grad=True, device=device))

    results = {"tinygrad_tx": time_per_op(ours, n_ops, repeats),
               "tinygrad_tx+jit": time_per_op(ours, n_ops, repeats, tx.jit(lambda x, w: chain(x, w, n_ops).backward()))}
    try:
        import torch
    except ImportError:
        return results

    def theirs():
        return (torch.tensor(x0, requires_grad=True, device=device), torch.tensor(w0, requires_grad=True, device=device))

    results["torch"] = time_per_op(theirs, n_ops, repeats)
    return results


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
    main()
