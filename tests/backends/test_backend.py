"""Devices (backend.py): moving and mixing tensors, choosing the default device, CuPy's
absence, and one seed for every device. The strict device's own manners are in test_strict.py."""
import ctypes
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor


INSTALL_HINT = 'pip install -e ".[cuda]" (from a clone of tinygrad_tx; the package is not on PyPI yet)'
HAS_CUPY = importlib.util.find_spec("cupy") is not None


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
@pytest.mark.parametrize("gpus", [0, 1])
def test_cuda_without_cupy_says_first_whether_this_machine_has_a_gpu(monkeypatch, gpus):
    """With no GPU, installing CuPy would not help, yet the error led with that advice: it says
    first that no GPU is there (then how to install CuPy where one is); with a GPU, how."""
    from tinygrad_tx.backends import backend

    monkeypatch.setattr(backend, "gpu_count", lambda: gpus)
    with pytest.raises(tx.DeviceError) as err:
        tx.get_backend("cuda")
    message = str(err.value)
    lead = 'device "cuda" needs CuPy' if gpus else 'device "cuda": this machine has no NVIDIA GPU'
    assert message.startswith(lead) and INSTALL_HINT in message
    assert ("use --device cpu" in message) == (not gpus)


def test_the_gpu_count_asks_the_driver_and_is_zero_without_one():
    from tinygrad_tx.backends.backend import gpu_count

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert gpu_count() == 0
        return
    cupy = pytest.importorskip("cupy")
    assert gpu_count() == cupy.cuda.runtime.getDeviceCount()


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cuda_from_the_environment_without_cupy_fails_loudly():
    env = {**os.environ, "TINYGRAD_TX_DEVICE": "cuda"}
    result = subprocess.run([sys.executable, "-c", "import tinygrad_tx as tx; tx.Tensor([1.])"],
                            env=env, capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0
    assert INSTALL_HINT in result.stderr


# -- one seed for every device ------------------------------------------------------------

def test_manual_seed_gives_the_same_numbers_on_every_device():
    draws = {}
    for device in ("cpu", "strict"):
        tx.manual_seed(123)
        draws[device] = tx.randn(3, 4, device=device).numpy(), F.dropout(tx.ones(50, device=device), 0.5).numpy()
    for a, b in zip(draws["cpu"], draws["strict"]):
        np.testing.assert_array_equal(a, b)
    tx.manual_seed(124)
    assert not np.array_equal(tx.randn(3, 4).numpy(), draws["cpu"][0])
