"""The fused ops' short-row helpers (ops/kernels.py) against NumPy, on every device."""
import numpy as np
import pytest

import tinygrad_tx as tx


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 13, 31, 32, 64])
def test_row_reductions_agree_with_numpy(device, n):
    """The fused ops' short-row helpers: the max by halving equals NumPy's exactly (also with
    NaN and ±inf), the sums by products with ones and the dots (einsum from 32 columns on)
    agree with NumPy's sums, in float64."""
    from tinygrad_tx.ops.kernels import column_dots, column_sums, row_dots, row_max, row_sums

    backend, rng = tx.get_backend(device), np.random.default_rng(n)
    x = rng.standard_normal((3, 5, n)).astype(np.float32)
    x[0, 0, -1], x[0, 1, 0], x[1, 2, n // 2] = np.inf, -np.inf, np.nan
    xd = backend.from_host(x)
    np.testing.assert_array_equal(backend.to_host(row_max(backend.xp, xd)), x.max(axis=-1, keepdims=True))
    row_max(backend.xp, xd)[...] = 99.0  # a new array, also for n = 1: writing it leaves x as it was
    np.testing.assert_array_equal(backend.to_host(xd), x)
    finite = backend.from_host(np.nan_to_num(x, posinf=3.0, neginf=-3.0))
    np.testing.assert_allclose(backend.to_host(row_sums(backend.xp, finite)),
                               backend.to_host(finite).sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(backend.to_host(column_sums(backend.xp, finite)),
                               backend.to_host(finite).sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)
    a, b = x[1:].astype(np.float64), rng.standard_normal((2, 5, n))  # the rows with no inf or NaN
    row, column = row_dots(backend.xp, *map(backend.from_host, (a, b))), column_dots(
        backend.xp, *map(backend.from_host, (a, b)))
    assert backend.to_host(row).shape == (2, 5, 1) and backend.to_host(column).shape == (n,)
    np.testing.assert_allclose(backend.to_host(row), (a * b).sum(axis=-1, keepdims=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(backend.to_host(column), (a * b).sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)
