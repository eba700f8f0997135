"""The walk back (backward.py) and the pitfalls autograd engines are known to fall into (see
shared/REFERENCE.md): fan-out, diamonds, deep graphs, backward twice, gradients of gradients
(`tx.grad`, `create_graph`), and the errors backward gives before it starts. The plan itself
is in test_backward_plan.py."""
import math
import sys

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor

from ..helpers import leaf, t


# -- the graph walk ---------------------------------------------------------------------

def test_fan_out(device):
    a = leaf(3.0, device)
    b = a + a
    c = b + b
    c.backward()
    assert a.grad.item() == 4.0


def test_diamond(device):
    x = leaf([0.5, -1.0], device)
    top, bottom = x * 2.0, x.exp()  # two paths from x that meet again
    (top * bottom).sum().backward()
    xs = np.array([0.5, -1.0])
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(xs) + 2 * xs * np.exp(xs), rtol=1e-14)


def test_tensor_used_by_many_ops_sums_every_use(device):
    x = leaf([2.0], device)
    y = x * x * x + x.exp() - x / 4.0  # 3x² + eˣ - 1/4
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12 + math.exp(2) - 0.25], rtol=1e-14)


def test_leaves_accumulate_across_backward_calls(device):
    x = leaf([1.0, -2.0], device)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2 + 3, -4 + 3])


def test_leaf_gradient_arrays_are_not_shared():
    """`a + b` hands the same gradient to both: editing one leaf's grad must not change the other's."""
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).backward(Tensor(np.array([1.0, 1.0])))
    a.grad.data *= 0
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])


def test_deep_chain_needs_no_recursion():
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    assert 10_000 > sys.getrecursionlimit()
    y.backward(Tensor(np.array([1.0])))
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10_000], rtol=1e-10)


def test_backward_twice_needs_retain_graph(device):
    x = leaf([1.0, 2.0], device)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    z = (x * x).sum()
    x.grad = None
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])  # twice 2x


def test_backward_on_a_leaf():
    x = leaf([1.0, 2.0])
    x.backward(Tensor(np.array([3.0, 4.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


# -- tx.grad and create_graph ----------------------------------------------------------------

def test_tx_grad_leaves_dot_grad_alone(device):
    x, w = leaf([1.0, 2.0], device), leaf([3.0, -1.0], device)
    h = x * w
    y = (h * h).sum()
    gx, gh = tx.grad(y, [x, h])
    np.testing.assert_array_equal(gx.numpy(), 2 * np.array([3.0, -2.0]) * np.array([3.0, -1.0]))
    np.testing.assert_array_equal(gh.numpy(), 2 * np.array([3.0, -2.0]))
    assert x.grad is None and w.grad is None and h.grad is None
    unused = leaf([0.0], device)
    assert tx.grad((x * 2.0).sum(), [unused])[0] is None


def test_second_derivative_with_tx_grad(device):
    x = leaf([0.5, -2.0], device)
    (g,) = tx.grad((x ** 3).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * np.array([0.5, -2.0]) ** 2, rtol=1e-14)
    (gg,) = tx.grad(g.sum(), [x])
    np.testing.assert_allclose(gg.numpy(), 6 * np.array([0.5, -2.0]), rtol=1e-14)


def test_backward_with_create_graph_keeps_the_graph_for_the_gradient(device):
    """x.grad from create_graph=True is itself differentiable, even through intermediates."""
    x = leaf([1.5, 2.0], device)
    y = x * x
    (y * y).sum().backward(create_graph=True)  # x.grad = 4x³, computed from y = x²
    np.testing.assert_allclose(x.grad.numpy(), 4 * np.array([1.5, 2.0]) ** 3, rtol=1e-14)
    g = x.grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 12 * np.array([1.5, 2.0]) ** 2, rtol=1e-14)


# -- what backward refuses ---------------------------------------------------------------------

def test_backward_on_a_non_scalar_needs_a_gradient():
    y = t(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"non-scalar tensor of shape \(2, 3\)"):
        y.backward()
    with pytest.raises(RuntimeError, match=r"gradient of shape \(3,\) for a tensor of shape \(2, 3\)"):
        y.backward(Tensor(np.ones(3)))


def test_backward_on_a_tensor_that_does_not_require_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        (t(3) * 2.0).sum().backward()
    with tx.no_grad():
        y = (t(3, requires_grad=True) * 2.0).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()
