"""The products a CUDA graph can hold: `DirectCublas` (cuBLAS called directly) and `einsum_by_sums`.

While a stream is captured (`tx.jit(step, cuda_graph=True)`, jit/graph.py) CuPy refuses every
cuBLAS call ("calling cuBLAS API during stream capture is currently unsupported", its
`cublas.setStream`), though cuBLAS itself can be captured. So a capture swaps the ops' `matmul`
and `einsum` (graphs.py) for these: on a GPU, `DirectCublas` calls cuBLAS's strided batched GEMM
through its C interface, on a cuBLAS handle of its own with a workspace of its own, on the
capturing stream, and `einsum_by_sums` computes an einsum as products and a sum, elementwise
kernels that a graph holds; on the strict test device, NumPy's product as one recorded operation
and the same `einsum_by_sums`. Outside a capture the ops use the library's own.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np


def einsum_by_sums(subscripts: str, *operands: Any) -> Any:
    """`einsum(subscripts, *operands)` for subscripts of letters with an explicit output
    ("ij,ij->j"), as one broadcast product and one sum: no BLAS call, so a CUDA graph can hold it
    (at the cost of the temporary that einsum spares)."""
    inputs, output = subscripts.replace(" ", "").split("->")
    letters = sorted(set(inputs) - {","})  # the product's axes, one a letter
    product = None
    for term, x in zip(inputs.split(","), operands):
        order = sorted(term, key=letters.index)  # the term's letters in the product's order
        x = x.transpose([term.index(c) for c in order])
        x = x.reshape([x.shape[order.index(c)] if c in term else 1 for c in letters])
        product = x if product is None else product * x
    summed = product.sum(axis=tuple(i for i, c in enumerate(letters) if c not in output))
    kept = [c for c in letters if c in output]  # the axes left, in the product's order
    return summed.transpose([kept.index(c) for c in output])


class DirectCublas:
    """`a @ b` for CuPy arrays of float32 or float64, by cuBLAS's `?gemmStridedBatched` called
    directly (ctypes), on the stream current at each call.

    cuBLAS is column-major and CuPy's arrays are row-major, so C = A·B is computed as
    Cᵀ = Bᵀ·Aᵀ: a row-major (r, c) matrix is, read column-major, its transpose with leading
    dimension c; a transposed view (`w.T`, `k.swapaxes(-1, -2)`) is read as it is, with
    `op = T`. Any other layout is copied to a row-major one first.
    """

    _GEMM = {np.dtype(np.float32): ("cublasSgemmStridedBatched", ctypes.c_float),
             np.dtype(np.float64): ("cublasDgemmStridedBatched", ctypes.c_double)}

    def __init__(self, cupy: Any, workspace_bytes: int = 32 * 2 ** 20, lib: Any = None):
        self.cupy = cupy
        self.lib = lib or ctypes.CDLL(_loaded_library("libcublas.so"))  # `lib`: a stand-in, for tests
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.workspace = cupy.empty(workspace_bytes, dtype=np.uint8)  # so a capture allocates none
        self.stream = None

    def close(self) -> None:
        self.lib.cublasDestroy_v2(self.handle)

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        cupy = self.cupy
        if a.dtype != b.dtype or a.dtype not in self._GEMM:
            raise TypeError(f"a matrix product in a CUDA graph needs float32 or float64 operands of one dtype, "
                            f"not {a.dtype} and {b.dtype}")
        vector_a, vector_b = a.ndim == 1, b.ndim == 1
        a, b = a[None, :] if vector_a else a, b[:, None] if vector_b else b  # (m, k), (k, n)
        (m, k), (k_b, n) = a.shape[-2:], b.shape[-2:]
        if k != k_b:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit")
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        count = math.prod(batch)
        c = cupy.empty((count, m, n), dtype=a.dtype)
        if c.size and k == 0:
            c.fill(0)
        elif c.size:
            self._gemm(self._operand(a, batch), self._operand(b, batch), c, m, n, k, count)
        c = c.reshape(*batch, m, n)
        c = c[..., 0] if vector_b else c
        c = c[..., 0, :] if vector_a else c
        if out is None:
            return c
        out[...] = c
        return out

    def _operand(self, x: Any, batch: tuple) -> tuple[Any, bool, int, int]:
        """`x` (..., r, c) as (array, transposed, leading dimension, batch stride), batch stride 0
        for a matrix that every batch shares."""
        r, c = x.shape[-2:]
        if x.ndim == 2:
            shared, x = True, x[None]
        else:
            shared = False
            x = x if x.shape[:-2] == batch else self.cupy.broadcast_to(x, (*batch, r, c))
            x = x.reshape(-1, r, c)  # a view where the batch axes allow it, else a copy
        sb, s0, s1 = (s // x.itemsize for s in x.strides)
        batched = shared or x.shape[0] == 1 or sb == r * c
        if batched and (s1 == 1 or c == 1) and (s0 == c or r == 1):
            return x, False, max(c, 1), 0 if shared else r * c
        if batched and (s0 == 1 or r == 1) and (s1 == r or c == 1):
            return x, True, max(r, 1), 0 if shared else r * c
        return self.cupy.ascontiguousarray(x), False, max(c, 1), 0 if shared else r * c

    def _gemm(self, a: tuple, b: tuple, c: Any, m: int, n: int, k: int, count: int) -> None:
        (a, trans_a, ld_a, stride_a), (b, trans_b, ld_b, stride_b) = a, b
        stream = self.cupy.cuda.get_current_stream().ptr
        if stream != self.stream:  # setting a stream resets the workspace: set it again after
            self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)), "cublasSetStream")
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(self.address(self.workspace)),
                                                       ctypes.c_size_t(self.workspace.nbytes)), "cublasSetWorkspace")
            self.stream = stream
        name, scalar = self._GEMM[c.dtype]
        one, zero = scalar(1), scalar(0)
        self._check(getattr(self.lib, name)(
            self.handle, ctypes.c_int(int(trans_b)), ctypes.c_int(int(trans_a)),  # Cᵀ (n, m) = Bᵀ (n, k) · Aᵀ (k, m)
            ctypes.c_int(n), ctypes.c_int(m), ctypes.c_int(k), ctypes.byref(one),
            ctypes.c_void_p(self.address(b)), ctypes.c_int(ld_b), ctypes.c_longlong(stride_b),
            ctypes.c_void_p(self.address(a)), ctypes.c_int(ld_a), ctypes.c_longlong(stride_a),
            ctypes.byref(zero), ctypes.c_void_p(self.address(c)), ctypes.c_int(n), ctypes.c_longlong(m * n),
            ctypes.c_int(count)), name)

    @staticmethod
    def address(x: Any) -> int:
        """Where `x`'s first element is in device memory."""
        return x.data.ptr

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed: cuBLAS status {status}")


def _loaded_library(name: str) -> str:
    """The path of the shared library `name` this process loaded (CuPy's cuBLAS: the same one)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if path.rsplit("/", 1)[-1].startswith(name):
                return path
    raise RuntimeError(f"{name} is not loaded in this process: run a matrix product with CuPy first")
