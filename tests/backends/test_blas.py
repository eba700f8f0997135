"""`blas.DirectCublas`: the matrix product a CUDA graph holds (cuBLAS called directly), against
`@`, for every layout the ops hand it: on a GPU against CuPy's product, and on the CPU with NumPy
arrays and a stand-in for cuBLAS that computes column-major GEMM as cuBLAS's documentation
defines it (leading dimensions, batch strides, `op`), so the row-major bookkeeping is checked
where CI runs."""
import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.backends import blas


@pytest.fixture
def cupy():
    try:
        tx.get_backend("cuda")
    except tx.DeviceError as e:
        pytest.skip(f"CuPy/GPU not available: {e}")
    import cupy

    return cupy


def layouts(cupy, rng, dtype):
    """(a, b) pairs: plain, transposed views, batched (4-D attention shapes), a shared matrix,
    vectors, an empty inner axis, a non-contiguous slice."""
    def r(*shape):
        return cupy.asarray(rng.standard_normal(shape).astype(dtype))

    q, k = r(2, 3, 5, 4), r(2, 3, 7, 4)
    return [(r(6, 4), r(4, 3)), (r(6, 4), r(3, 4).T), (r(4, 6).T, r(4, 3)), (r(4, 6).T, r(3, 4).T),
            (q, k.swapaxes(-1, -2)), (q.swapaxes(-1, -2), r(2, 3, 5, 2)), (r(2, 5, 4), r(4, 3)),
            (r(6, 4), r(4)), (r(4), r(4, 3)), (r(6, 0), r(0, 3)), (r(6, 8)[:, ::2], r(4, 3)), (r(1, 4), r(4, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_direct_product_is_cupys_product(cupy, dtype):
    direct = blas.DirectCublas(cupy)
    for a, b in layouts(cupy, np.random.default_rng(0), dtype):
        want = a @ b
        got = direct(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(want), rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-6)
    a, b = layouts(cupy, np.random.default_rng(1), dtype)[4]
    out = cupy.empty((2, 5, 3, 7), dtype=dtype).swapaxes(-3, -2)  # attention writes heads apart
    assert direct(a, b, out) is out
    np.testing.assert_allclose(cupy.asnumpy(out), cupy.asnumpy(a @ b), rtol=1e-5, atol=1e-6)
    direct.close()


class BookCublas:
    """cuBLAS's `?gemmStridedBatched` from its definition, on host memory: C = op(A) op(B), column
    major, each matrix read through its pointer, leading dimension and batch stride."""

    def cublasCreate_v2(self, handle):
        return 0

    def cublasSetStream_v2(self, handle, stream):
        return 0

    def cublasSetWorkspace_v2(self, handle, pointer, size):
        return 0

    def cublasSgemmStridedBatched(self, *args):
        return self._gemm(ctypes.c_float, *args)

    def cublasDgemmStridedBatched(self, *args):
        return self._gemm(ctypes.c_double, *args)

    @staticmethod
    def _gemm(scalar, handle, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
              stride_c, count):
        v = [x.value for x in (trans_a, trans_b, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, count)]
        trans_a, trans_b, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, count = v

        def matrix(address, rows, cols, ld, trans, batch, stride):  # op(X), rows x cols
            i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
            offsets = batch * stride + (j * ld + i if not trans else i * ld + j)
            memory = np.ctypeslib.as_array(ctypes.cast(address.value, ctypes.POINTER(scalar)),
                                           shape=(int(offsets.max()) + 1,))
            return memory[offsets]

        out = np.ctypeslib.as_array(ctypes.cast(c.value, ctypes.POINTER(scalar)),
                                    shape=((count - 1) * stride_c + (n - 1) * ldc + m,))
        for p in range(count):
            product = matrix(a, m, k, lda, trans_a, p, stride_a) @ matrix(b, k, n, ldb, trans_b, p, stride_b)
            i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
            out[p * stride_c + j * ldc + i] = alpha._obj.value * product
        return 0


class HostCublas(blas.DirectCublas):
    @staticmethod
    def address(x):
        return x.ctypes.data


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_direct_products_bookkeeping_on_the_cpu(dtype):
    numpy_as_cupy = SimpleNamespace(empty=np.empty, broadcast_to=np.broadcast_to, ascontiguousarray=np.ascontiguousarray,
                                    cuda=SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=0)))
    direct = HostCublas(numpy_as_cupy, workspace_bytes=16, lib=BookCublas())
    for a, b in layouts(np, np.random.default_rng(0), dtype):
        want, got = a @ b, direct(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    a, b = layouts(np, np.random.default_rng(1), dtype)[4]
    out = np.empty((2, 5, 3, 7), dtype=dtype).swapaxes(-3, -2)
    assert direct(a, b, out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)
