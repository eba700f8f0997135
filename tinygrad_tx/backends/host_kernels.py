"""The CPU backend's speed helpers: each does what a plain NumPy (or `math`) call does, faster,
for a measured reason given in its docstring. `backend.py` calls them; a reader of the backend
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


def erf(x: np.ndarray) -> np.ndarray:
    """The error function elementwise, in x's floating dtype (float64 for other inputs).

    What `np.vectorize(math.erf)` computes, without a Python call per element (that made
    lesson 002's GPT take over ten minutes instead of two). Computed in float64 by
    `cody_erf` and rounded once: float32 results are correctly rounded, float64 ones within
    4 ulps (SciPy's within 3; tests/backends/test_host_kernels.py measures against `math.erf`).
    The loop feeds `cody_erf` 16,384 numbers at a time so that its temporaries stay in a
    core's cache: 3.3 ms for the 262,144 float32 numbers of one GELU in lesson 002, 8.8 ms
    for the whole array at once (SciPy's C loop: 2.2 ms).

    SciPy's erf is not used even where it is installed: so every install runs, and the test
    suite tests, this one path and gets the same numbers (the suite installs more than the
    README's install does, which is how the per-element loop went unseen). It costs lesson
    002's training step 18% against SciPy's erf (26 ms instead of 22).
    """
    x = np.asarray(x)
    flat = x.reshape(-1)
    out = np.empty(flat.shape, x.dtype if x.dtype.kind == "f" else np.float64)
    for start in range(0, flat.size, _ERF_CHUNK):
        out[start:start + _ERF_CHUNK] = cody_erf(flat[start:start + _ERF_CHUNK].astype(np.float64))
    return out.reshape(x.shape)


_ERF_CHUNK = 2 ** 14  # 32768 as fast; 8192 and 65536 took 4.4 and 7.0 ms for the 262,144 above


def cody_erf(x: np.ndarray) -> np.ndarray:
    """erf of a float64 array by W. J. Cody's rational Chebyshev approximations ("Rational
    Chebyshev approximations for the error function", Math. Comp. 23, 1969; his SPECFUN
    routine CALERF), the scheme libm and Cephes (SciPy) follow too. Each element takes the
    formula of its interval:

        |x| <= 0.46875:      erf(x)  = x · P(x²) / Q(x²)
        0.46875 < |x| <= 4:  erf(x)  = sign(x) · (1 - erfc(|x|)),  erfc(y) = exp(-y²) · P(y) / Q(y)
        4 < |x|:             the same with erfc(y) = exp(-y²) / y · (1/√π - P(1/y²) / (y² Q(1/y²)))
    """
    y = np.abs(x)
    near, tail = y <= 0.46875, y > 4.0
    result = np.empty_like(x)
    for interval, formula in ((near, _erf_near_0), (~(near | tail), _erf_middle), (tail, _erf_tail)):
        index = np.flatnonzero(interval)  # NaN falls in the middle one, and stays NaN
        result[index] = formula(x.take(index))
    return result


def _erf_near_0(x: np.ndarray) -> np.ndarray:
    return x * _rational(_ERF_NEAR_0, x * x)


def _erf_middle(x: np.ndarray) -> np.ndarray:
    y = np.abs(x)
    return _one_minus_erfc(x, y, _rational(_ERFC_MIDDLE, y))


def _erf_tail(x: np.ndarray) -> np.ndarray:
    y = np.minimum(np.abs(x), 6.0)  # erfc(6) = 2e-17: erf is 1.0 in float64 from 5.93 on
    s = 1.0 / (y * y)
    return _one_minus_erfc(x, y, (1 / math.sqrt(math.pi) - s * _rational(_ERFC_TAIL, s)) / y)


def _one_minus_erfc(x: np.ndarray, y: np.ndarray, erfc_times_exp: np.ndarray) -> np.ndarray:
    """sign(x) · (1 - erfc(y)) from erfc(y)·exp(y²).

    exp(-y²) is taken directly: the rounding of y² (relative 2⁻⁵³) becomes a relative error of
    y²·2⁻⁵³ in erfc, which Cody's CALERF avoids by splitting y² for erfc's sake; in 1 - erfc it
    is an absolute error below erfc(y)·y²·2⁻⁵³ < 0.17·2⁻⁵³, under a quarter of an ulp of erf.
    """
    erfc = erfc_times_exp * np.exp(-(y * y))
    return np.copysign((0.5 - erfc) + 0.5, x)


def _rational(table: np.ndarray, t: np.ndarray) -> np.ndarray:
    """P(t) / Q(t) by Horner's rule, P and Q evaluated together as the rows of one (2, n) array;
    `table` (k, 2, 1) holds their coefficients, highest power first."""
    acc = np.empty((2,) + t.shape)  # (2, n): P's running value, Q's
    acc[...] = table[0]
    for coefficients in table[1:]:
        acc *= t
        acc += coefficients
    return np.divide(acc[0], acc[1], out=acc[0])


def _pq(p: list[float], q: list[float]) -> np.ndarray:
    return np.array([p, q]).T[:, :, None]  # (k, 2, 1)


# Cody's coefficients (CALERF's A, B; C, D; P, Q), highest power first, Q's leading 1 explicit.
_ERF_NEAR_0 = _pq([1.85777706184603153e-1, 3.16112374387056560e0, 1.13864154151050156e2,
                   3.77485237685302021e2, 3.20937758913846947e3],
                  [1.0, 2.36012909523441209e1, 2.44024637934444173e2, 1.28261652607737228e3,
                   2.84423683343917062e3])
_ERFC_MIDDLE = _pq([2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e0,
                    6.61191906371416295e1, 2.98635138197400131e2, 8.81952221241769090e2,
                    1.71204761263407058e3, 2.05107837782607147e3, 1.23033935479799725e3],
                   [1.0, 1.57449261107098347e1, 1.17693950891312499e2, 5.37181101862009858e2,
                    1.62138957456669019e3, 3.29079923573345963e3, 4.36261909014324716e3,
                    3.43936767414372164e3, 1.23033935480374942e3])
_ERFC_TAIL = _pq([1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1,
                  1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4],
                 [1.0, 2.56852019228982242e0, 1.87295284992346047e0, 5.27905102951428412e-1,
                  6.05183413124413191e-2, 2.33520497626869185e-3])
