"""The CPU backend's speed helpers: each does what a plain NumPy call does, faster, for a
measured reason given in its docstring. `backend.py` calls them; a reader of the backend
can skip this file.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np


def bernoulli_keep(rng: np.random.Generator, shape: tuple, p: float) -> np.ndarray:
    """A boolean host array, each element False with probability `p` (dropout).

    Drawn as raw integers compared with p·2^bits, not as floats compared with p: the
    generator's raw bits come out with no conversion to float, which made a dropout
    mask 1.5-2.5× cheaper on NumPy here. 16 bits an element (four per 64-bit draw,
    half the work of 32 again) when that rounds p by less than 0.1% of itself (p = 0.1
    becomes 0.100006), else 32 bits (p rounded by less than 2.4e-10).
    """
    n, scaled = math.prod(shape), p * 2 ** 16
    bits, dtype = (16, np.uint16) if abs(round(scaled) - scaled) <= 1e-3 * scaled else (32, np.uint32)
    threshold = dtype(min(round(p * 2 ** bits), 2 ** bits - 1))
    draws = rng.bit_generator.random_raw(-(-n * bits // 64)).view(dtype)[:n]  # 64 // bits per draw
    return draws.reshape(shape) >= threshold


def scatter_add(target: np.ndarray, index: Any, values: np.ndarray) -> None:
    """`np.add.at`, with a faster path for the Embedding backward's case: one row of `values`
    per non-negative id in a 1-D `index`.

    `np.add.at` handles one element at a time (0.7 ms for a toy model's 768×64 gradient).
    Sorting the ids instead (stably, so each id's rows keep their order) makes equal ids
    neighbours; `np.add.reduceat` sums each run of rows in one call, and the sums go to
    distinct rows, where plain fancy-index `+=` is exact. Measured: 0.12 ms instead of 0.7
    for 768 ids out of 20, the same 6.5 ms for 2048 ids out of 8000. (CuPy's add.at is a
    fast kernel already; the strict test backend keeps NumPy's add.at.)
    """
    fast = (isinstance(index, np.ndarray) and index.ndim == 1 and index.dtype.kind in "iu" and index.size
            and values.shape == index.shape + target.shape[1:] and index.min() >= 0)
    if not fast:
        np.add.at(target, index, values)
        return
    order = np.argsort(index, kind="stable")
    ids = index[order]  # (N,) sorted
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))  # first row of each id
    target[ids[starts]] += np.add.reduceat(values[order], starts, axis=0)


def keep_freed_memory() -> None:
    """Ask glibc to keep freed buffers for reuse instead of handing them back to the OS.

    A training step allocates and frees the same large arrays every time. By default
    glibc serves arrays above a size threshold with fresh mmap()s and returns them on
    free, so every step pays page faults to zero that memory again (about 20% of a
    small Transformer's step here). PyTorch avoids the same cost with a caching
    allocator; this is NumPy's equivalent. Where glibc is absent, nothing changes.
    The threshold asked for is 1 GiB, so that a language model's (tokens, vocabulary)
    logits are kept too (64 MiB at the benchmarks' config M, whose step then made no
    page faults instead of 1,500 and ran 6-25% faster). glibc versions that refuse more
    than their documented 32 MiB get that.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    if not mallopt(M_MMAP_THRESHOLD, 2 ** 30):  # 0: refused
        mallopt(M_MMAP_THRESHOLD, 32 * 2 ** 20)
    mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1)
