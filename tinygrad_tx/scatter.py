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
                         segment_sums: Callable[[Any, Any], Any]) -> None:
    """`target[index] += values` (target C-contiguous), each position's values added in the order
    they appear; `segment_sums(rows, starts)` sums each run of `rows` that begins at a start."""
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
    where = where[order]
    starts = xp.flatnonzero(xp.concatenate((xp.ones(1, dtype=bool), where[1:] != where[:-1])))  # (S,)
    flat[where[starts]] += segment_sums(xp.ascontiguousarray(rows[order]), starts)  # distinct rows: exact


def host_segment_sums(rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each run's sum, from 0, first value to last, as the CUDA kernel below adds (NumPy's `add.at`
    is sequential; its `reduceat` may add pairwise)."""
    segment = np.zeros(len(rows), dtype=np.intp)
    segment[starts[1:]] = 1
    sums = np.zeros((len(starts), rows.shape[1]), dtype=rows.dtype)
    np.add.at(sums, np.cumsum(segment), rows)
    return sums


_CUDA_SOURCE = r"""
extern "C" __global__ void segment_sums(const DTYPE* rows, const long long* starts, long long n_rows,
                                        long long n_segments, long long width, DTYPE* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per (segment, column)
    if (i >= n_segments * width) return;
    long long s = i / width, c = i % width;
    long long end = s + 1 < n_segments ? starts[s + 1] : n_rows;
    DTYPE sum = 0;
    for (long long r = starts[s]; r < end; ++r) sum += rows[r * width + c];  // in order: no atomics
    out[i] = sum;
}
"""


def cuda_segment_sums(cupy: Any) -> Callable[[Any, Any], Any]:
    """`host_segment_sums` as a CUDA kernel for CuPy (float16 summed in float32)."""
    kernels = {np.dtype(dtype): cupy.RawKernel(_CUDA_SOURCE.replace("DTYPE", ctype), "segment_sums")
               for dtype, ctype in ((np.float32, "float"), (np.float64, "double"))}

    def sums(rows: Any, starts: Any) -> Any:
        wide = rows.astype(np.float32) if rows.dtype == np.float16 else rows
        n_rows, width = wide.shape
        out = cupy.empty((starts.size, width), dtype=wide.dtype)
        threads = starts.size * width
        kernels[wide.dtype](((threads + 255) // 256,), (256,),
                            (wide, starts.astype(np.int64), np.int64(n_rows), np.int64(starts.size),
                             np.int64(width), out))
        return out.astype(rows.dtype, copy=False)

    return sums
