"""The NumPy kernels of host_kernels.py: the dropout mask's Bernoulli draw, and erf, exact to
a few ulps against the C library's, without SciPy and without a Python call per element."""
import math
import sys

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx.backends import host_kernels
from tinygrad_tx.backends.backend import NumpyBackend


def test_bernoulli_keep_drops_a_fraction_p(device):
    """The dropout mask's drop rate is p (within 5 standard deviations of a binomial count),
    for each p, and the two halves of one 64-bit draw are not tied together."""
    backend, n = tx.get_backend(device), 200_000
    tx.manual_seed(7)
    for p in (1e-4, 0.01, 0.1, 0.5, 0.9):  # 1e-4 is drawn with 32 bits, the others with 16
        keep = backend.to_host(backend.bernoulli_keep((n,), p))
        assert keep.dtype == bool and keep.shape == (n,)
        assert abs((~keep).sum() - p * n) < 5 * (n * p * (1 - p)) ** 0.5, p
    pairs = backend.to_host(backend.bernoulli_keep((n,), 0.5)).reshape(-1, 2)
    both = (pairs[:, 0] & pairs[:, 1]).sum()  # independent halves: a quarter of the pairs
    assert abs(both - n / 8) < 5 * (n / 2 * 0.25 * 0.75) ** 0.5


def test_erf_matches_the_standard_library(device):
    backend = tx.get_backend(device)
    for dtype in (np.float64, np.float32):
        x = np.linspace(-4, 4, 9, dtype=dtype)
        got = backend.to_host(backend.erf(backend.from_host(x)))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, [math.erf(v) for v in x], rtol=4 * np.finfo(dtype).eps, atol=0)


def erf_grid() -> np.ndarray:
    """A dense grid over [-7, 7] (erf is ±1.0 in float64 beyond 5.93), tiny and subnormal values,
    and both sides of each boundary of Cody's intervals (0.46875, 4) and of the cut-off at 6."""
    edges = np.array([0.46875, 4.0, 6.0])
    tiny = np.geomspace(5e-324, 1.0, 20_001)
    points = np.concatenate([np.linspace(-7, 7, 1_400_001), tiny, -tiny, edges, np.nextafter(edges, 0),
                             np.nextafter(edges, 9), [0.0, 20.0, 1e300, np.finfo(np.float64).max]])
    return np.concatenate([points, -points])


def ulps(got: np.ndarray, exact: np.ndarray, dtype: type) -> np.ndarray:
    """|got - exact| in units of the last place of `dtype` at the exact value."""
    spacing = np.spacing(np.abs(exact.astype(dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def test_erf_is_within_4_ulps_in_float64_and_correctly_rounded_in_float32():
    # math.erf (the C library's, correctly rounded but for rare last-bit cases) as the truth
    x = erf_grid()
    exact = np.array([math.erf(v) for v in x])
    assert ulps(host_kernels.erf(x), exact, np.float64).max() <= 4  # SciPy's reaches 3 on this grid
    x32 = x[np.abs(x) <= np.finfo(np.float32).max].astype(np.float32)
    exact32 = np.array([math.erf(v) for v in x32.astype(np.float64)])
    np.testing.assert_array_equal(host_kernels.erf(x32), exact32.astype(np.float32))


def test_erf_at_the_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, -5e-324])
    got = host_kernels.erf(x)
    np.testing.assert_array_equal(got, [1.0, -1.0, np.nan, 0.0, -0.0, -5e-324])
    assert np.signbit(got[4]) and not np.signbit(got[3])
    assert host_kernels.erf(np.arange(3)).dtype == np.float64  # integers give float64, as SciPy's
    assert host_kernels.erf(np.float32(0.5)).shape == () and host_kernels.erf(np.zeros((0, 3))).shape == (0, 3)


def test_erf_makes_no_python_call_per_element_without_scipy(monkeypatch):
    """The README's install has no SciPy, and erf once fell back there to np.vectorize(math.erf), a
    Python call per element (minutes for lesson 002). Count the calls (Python and C functions, and
    math.erf made a Python function) a million elements make, rather than timing them."""
    monkeypatch.setitem(sys.modules, "scipy", None)  # import scipy raises ImportError
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    exact = math.erf
    monkeypatch.setattr(math, "erf", lambda v: exact(v))  # a Python function: each call is counted below
    backend = NumpyBackend()
    x = np.random.default_rng(0).standard_normal(1_000_000)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        got = backend.erf(x)
    finally:
        sys.setprofile(None)
    assert calls < 10_000, f"{calls} calls for 1e6 elements"
    np.testing.assert_allclose(got[:1000], [exact(v) for v in x[:1000]], rtol=1e-15, atol=0)
