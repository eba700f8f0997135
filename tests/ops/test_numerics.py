"""Numerical edges of the ops: huge logits, a row of zero variance, a large mean in float32,
NaN leaking through `where`, powers at 0, and the mean of nothing. (The edges against
PyTorch, NaN, ±0, ±inf and the far tails, are in test_torch_parity.py.)"""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import leaf


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_huge_logits(device, dtype):
    logits = np.array([[1e4, -1e4, 0.0, 1e4 - 1.0], [-1e4, -1e4, -1e4 + 2.0, -1e4]])
    x = Tensor(logits.astype(dtype), requires_grad=True, device=device)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # -2e4 - log(1 + e⁻¹) at [0, 1]
    y, log_y = x.softmax(), x.log_softmax()
    np.testing.assert_allclose(y.numpy(), np.exp(log_expected), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(log_y.numpy(), log_expected, rtol=1e-6)
    loss = F.cross_entropy(x, [1, 2])
    np.testing.assert_allclose(loss.item(), -(log_expected[0, 1] + log_expected[1, 2]) / 2, rtol=1e-6)
    (y[:, 0].sum() + log_y[:, 3].sum() + loss).backward()
    assert np.isfinite(x.grad.numpy()).all()


def test_layer_norm_of_a_constant_row_gives_the_bias(device):
    x = Tensor(np.full((2, 5), 3.0), requires_grad=True, device=device)
    w, b = leaf([1.0, 2.0, 3.0, 4.0, 5.0], device), leaf([0.5, -0.5, 1.0, 0.0, 2.0], device)
    y = F.layer_norm(x, w, b)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(b.numpy(), (2, 5)))
    g = np.arange(10.0).reshape(2, 5)
    y.backward(Tensor(g, device=device))
    for t in (x, w, b):
        assert np.isfinite(t.grad.numpy()).all()
    # with zero variance, y = (x - mean) / √eps · w + b near the row: the gradient is finite and
    # blind to a shift of the whole row (each gradient row sums to zero)
    g_hat = g * w.numpy()
    np.testing.assert_allclose(x.grad.numpy(), (g_hat - g_hat.mean(axis=1, keepdims=True)) / np.sqrt(1e-5),
                               rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy().sum(axis=1), 0.0, atol=1e-9)
    np.testing.assert_array_equal(w.grad.numpy(), 0.0)
    np.testing.assert_array_equal(b.grad.numpy(), g.sum(axis=0))


def test_layer_norm_with_a_large_mean_in_float32(device):
    """A one-pass variance E[x²] - E[x]² loses every digit here; two passes keep float32's precision.
    (The float64 run gets the same float32-rounded numbers, so only the arithmetic differs.)"""
    rows = (np.random.default_rng(0).standard_normal((4, 16)) + 2000.0).astype(np.float32).astype(np.float64)
    g = np.random.default_rng(1).standard_normal((4, 16))
    results = {}
    for dtype in (np.float32, np.float64):
        x = Tensor(rows.astype(dtype), requires_grad=True, device=device)
        y = F.layer_norm(x)
        y.backward(Tensor(g.astype(dtype), device=device))
        results[dtype] = y.numpy(), x.grad.numpy()
    # float32 cannot even hold the row mean closer than ~6e-5 (PyTorch is off by 1e-4 too);
    # a one-pass variance would be off by ~0.8
    np.testing.assert_allclose(results[np.float32][0], results[np.float64][0], atol=3e-4)
    np.testing.assert_allclose(results[np.float32][1], results[np.float64][1], atol=3e-4)
    centred = rows - rows.mean(axis=1, keepdims=True)
    reference = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(results[np.float64][0], reference, atol=1e-12)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_where_leaks_nan_and_double_where_does_not(device):
    x = leaf([-1.0, 4.0], device)
    tx.where(x > 0, x.sqrt(), 0.0).sum().backward()
    assert np.isnan(x.grad.numpy()[0])  # 0 * d sqrt(x)/dx at x < 0 = 0 * NaN: the documented leak
    x.grad = None
    safe = tx.where(x > 0, x, 1.0)
    tx.where(x > 0, safe.sqrt(), 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.25])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the masked-out branch computes 0 · inf
def test_power_limits_match_torch(torch, device):
    """d/dx x**0 at 0 and d/dy 0**y are 0, as PyTorch's; they were NaN."""
    x, y = [0.0, 0.0, 2.0], [0.0, 2.0, 0.0]
    a, b = leaf(x, device), leaf(y, device)
    (a ** b).sum().backward()
    ta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    (ta ** tb).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())
    c = leaf([0.0, 3.0], device)
    (c ** 0).sum().backward()
    np.testing.assert_array_equal(c.grad.numpy(), [0.0, 0.0])


def test_mean_and_var_of_nothing_are_nan(torch, device):
    """`zeros(0, 3).mean()` and `.var()` are NaN, as PyTorch's; they raised a bare
    ZeroDivisionError."""
    empty = tx.zeros(0, 3, device=device)
    assert np.isnan(empty.mean().item()) and np.isnan(empty.var().item())
    assert np.isnan(empty.mean(axis=0).numpy()).all()
    assert torch.zeros(0, 3).mean().isnan()
