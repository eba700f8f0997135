"""Devices: the strict backend's CuPy manners, moving and mixing tensors, choosing the
default device, CuPy's absence, and the helpers that differ per array library."""
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor, host_kernels
from tinygrad_tx.backend import NumpyBackend

INSTALL_HINT = 'pip install -e ".[cuda]" (from a clone of tinygrad_tx; the package is not on PyPI yet)'
HAS_CUPY = importlib.util.find_spec("cupy") is not None


# -- the strict backend behaves like CuPy where it bites --------------------------------

def strict_array(values):
    return tx.get_backend("strict").from_host(np.asarray(values, dtype=np.float64))


def test_strict_arrays_refuse_implicit_conversion_to_numpy():
    a = strict_array([1.0, 2.0])
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array(a)


def test_strict_arrays_refuse_numpy_functions_and_operands():
    a = strict_array([1.0, 2.0])
    with pytest.raises(TypeError, match="numpy.exp called on a strict-backend array"):
        np.exp(a)
    with pytest.raises(TypeError, match="numpy.sum"):
        np.sum(a)
    with pytest.raises(TypeError, match="NumPy array was mixed"):
        a + np.ones(2)
    with pytest.raises(TypeError):
        np.ones(2) * a
    with pytest.raises(TypeError, match="NumPy array was mixed"):
        tx.get_backend("strict").xp.maximum(a, np.zeros(2))


def test_strict_arrays_accept_numbers_numpy_scalars_and_explicit_transfers():
    backend = tx.get_backend("strict")
    a = strict_array([1.0, 2.0])
    for result in (a * 2, np.float64(2.0) * a, a * np.float32(2.0), backend.xp.exp(a) * 0 + 2 * a):
        assert isinstance(result, backend.array_type)
        np.testing.assert_array_equal(backend.to_host(result), [2.0, 4.0])
    host = a.get()
    assert isinstance(host, np.ndarray)
    host[0] = 99.0  # a copy, as from a GPU
    np.testing.assert_array_equal(backend.to_host(a), [1.0, 2.0])


def test_tensors_on_strict_hold_strict_arrays():
    t = Tensor([1.0, 2.0], device="strict")
    assert t.device == "strict"
    assert isinstance(t.data, tx.get_backend("strict").array_type)
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    assert (t * 2).sum().item() == 6.0


# -- moving and mixing ------------------------------------------------------------------

def test_round_trip_between_devices():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True, name="x")
    on_strict = x.to("strict")
    assert on_strict.device == "strict" and on_strict.requires_grad and on_strict.name == "x"
    assert on_strict.to("strict") is on_strict
    back = on_strict.to("cpu")
    assert back.device == "cpu" and back.dtype == np.float64
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    moved = Tensor(on_strict.data, device="cpu")  # a device array handed to another device
    assert moved.device == "cpu" and isinstance(moved.data, np.ndarray)
    assert Tensor(on_strict.data).device == "strict"  # no device given: it stays where it is


def test_gradient_flows_on_the_device_it_was_computed_on():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True, device="strict")
    (x * x).sum().backward()
    assert x.grad.device == "strict"
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


MIXED = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: b * a,
    "matmul": lambda a, b: a.reshape(1, 2) @ b.reshape(2, 1),
    "cat": lambda a, b: tx.cat([a, b]),
    "where": lambda a, b: tx.where(np.array([True, False]), a, b),
    "attention": lambda a, b: F.scaled_dot_product_attention(a.reshape(1, 2), b.reshape(1, 2), b.reshape(1, 2)),
    "index": lambda a, b: a[Tensor(np.array([0, 1]), device="strict")],
    "mask": lambda a, b: a.masked_fill(Tensor(np.array([True, False]), device="strict"), 0.0),
}


@pytest.mark.parametrize("op", MIXED)
def test_mixing_devices_in_one_op_raises(op):
    a = Tensor(np.array([1.0, 2.0]), device="cpu")
    b = Tensor(np.array([3.0, 4.0]), device="strict")
    with pytest.raises(tx.DeviceError) as err:
        MIXED[op](a, b)
    assert "cpu" in str(err.value) and "strict" in str(err.value)


# -- choosing the device ----------------------------------------------------------------

def test_environment_variable_selects_the_default(monkeypatch):
    monkeypatch.setenv("TINYGRAD_TX_DEVICE", "strict")
    assert tx.default_device() == "strict"
    assert Tensor([1.0]).device == "strict"
    assert tx.zeros(2).device == "strict" and tx.randn(2).device == "strict" and tx.arange(3).device == "strict"
    monkeypatch.delenv("TINYGRAD_TX_DEVICE")
    assert tx.default_device() == "cpu"


def test_set_device_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("TINYGRAD_TX_DEVICE", "cpu")
    tx.set_device("strict")  # the conftest fixture restores the default afterwards
    assert tx.default_device() == "strict"
    assert tx.ones(2, 2).device == "strict"
    assert Tensor([1.0], device="cpu").device == "cpu"  # an explicit device still wins
    tx.set_device("cpu")
    assert Tensor([1.0]).device == "cpu"


