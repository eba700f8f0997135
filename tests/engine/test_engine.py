"""The graph walk and the pitfalls autograd engines are known to fall into
(see shared/REFERENCE.md): fan-out, deep graphs, backward twice, grad mode,
dtype drift, overflow, NaN leaks, masked rows, in-place changes, hooks."""
import math
import sys

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor
from tinygrad_tx.function import Function


def leaf(values, device="cpu", dtype=np.float64):
    return Tensor(np.array(values, dtype=dtype), requires_grad=True, device=device)


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


# -- grad mode, detach, tx.grad -------------------------------------------------------------

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


# -- dtypes -----------------------------------------------------------------------------

F32_CASES = {
    "mul_int": lambda x: x * 2,
    "div_large": lambda x: x / 123456,
    "add_int": lambda x: x + 1,
    "rsub": lambda x: 1.5 - x,
    "rdiv": lambda x: 2 / (x.abs() + 1),
    "rpow": lambda x: 2 ** x,
    "pow_scalar": lambda x: (x * x + 1) ** 0.5 + x ** 3,
    "pow_tensor": lambda x: (x.abs() + 1) ** x,
    "numpy_scalar": lambda x: x * np.float64(3.0) + np.float64(1.0),
    "unary": lambda x: x.exp() + (x.abs() + 1).log() + (x.abs() + 1).sqrt() + x.tanh() + x.sigmoid() + x.relu(),
    "gelu": lambda x: x.gelu() + x.gelu("tanh"),
    "reductions": lambda x: x.mean(axis=0) + x.var(axis=0) + x.max(axis=0) + x.sum(axis=0),
    "shape": lambda x: x.T.reshape(-1).expand(2, 12)[..., None, ::2],
    "index": lambda x: x[[1, 1, 2]],
    "softmax": lambda x: x.softmax() + x.log_softmax(axis=0),
    "layer_norm": lambda x: F.layer_norm(x),
    "cross_entropy": lambda x: F.cross_entropy(x, [0, 3, 1], ignore_index=1, label_smoothing=0.1),
    "attention": lambda x: F.scaled_dot_product_attention(x, x, x, mask=np.tri(3, dtype=bool)),
    "attention_dropout": lambda x: F.scaled_dot_product_attention(x, x, x, causal=True, dropout_p=0.5),
    "dropout": lambda x: F.dropout(x, 0.3),
    "masked_fill": lambda x: x.masked_fill(np.eye(3, 4, dtype=bool), -1e4),
    "where": lambda x: tx.where(x > 0, x, 0) + tx.where(x > 0, 1, x),
    "cat_stack": lambda x: tx.cat([x, x * 2], axis=1) + tx.stack([x, x], axis=1).reshape(3, 8),
    "linear": lambda x: F.linear(x, x.T, x[0, :3]),
}


@pytest.mark.parametrize("name", F32_CASES)
def test_float32_stays_float32(device, name):
    """Python numbers, 0-d arrays and fused ops must not promote float32 to float64,
    neither in the result nor in the gradient (CuPy makes that a 2x cost)."""
    x = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), requires_grad=True,
               device=device)
    y = F32_CASES[name](x)
    assert y.dtype == np.float32
    y.backward(Tensor(np.ones(y.shape, dtype=np.float32), device=device))
    assert x.grad.dtype == np.float32
    assert np.isfinite(x.grad.numpy()).all()


def test_float32_embedding_and_layer_norm_parameters(device):
    w = Tensor(np.ones((4, 3), np.float32), requires_grad=True, device=device)
    gain, bias = (Tensor(np.ones(3, np.float32), requires_grad=True, device=device) for _ in range(2))
    y = F.layer_norm(F.embedding([1, 1, 3], w) * Tensor(np.arange(3, dtype=np.float32), device=device), gain, bias)
    assert y.dtype == np.float32
    (y * y).sum().backward()
    assert {w.grad.dtype, gain.grad.dtype, bias.grad.dtype} == {np.dtype(np.float32)}


# -- numerics ---------------------------------------------------------------------------

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


def test_fully_masked_attention_rows_are_zero_and_have_zero_gradients(device):
    rng = np.random.default_rng(0)
    q, k, v = (leaf(rng.standard_normal((2, 3, 4)), device) for _ in range(3))
    keep = np.ones((2, 3, 3), dtype=bool)
    keep[0, 1] = False  # query 1 of batch 0 may see nothing
    keep[1] = False  # batch 1 sees nothing at all
    out, weights = F.scaled_dot_product_attention(q, k, v, mask=keep, return_weights=True)
    out.backward(Tensor(rng.standard_normal(out.shape), device=device))
    assert np.all(out.numpy()[0, 1] == 0) and np.all(out.numpy()[1] == 0)
    assert np.all(weights.numpy()[0, 1] == 0)
    np.testing.assert_allclose(weights.numpy()[0, [0, 2]].sum(axis=-1), 1.0, rtol=1e-14)
    for t in (q, k, v):
        assert np.isfinite(t.grad.numpy()).all()
        assert np.all(t.grad.numpy()[1] == 0)
    assert np.all(q.grad.numpy()[0, 1] == 0)


def test_causal_attention_never_looks_ahead_even_with_huge_logits(device):
    """d out[i] / d x[j] is exactly zero for every j > i, also with logits near 1e4."""
    rng = np.random.default_rng(0)
    T, D = 5, 4
    x = leaf(rng.standard_normal((T, D)), device)
    wq, wk = (Tensor(rng.standard_normal((D, D)) * 100, device=device) for _ in range(2))
    out = F.scaled_dot_product_attention(x @ wq, x @ wk, x, causal=True)
    for i in range(T):
        (g,) = tx.grad(out[i].sum(), [x], retain_graph=True)
        g = g.numpy()
        assert np.isfinite(g).all()
        assert np.all(g[i + 1:] == 0), f"output {i} depends on later positions"
        assert np.any(g[: i + 1] != 0)


@pytest.mark.parametrize("mask", [np.ones((3, 3)), np.ones((3, 3), dtype=np.int64)], ids=["float", "int"])
def test_float_and_integer_masks_are_rejected(device, mask):
    x = leaf(np.zeros((3, 3)), device)
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean"):
        x.masked_fill(mask, 0.0)
    with pytest.raises(TypeError, match="where: the mask must be boolean"):
        tx.where(mask, x, 0.0)
    with pytest.raises(TypeError, match="scaled_dot_product_attention: the mask must be boolean"):
        F.scaled_dot_product_attention(x, x, x, mask=Tensor(mask, device=device))


# -- inspection, in-place changes, custom ops, hooks ------------------------------------

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


def test_changing_a_saved_input_before_backward_raises(device):
    x = leaf([1.0, 2.0], device)
    y = (x * x).sum()
    x.data = x.data * 10  # replaced between forward and backward
    with pytest.raises(RuntimeError, match="modified after the op used it"):
        y.backward()
    w = leaf([1.0, 2.0], device)
    z = (w * w).sum()
    w.data[0] = 5.0  # in place: the optimizer's way, announced with bump_version
    w.bump_version()
    with pytest.raises(RuntimeError, match="Mul"):
        z.backward()


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
