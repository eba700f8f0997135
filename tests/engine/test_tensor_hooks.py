"""Tensor hooks: `register_hook` replaces a gradient, `retain_grad` keeps one, and a
post-accumulate-grad hook runs once a leaf's gradient is final, each as PyTorch's does. Module
hooks are in tests/nn/test_hooks.py."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor

from ..helpers import leaf


def test_register_hook_replaces_the_gradient(device):
    x = leaf([1.0, 2.0], device)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy()) or g * 10.0)
    y = x * 3.0
    y.register_hook(lambda g: g + 1.0)  # on an intermediate: changes what flows on to x
    (y + y).sum().backward()
    np.testing.assert_array_equal(seen[0], [9.0, 9.0])  # the hook saw the whole (2 + 1) * 3
    np.testing.assert_array_equal(x.grad.numpy(), [90.0, 90.0])


def test_retain_grad_keeps_an_intermediate_gradient(device):
    x = leaf([1.0, -2.0], device)
    h = x * x
    h.retain_grad()
    other = x * 2.0
    (h * 3.0 + h + other).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [4.0, 4.0])
    assert other.grad is None
    np.testing.assert_array_equal(x.grad.numpy(), [8 * 1.0 + 2, 8 * -2.0 + 2])


def test_hook_on_an_intermediate_replaces_the_gradient_downstream(device):
    x = leaf([0.5, -1.5, 2.0], device)
    h = x * 3.0
    h.register_hook(lambda g: g * 0.0 + 2.0)  # pretend dL/dh = 2 everywhere
    (h.tanh() * 7.0).sum().backward()  # what flows past h no longer depends on tanh
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 6.0])


def test_replaced_gradient_flows_through_the_rest_of_the_graph(device):
    def run(scale):
        x = leaf([0.5, -1.5, 2.0], device)
        h = x.exp()
        if scale:
            h.register_hook(lambda g: g * scale)
        (h.tanh() * h).sum().backward()  # the hook scales the whole dL/dh, both uses together
        return x.grad.numpy()

    np.testing.assert_allclose(run(-3.0), -3.0 * run(None), rtol=1e-12)


def test_leaf_hook_sees_the_summed_gradient_and_its_result_is_stored(device):
    x = leaf([1.0, 2.0], device)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy()))  # returns None: keeps the gradient
    x.register_hook(lambda g: g * 10.0)  # runs second, sees the first one's result
    (x * x + x).sum().backward()
    np.testing.assert_allclose(seen[0], [3.0, 5.0])
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 50.0])


def test_post_accumulate_grad_hook_runs_during_backward_with_the_whole_gradient(device):
    """The hook on the last layer's weight runs before the first layer's gradient exists
    (that is what lets data parallelism start sending it early), once, with the sum of both
    uses; a callback queued twice runs once, after every gradient is in place."""
    x = Tensor(np.array([[1.0, -2.0]]), device=device)  # (1, 2), float64 like leaf()
    w1, w2 = leaf([[0.5, -1.0], [2.0, 0.25]], device), leaf([[1.0], [-3.0]], device)
    events = []

    def ready(name):
        def hook(p):
            events.append((name, p.grad.numpy(), w1.grad is None))
            tx.leaf_sink.queue_callback(finished)
        return hook

    def finished():
        events.append(("finished", w1.grad is not None and w2.grad is not None))

    w1.register_post_accumulate_grad_hook(ready("w1"))
    w2.register_post_accumulate_grad_hook(ready("w2"))
    h = x @ w1  # (1, 2): [[-3.5, -1.5]]
    ((h @ w2) + (h @ w2)).sum().backward()  # w2 used twice
    assert [e[0] for e in events] == ["w2", "w1", "finished"]
    np.testing.assert_allclose(events[0][1], [[-7.0], [-3.0]])  # 2 hᵀ, by hand
    assert events[0][2], "w2's hook ran only after w1 had its gradient"
    np.testing.assert_allclose(events[1][1], [[2.0, -6.0], [-4.0, 12.0]])  # 2 xᵀ w2ᵀ
    assert events[2] == ("finished", True)
    with pytest.raises(RuntimeError, match="outside backward"):
        tx.leaf_sink.queue_callback(finished)
    with pytest.raises(RuntimeError, match="needs a leaf"):
        h.register_post_accumulate_grad_hook(ready("h"))


def test_hooks_run_in_registration_order():
    x = leaf([1.0])
    h = x * 1.0
    h.register_hook(lambda g: g + 1.0)
    h.register_hook(lambda g: g * 10.0)
    h.sum().backward()
    assert x.grad.item() == 20.0  # (1 + 1) * 10, not 1 * 10 + 1


def test_hook_on_a_tensor_without_grad_is_refused():
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor([1.0]).register_hook(lambda g: g)


def test_hook_matches_pytorch(torch):
    values = [0.2, -0.4, 1.1]
    x = leaf(values)
    h = x.tanh()
    h.register_hook(lambda g: g * g)
    (h * h * 3.0).sum().backward()
    tx_ = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    th = tx_.tanh()
    th.register_hook(lambda g: g * g)
    (th * th * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx_.grad.numpy(), rtol=1e-12)


def test_retain_grad_on_a_fan_out_tensor_keeps_the_sum(device):
    x = leaf([1.0, -2.0], device)
    h = x.tanh()
    h.retain_grad()
    h.retain_grad()  # a second call must not count the gradient twice
    (h * 3.0 + h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 3.0 + 2 * np.tanh([1.0, -2.0]), rtol=1e-12)


def test_retain_grad_accumulates_across_backward_calls_like_a_leaf():
    x = leaf([1.0, 2.0])
    h = x * 2.0
    h.retain_grad()
    y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * 2 * np.array([2.0, 4.0]))
    x.retain_grad()  # a leaf keeps its gradient anyway: nothing to do
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * 2 * np.array([2.0, 4.0]))


@pytest.mark.parametrize("retain_first", [True, False])
def test_retained_gradient_is_the_one_that_flowed_on_whatever_the_order(torch, retain_first):
    """With `h.retain_grad(); h.register_hook(lambda g: g * 2)`, h.grad
    was the gradient before the hook (1x) while x.grad got 2x. PyTorch keeps the one that flowed on."""
    values = [0.3, -1.2, 0.7]
    x, tx_ = leaf(values), torch.tensor(values, dtype=torch.float64, requires_grad=True)
    h, th = x.tanh(), tx_.tanh()
    for t in (h, th):
        if retain_first:
            t.retain_grad()
        t.register_hook(lambda g: g * 2)
        if not retain_first:
            t.retain_grad()
    (h * 3.0).sum().backward()
    (th * 3.0).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.grad.numpy(), 6.0)
    np.testing.assert_allclose(x.grad.numpy(), tx_.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("on_leaf", [True, False])
@pytest.mark.parametrize("change", ["shape", "broadcast", "dtype"])
def test_a_hook_that_changes_the_gradients_shape_or_dtype_is_refused(on_leaf, change):
    """A leaf hook returning `g.sum()` made `.grad` one number, which SGD
    then broadcast over the weight. A hook may change values only; the error names the tensor and
    both shapes."""
    x = Tensor(np.ones((2, 3)), requires_grad=True, name="weight")
    t = x if on_leaf else x * 2.0
    replace = {"shape": lambda g: g.sum(), "broadcast": lambda g: g.sum(axis=0, keepdims=True),
               "dtype": lambda g: g.astype(np.float32)}[change]
    t.register_hook(replace)
    with pytest.raises(RuntimeError, match=r"hook on .*(weight|Mul).*shape .*\(2, 3\)"):
        (t * t).sum().backward()
    assert x.grad is None
