"""Scatter-add in a fixed order on every device: `target[index] += values`, repeats accumulated.

The gradient of indexing and of an embedding is a scatter-add: each picked element sends its
gradient back, and an element picked twice gets the sum. On a GPU the obvious kernel (CuPy's
`add.at`) adds with atomic operations, in whatever order the threads happen to run, and
floating-point addition depends on the order: the same step gave a different gradient in its
last bit from one run to the next, so a replay stopped equalling eager execution and a
resumed run stopped equalling an uninterrupted one (seen on an H200: losses 2.72989058 and
2.72989082 after six Adam steps).

So the GPU and the strict test device scatter by sorting instead: the positions are sorted
(ties keep the order they came in), each run of equal positions is summed from its first
value to its last, and the sums, now one per position, are added with plain indexing. The
CPU's `host_kernels.scatter_add` adds in the same order. The strict device's own `add.at`
adds in a fresh random order at every call, as atomics do, so a code path that scatters
with it instead of `backend.scatter_add` fails the suite's bit-for-bit tests without a GPU.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


def scatter_add_in_order(xp: Any, target: Any, index: Any, values: Any,
                         segment_add: Callable[[Any, Any, Any], None]) -> None:
    """`target[index] += values` (target C-contiguous), each position's values added in the order
    they appear; `segment_add(flat, where, rows)` sums each run of equal `where` in `rows` and adds
    the sum to that row of `flat`. Every array here has a shape known without reading a value (a
    CUDA graph can hold it, `tx.jit(..., cuda_graph=True)`)."""
    if not target.flags.c_contiguous:
        raise ValueError("scatter_add needs a C-contiguous target (it writes through a reshaped view)")
    if getattr(index, "ndim", None) == 1 and getattr(index, "dtype", np.dtype(object)).kind in "iu":
        where = xp.where(index < 0, index + target.shape[0], index)  # (N,) the row each row of values goes to
        width = math.prod(target.shape[1:])
        rows = xp.broadcast_to(values, index.shape + target.shape[1:]).reshape(index.size, width)  # (N, W)
        flat = target.reshape(target.shape[0], width)  # (R, W), a view
    else:  # any other index: element by element
        picked = xp.arange(target.size).reshape(target.shape)[index]  # the position each value goes to
        where = picked.reshape(-1)
        rows = xp.broadcast_to(values, picked.shape).reshape(-1, 1)
        flat = target.reshape(-1, 1)
    if where.size == 0 or rows.size == 0:
        return
    order = xp.argsort(where * where.size + xp.arange(where.size))  # unique keys: ties keep their order
    segment_add(flat, where[order], xp.ascontiguousarray(rows[order]))


def host_segment_add(flat: np.ndarray, where: np.ndarray, rows: np.ndarray) -> None:
    """Each run's sum, from 0, first value to last, added to its row (as the CUDA kernel below
    does; NumPy's `add.at` is sequential, its `reduceat` may add pairwise)."""
    starts = np.flatnonzero(np.concatenate(([True], where[1:] != where[:-1])))  # (S,) each run's first
    segment = np.zeros(len(rows), dtype=np.intp)
    segment[starts[1:]] = 1
    wide = rows.astype(np.float32) if rows.dtype == np.float16 else rows  # float16 summed in float32
    sums = np.zeros((len(starts), rows.shape[1]), dtype=wide.dtype)
    np.add.at(sums, np.cumsum(segment), wide)
    inside = (where[starts] >= 0) & (where[starts] < len(flat))  # as the kernel: no write out of bounds
    flat[where[starts][inside]] += sums[inside].astype(flat.dtype)


_CUDA_SOURCE = r"""
extern "C" __global__ void segment_add(const DTYPE* rows, const long long* where, long long n_rows,
                                       long long width, DTYPE* flat, long long n_targets) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per (row, column)
    if (i >= n_rows * width) return;
    long long r = i / width, c = i % width;
    if (r > 0 && where[r] == where[r - 1]) return;  // the first row of each run adds the whole run
    if (where[r] < 0 || where[r] >= n_targets) return;  // a bad id (a graph checks ids after its launch)
    DTYPE sum = 0;
    for (long long k = r; k < n_rows && where[k] == where[r]; ++k) sum += rows[k * width + c];  // in order
    flat[where[r] * width + c] += sum;  // one thread a target element: no atomics
}
"""


def cuda_segment_add(cupy: Any) -> Callable[[Any, Any, Any], None]:
    """`host_segment_add` as a CUDA kernel for CuPy. float16 is summed in float32 into a scratch
    array, then added to the rows the runs go to."""
    kernels = {np.dtype(dtype): cupy.RawKernel(_CUDA_SOURCE.replace("DTYPE", ctype), "segment_add")
               for dtype, ctype in ((np.float32, "float"), (np.float64, "double"))}

    def add(flat: Any, where: Any, rows: Any) -> None:
        n_rows, width = rows.shape
        target = flat if flat.dtype != np.float16 else cupy.zeros(flat.shape, dtype=np.float32)
        threads = n_rows * width
        kernels[target.dtype](((threads + 255) // 256,), (256,),
                              (rows.astype(target.dtype, copy=False), where.astype(np.int64), np.int64(n_rows),
                               np.int64(width), target, np.int64(flat.shape[0])))
        if target is not flat:
            touched = cupy.zeros(flat.shape[0], dtype=bool)
            touched[where] = True
            flat[...] = cupy.where(touched[:, None], flat + target.astype(np.float16), flat)

    return add
