"""`blas.DirectCublas`: the matrix product a CUDA graph holds (cuBLAS called directly), against
CuPy's own `@`, for every layout the ops hand it. Runs only where CuPy and a GPU are."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import blas


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
