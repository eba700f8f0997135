"""Grad mode (function.py's `no_grad` and `enable_grad`) and `detach`: what stays out of the
graph, and that the mode always comes back."""
import numpy as np
import pytest

import tinygrad_tx as tx

from ..helpers import leaf


def test_no_grad_context_manager(device):
    x = leaf([1.0, 2.0], device)
    with tx.no_grad():
        assert not tx.is_grad_enabled()
        y = (x * 2.0).exp().sum()
    assert tx.is_grad_enabled()
    assert y.grad_fn is None and not y.requires_grad
    np.testing.assert_allclose(y.item(), np.exp(2.0) + np.exp(4.0))


def test_no_grad_decorator_and_nesting():
    x = leaf([1.0])

    @tx.no_grad()
    def scaled(t, depth):
        assert not tx.is_grad_enabled()
        return scaled(t, depth - 1) if depth else t * 2.0  # the decorator re-entered by recursion

    y = scaled(x, 3)
    assert y.grad_fn is None and not y.requires_grad
    assert tx.is_grad_enabled()
    with tx.no_grad():
        with tx.enable_grad():
            z = x * 2.0
        assert not tx.is_grad_enabled()
    assert z.requires_grad and z.grad_fn is not None
    assert tx.is_grad_enabled()


def test_no_grad_restores_after_an_exception():
    with pytest.raises(ValueError), tx.no_grad():
        raise ValueError
    assert tx.is_grad_enabled()


def test_detach(device):
    x = leaf([1.5, -2.0], device)
    d = x.detach()
    assert d.grad_fn is None and not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    (x * x.detach()).sum().backward()  # the detached factor is a constant: d/dx = x, not 2x
    np.testing.assert_array_equal(x.grad.numpy(), [1.5, -2.0])
