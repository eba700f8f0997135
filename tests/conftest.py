"""Shared fixtures: the `device` every op test runs on, and PyTorch as an optional oracle."""
import os

# The tests' matrices are small: one BLAS thread is as fast, and several threads spin against
# each other (and against anything else running) on a 2-core machine. Set before NumPy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import tinygrad_tx as tx  # noqa: E402

DEVICES = ["cpu", "strict", "cuda"]

# Property-based tests (hypothesis): CI runs a bounded number of examples from a fixed seed, so a
# run is fast and repeatable; `pytest --hypothesis-profile large tests/ops tests/jit` searches far
# more.
# The `device` and `torch` fixtures do not change between examples, so sharing them is safe.
# No deadlines or speed health checks: this machine is shared, and a slow example is not a wrong one.
_shared = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("ci", max_examples=25, derandomize=True, print_blob=True, **_shared)
settings.register_profile("large", max_examples=2500, **_shared)
settings.load_profile("ci")


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """"cpu" (NumPy), "strict" (NumPy with CuPy's refusals, see tinygrad_tx/backends/strict.py) and
    "cuda" (CuPy), the last skipped with the reason where CuPy or a GPU is missing."""
    try:
        tx.get_backend(request.param)
    except tx.DeviceError as e:
        pytest.skip(f"CuPy/GPU not available: {e}")
    return request.param


@pytest.fixture
def on_each_device(device: str) -> str:
    """Make `device` the default for one test, so every tensor and model it makes lives there
    (use with `pytestmark = pytest.mark.usefixtures("on_each_device")`)."""
    tx.set_device(device)
    return device


@pytest.fixture
def torch():
    """PyTorch, the reference implementation; tests that use it skip where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _restore_global_state():
    """Tests may change the default device or the seed; give the next test a clean slate."""
    from tinygrad_tx.backends import backend

    default = backend._default
    yield
    backend._default = default
    tx.manual_seed(0)
    enabled = tx.is_grad_enabled()
    tx.function.set_grad_enabled(True)
    assert enabled, "this test left grad mode disabled (a no_grad that did not restore it)"
