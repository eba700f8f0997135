"""The op pattern (function.py): what an op's backward must return (the engine names the op
when it does not), a node's repr, and ops that are differentiable only once."""
import numpy as np
import pytest

from tinygrad_tx import Tensor
from tinygrad_tx.function import Function

from ..helpers import leaf


def test_grad_fn_repr_names_the_op_and_its_inputs():
    a = Tensor(np.ones((2, 3)), requires_grad=True, name="a")
    b = Tensor(np.ones(3), requires_grad=True, name="bias")
    y = a * b
    assert "Mul" in repr(y.grad_fn) and "a" in repr(y.grad_fn) and "bias" in repr(y.grad_fn)
    z = y.sum()
    assert "Sum" in repr(z.grad_fn) and "(2, 3)" in repr(z.grad_fn)
    assert "grad_fn=<Sum" in repr(z)
    z.backward()
    assert "released" in repr(z.grad_fn)


class _BadShape(Function, register=False):
    def forward(self, x):
        return x * 2

    def backward(self, g, x):
        return (g[:1],)


class _BadRank(Function, register=False):
    def forward(self, x):
        return x * 2

    def backward(self, g, x):
        return (g.sum(axis=0),)


class _BadDtype(Function, register=False):
    def forward(self, x):
        return x * 2

    def backward(self, g, x):
        return (g.astype(np.float32),)


class _BadCount(Function, register=False):
    def forward(self, x, y):
        return x * y

    def backward(self, g, x, y):
        return (g * y,)  # forgot y's gradient


@pytest.mark.parametrize("op", [_BadShape, _BadRank, _BadDtype, _BadCount], ids=lambda c: c.__name__)
def test_a_wrong_gradient_from_an_op_names_the_op(device, op):
    x = leaf(np.ones((3, 2)), device)
    with pytest.raises(RuntimeError, match=f"{op.__name__}.backward returned"):
        op.apply(*[x] * (2 if op is _BadCount else 1)).sum().backward()


def test_an_op_may_return_none_for_an_input(device):
    """None means "no gradient": nothing flows back that way, the other paths still count."""
    class Blocked(Function, register=False):
        def forward(self, x):
            return x * 2

        def backward(self, g, x):
            return (None,)

    x, w = leaf([1.0, 2.0], device), leaf([5.0], device)
    (Blocked.apply(x * w) + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    assert w.grad is None


def test_custom_op_gradient_is_broadcast_back_by_the_engine(device):
    class Scale(Function, register=False):  # returns the gradient in the broadcast shape, as ops may
        def forward(self, x, s):
            return x * s

        def backward(self, g, x, s):
            return g * s, g * x

    x, s = leaf(np.ones((2, 3)) * 2.0, device), leaf([3.0], device)
    Scale.apply(x, s).sum().backward()
    np.testing.assert_array_equal(s.grad.numpy(), [12.0])
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 3.0))


def test_create_graph_through_a_once_differentiable_op_raises(device):
    """An op whose backward works on raw arrays only (tx.jit's whole-replay node is one) is refused
    under create_graph with its name, before any gradient moves."""
    from tinygrad_tx.function import OnceDifferentiable

    class RawSquare(OnceDifferentiable, register=False):
        def forward(self, x):
            return x * x

        def backward(self, g, x):
            return (2 * g * x,)

    x = Tensor(np.random.default_rng(0).standard_normal((2, 3)), requires_grad=True, device=device)
    with pytest.raises(RuntimeError, match="RawSquare is once-differentiable"):
        (RawSquare.apply(x) * x).sum().backward(create_graph=True)
    assert x.grad is None
