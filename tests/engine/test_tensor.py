"""What a Tensor holds and how it behaves as a value (tensor.py, creation.py): the dtype of a
new tensor, copies handed out, truth value, equality and NumPy conversion as NumPy's, 0-d
results as 0-d arrays, and only floating tensors in the graph."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import leaf


# -- a new tensor -----------------------------------------------------------------------------

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


# -- truth value, equality and NumPy conversion ---------------------------------------------

def test_truth_value_follows_numpy(device):
    """A Tensor had no __bool__: `bool(Tensor([0.0]))` was True, `if t > 1:` on
    three elements took a branch instead of raising NumPy's "ambiguous", and bool() of a 0-d
    comparison raised IndexError."""
    assert not bool(Tensor([0.0], device=device))
    assert bool(Tensor(0.5, device=device) < 1)  # 0-d: a plain comparison result
    with pytest.raises(ValueError, match="ambiguous"):
        if Tensor([1.0, 2.0, 3.0], device=device) > 1:
            pass
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0, device=device))
    assert float(Tensor([2.5], device=device)) == 2.5 and int(Tensor(3.7, device=device)) == 3  # as torch
    with pytest.raises(ValueError, match="one element"):
        float(Tensor([1.0, 2.0], device=device))


def test_equality_is_elementwise_and_hash_stays_identity(device):
    """`t == 1` compares values; it compared identity."""
    t = Tensor([1.0, 2.0, 1.0], device=device)
    np.testing.assert_array_equal((t == 1).numpy(), [True, False, True])
    np.testing.assert_array_equal((t != 1).numpy(), [False, True, False])
    assert (t == None) is False and {t: 1}[t] == 1  # noqa: E711


def test_numpy_conversion_of_a_cpu_tensor_and_state_dicts_of_tensors(device):
    """`np.asarray(t)` gave an object array, so `load_state_dict({name: Tensor})`
    failed obscurely."""
    assert np.asarray(Tensor([1.0, 2.0])).dtype == np.float32
    layer = tx.nn.Linear(2, 3).to(device)
    state = {name: Tensor(np.full(p.shape, 0.5, dtype=np.float32), device=device)
             for name, p in layer.named_parameters()}
    layer.load_state_dict(state)
    assert all((p.numpy() == 0.5).all() for p in layer.parameters())


# -- only floating tensors require grad ------------------------------------------------------

def test_only_floating_tensors_can_require_grad():
    with pytest.raises(TypeError, match="only floating tensors can require grad; this one is int64"):
        Tensor(np.arange(3), requires_grad=True)
    with pytest.raises(TypeError, match="bool"):
        Tensor([True, False], requires_grad=True)


def test_integer_tensors_cannot_require_grad(device):
    """`tx.zeros(2, dtype=np.int64, requires_grad=True)` was accepted (the
    optimizer failed later), and `x.astype(np.int64)` kept requires_grad and passed the gradient
    straight through (PyTorch: not differentiable)."""
    with pytest.raises(TypeError, match="only floating tensors can require grad"):
        tx.zeros(2, dtype=np.int64, requires_grad=True, device=device)
    x = leaf([1.5, 2.5], device)
    ids = x.astype(np.int64)
    assert not ids.requires_grad and ids.grad_fn is None  # PyTorch: not differentiable
    assert x.astype(np.float32).requires_grad  # between floats it still is


# -- a 0-d result is a 0-d array on every device, never a NumPy scalar -------------------------

ZERO_D = {
    "sum": lambda x: x.sum(), "mean": lambda x: x.mean(), "max": lambda x: x.max(), "var": lambda x: x.var(),
    "index": lambda x: x[1], "scaled": lambda x: x.sum() * 2.0, "exp": lambda x: x.sum().exp(),
    "sigmoid": lambda x: x[0].sigmoid(), "compare": lambda x: x.sum() > 0, "matmul": lambda x: x @ x,
    "cross_entropy": lambda x: F.cross_entropy(x.reshape(1, 3), [2]), "cast": lambda x: x.sum().astype(np.float32),
}


@pytest.mark.parametrize("op", ZERO_D)
def test_zero_d_results_are_arrays(device, op):
    """NumPy gives np.float32 for a 0-d result, which `dist.all_reduce` cannot write in place
    ("'numpy.float32' object does not support item assignment") and which is shared (np.True_)."""
    x = leaf([1.0, -2.0, 4.0], device)
    y = ZERO_D[op](x)
    assert y.shape == () and isinstance(y.data, x.backend.array_type), type(y.data)
    y.data[...] = 1  # what all_reduce and broadcast do
    assert y.item() == 1


def test_zero_d_gradients_and_comparisons_are_arrays(device):
    """The same for gradients and comparisons: two True results were NumPy's one shared np.True_,
    which a jit record could not tell apart (tests/jit/test_replay.py)."""
    x = Tensor(np.float64(2.0), device=device, requires_grad=True)
    (g,) = tx.grad(x * x, [x])
    assert isinstance(g.data, x.backend.array_type) and g.item() == 4.0
    (x * 3.0).backward()
    assert isinstance(x.grad.data, x.backend.array_type) and x.grad.item() == 3.0
    a, b = x > 0, x > 1  # two True results: two arrays, not NumPy's one shared np.True_
    assert a.data is not b.data