def test_unknown_device_names_list_the_known_ones():
    for make in (lambda: Tensor([1.0], device="tpu"), lambda: tx.set_device("tpu"),
                 lambda: Tensor([1.0]).to("gpu")):
        with pytest.raises(tx.DeviceError) as err:
            make()
        assert all(name in str(err.value) for name in ("'cpu'", "'cuda'", "'strict'"))
    assert tx.default_device() == "cpu"


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cuda_without_cupy_says_how_to_install_it():
    with pytest.raises(tx.DeviceError, match="CuPy") as err:
        tx.get_backend("cuda")
    assert INSTALL_HINT in str(err.value)
    with pytest.raises(tx.DeviceError):
        tx.set_device("cuda")
    assert tx.default_device() == "cpu"  # no silent fall-back, and no half-made switch either


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cuda_from_the_environment_without_cupy_fails_loudly():
    env = {**os.environ, "TINYGRAD_TX_DEVICE": "cuda"}
    result = subprocess.run([sys.executable, "-c", "import tinygrad_tx as tx; tx.Tensor([1.])"],
                            env=env, capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0
    assert INSTALL_HINT in result.stderr


# -- helpers that differ per array library ------------------------------------------------

def test_scatter_add_accumulates_repeated_indices(device):
    backend = tx.get_backend(device)
    target = backend.xp.zeros(5, dtype=np.float64)
    backend.scatter_add(target, backend.from_host(np.array([1, 1, 3, 1])), backend.from_host(np.array([1.0, 2, 3, 4])))
    np.testing.assert_array_equal(backend.to_host(target), [0, 7, 0, 3, 0])
    rows = backend.xp.zeros((3, 2), dtype=np.float64)
    backend.scatter_add(rows, backend.from_host(np.array([2, 2])), backend.from_host(np.ones((2, 2))))
    np.testing.assert_array_equal(backend.to_host(rows), [[0, 0], [0, 0], [2, 2]])
    ids, g = np.array([3, 0, 3, 5, 0, 3, -1]), np.arange(14.0).reshape(7, 2)  # unsorted; -1 is row 5
    for n in (6, 7):  # non-negative ids only (NumPy's sorted path), then with -1 (np.add.at)
        expected = np.ones((6, 2))
        for i, row in zip(ids[:n], g[:n]):  # the definition, one row at a time
            expected[i] += row
        table = backend.from_host(np.ones((6, 2)))
        backend.scatter_add(table, backend.from_host(ids[:n]), backend.from_host(g[:n]))
        np.testing.assert_array_equal(backend.to_host(table), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index", ["rows", "elements"])
def test_scatter_add_adds_in_one_fixed_order_at_every_call(device, dtype, index):
    """Seen on an H200 (CuPy's add.at, atomic adds in the order threads happen to run): the
    same training step's gradient changed in its last bits from run to run, so a jit replay no
    longer equalled eager and a resumed run no longer equalled an uninterrupted one. Every
    device adds each position's values in the order they come, the sequential sum, bit for bit
    (the strict device's own add.at adds in a random order, as atomics do: this test fails
    there when the backend scatters with it)."""
    backend, rng = tx.get_backend(device), np.random.default_rng(3)
    n = 3000
    values = (rng.standard_normal((n, 4)) * 10.0 ** rng.uniform(-3, 3, (n, 1))).astype(dtype)  # (n, 4)
    if index == "rows":  # an embedding's gradient: ids into rows, negative ones wrapped
        where, shape = rng.integers(-6, 6, n), (6, 4)
    else:  # advanced indexing on two axes: element by element
        where, shape = (rng.integers(0, 6, (n, 4)), rng.integers(0, 4, (n, 4))), (6, 4)
    expected = np.zeros(shape, dtype)
    np.add.at(expected, where, values)  # NumPy adds one value at a time, in order
    on_device = tuple(map(backend.from_host, where)) if index == "elements" else backend.from_host(where)
    for _ in range(3):
        target = backend.xp.zeros(shape, dtype=dtype)
        backend.scatter_add(target, on_device, backend.from_host(values))
        np.testing.assert_array_equal(backend.to_host(target), expected)

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


def test_manual_seed_gives_the_same_numbers_on_every_device():
    draws = {}
    for device in ("cpu", "strict"):
        tx.manual_seed(123)
        draws[device] = tx.randn(3, 4, device=device).numpy(), F.dropout(tx.ones(50, device=device), 0.5).numpy()
    for a, b in zip(draws["cpu"], draws["strict"]):
        np.testing.assert_array_equal(a, b)
    tx.manual_seed(124)
    assert not np.array_equal(tx.randn(3, 4).numpy(), draws["cpu"][0])


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


# -- what a new Tensor holds ----------------------------------------------------------------

def test_dtype_rules_for_new_tensors(device):
    assert Tensor([1, 2], device=device).dtype == np.float32  # Python data: the default float
    assert Tensor(3.5, device=device).dtype == np.float32
    assert Tensor([True, False], device=device).dtype == np.bool_
    assert Tensor(np.zeros(2), device=device).dtype == np.float64  # arrays keep their dtype
    assert Tensor(np.zeros(2, np.float32), device=device).dtype == np.float32
    assert Tensor(np.arange(3), device=device).dtype == np.int64  # ids stay integer
    assert Tensor([1, 2], dtype=np.int32, device=device).dtype == np.int32
    assert tx.arange(4, device=device).dtype.kind == "i" and tx.arange(0.0, 1.0, 0.5, device=device).dtype == np.float32
    assert tx.zeros(2, 3, device=device).shape == (2, 3)
    assert tx.ones((2, 3), dtype=np.float64, device=device).dtype == np.float64


def test_numpy_returns_a_copy(device):
    t = Tensor(np.array([1.0, 2.0]), device=device)
    host = t.numpy()
    host[0] = 50.0
    assert t.numpy()[0] == 1.0
    assert Tensor(np.array([[4.5]]), device=device).item() == 4.5


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
