"""Property-based parity: the engine against PyTorch in float64, on shapes and values that
hypothesis draws (random ranks and sizes, empty axes, negative axes, repeated indices).

Each property runs an op forward on both sides, then backward with the same random upstream
gradient, and compares the outputs and every input's gradient. Indexing is compared with
NumPy instead (PyTorch has no negative steps): its gradient must be `np.add.at` of the upstream
gradient, the scatter-add that defines it. CI runs the "ci" profile of tests/conftest.py
(few examples, fixed seed); `pytest --hypothesis-profile large tests/ops/test_property_parity.py`
searches much longer.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_tx as tx
import tinygrad_tx.functional as F

FINITE = st.floats(-8, 8, allow_nan=False, allow_infinity=False, width=64)
POSITIVE = st.floats(0.05, 8, width=64)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
NONEMPTY = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


def arrays(shape, elements=FINITE):
    return hnp.arrays(np.float64, shape, elements=elements)


def check(device, torch, tx_fn, torch_fn, *values, seed=0, atol=1e-9):
    """Forward and backward of `tx_fn` and `torch_fn` on the same float64 arrays must agree."""
    ours = [tx.Tensor(v, device=device, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    out, expected = tx_fn(*ours), torch_fn(*theirs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-7, atol=atol)
    g = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(tx.Tensor(g, device=device))
    expected.backward(torch.tensor(g))
    for a, b in zip(ours, theirs):
        if b.grad is None:  # PyTorch gives None where nothing flowed; so may we
            assert a.grad is None or not a.grad.numpy().any()
        else:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-7, atol=atol)


# -- elementwise and broadcasting -------------------------------------------------------------

BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / (b * b + 0.5)}  # a denominator that stays away from 0


@given(data=st.data(), op=st.sampled_from(sorted(BINARY)))
def test_broadcasting_binary_ops(device, torch, data, op):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3))
    a, b = (data.draw(arrays(s)) for s in shapes.input_shapes)
    check(device, torch, BINARY[op], BINARY[op], a, b)


UNARY = {
    "exp": (lambda x: x.exp(), lambda x: x.exp(), FINITE),
    "log": (lambda x: x.log(), lambda x: x.log(), POSITIVE),
    "sqrt": (lambda x: x.sqrt(), lambda x: x.sqrt(), POSITIVE),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), FINITE),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: x.sigmoid(), FINITE),
    "relu": (lambda x: x.relu(), lambda x: x.relu(), FINITE),
    "abs": (lambda x: x.abs(), lambda x: x.abs(), FINITE),
    "gelu": (lambda x: x.gelu(), lambda x: __import__("torch").nn.functional.gelu(x), FINITE),
    "gelu_tanh": (lambda x: x.gelu("tanh"),
                  lambda x: __import__("torch").nn.functional.gelu(x, approximate="tanh"), FINITE),
    "pow": (lambda x: x ** 3, lambda x: x ** 3, FINITE),
    "pow_half": (lambda x: x ** 0.5, lambda x: x ** 0.5, POSITIVE),
}


@given(data=st.data(), name=st.sampled_from(sorted(UNARY)))
def test_unary_ops(device, torch, data, name):
    ours, theirs, elements = UNARY[name]
    check(device, torch, ours, theirs, data.draw(arrays(SHAPES, elements)))


@given(data=st.data())
def test_tensor_power(device, torch, data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    base = data.draw(arrays(shapes.input_shapes[0], st.floats(0, 4, width=64)))  # 0 included: its limits
    exponent = data.draw(arrays(shapes.input_shapes[1], st.floats(0, 3, width=64)))
    with np.errstate(divide="ignore", invalid="ignore"):
        check(device, torch, lambda a, b: a ** b, lambda a, b: a ** b, base, exponent)


# -- reductions --------------------------------------------------------------------------------

def axes_for(ndim):
    """None, one axis (maybe negative) or a tuple of distinct axes."""
    one = st.integers(-ndim, ndim - 1) if ndim else st.just(0)
    many = st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim).map(tuple)
    return st.one_of(st.none(), one, many)


REDUCTIONS = {
    "sum": (lambda x, a, k: x.sum(a, k), lambda x, a, k: x.sum(dim=a, keepdim=k) if a != () else x + 0),
    "mean": (lambda x, a, k: x.mean(a, k), lambda x, a, k: x.mean(dim=a, keepdim=k) if a != () else x + 0),
    "max": (lambda x, a, k: x.max(a, k), lambda x, a, k: x.amax(dim=() if a is None else a, keepdim=k)
            if a != () else x + 0),  # PyTorch reads dim=() as "every axis", NumPy as "none"
    "var": (lambda x, a, k: x.var(a, k), lambda x, a, k: x.var(dim=a, keepdim=k, correction=0)
            if a != () else (x - x) * 0),
}


@given(data=st.data(), name=st.sampled_from(sorted(REDUCTIONS)), keepdims=st.booleans())
def test_reductions_over_any_axes(device, torch, data, name, keepdims):
    x = data.draw(arrays(NONEMPTY if name == "max" else hnp.array_shapes(min_dims=1, max_dims=4, max_side=4)))
    axis = data.draw(axes_for(x.ndim))
    ours, theirs = REDUCTIONS[name]
    check(device, torch, lambda t: ours(t, axis, keepdims), lambda t: theirs(t, axis, keepdims), x)


# -- views ---------------------------------------------------------------------------------------

@st.composite
def view_chains(draw):
    """An array and a list of view steps (reshape, transpose, swapaxes, expand), each valid
    for the shape the previous steps leave."""
    x = draw(arrays(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)))
    shape, steps = x.shape, []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["reshape", "transpose", "swapaxes", "expand"]))
        if kind == "reshape":
            size = int(np.prod(shape))
            new = (draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0] or [1])),)
            new = (*new, -1) if size else (0,)
            shape = np.empty(shape).reshape(new).shape
            steps.append(("reshape", new))  # (arguments are spread: t.reshape(*new))
        elif kind == "transpose" and shape:
            perm = tuple(draw(st.permutations(range(len(shape)))))
            shape = tuple(shape[p] for p in perm)
            steps.append(("transpose", perm))
        elif kind == "swapaxes" and shape:
            a, b = draw(st.integers(-len(shape), len(shape) - 1)), draw(st.integers(-len(shape), len(shape) - 1))
            s = list(shape)
            s[a], s[b] = s[b], s[a]
            shape = tuple(s)
            steps.append(("swapaxes", (a, b)))
        elif kind == "expand":
            new = (draw(st.integers(1, 2)), *[draw(st.sampled_from([n, 2])) if n == 1 else n for n in shape])
            shape = new
            steps.append(("expand", new))
    return x, steps


@given(chain=view_chains())
def test_view_chains(device, torch, chain):
    x, steps = chain

    def run(t, names):
        for kind, arg in steps:
            t = getattr(t, names.get(kind, kind))(*arg)
        return t * 1.0

    check(device, torch, lambda t: run(t, {}), lambda t: run(t, {"transpose": "permute"}), x)


# -- indexing, against NumPy -------------------------------------------------------------------------

@st.composite
def indices(draw, shape):
    """An index for `shape`: ints (negative too), slices with any step, None, Ellipsis, and one
    advanced index (an int list, tuple or array with repeats, or a boolean mask)."""
    items, axis, used_ellipsis, used_advanced = [], 0, False, False
    while axis < len(shape) and draw(st.booleans()):
        n = shape[axis]
        kinds = ["slice", "none"] + (["int"] if n else []) + ([] if used_ellipsis else ["ellipsis"])
        kinds += [] if used_advanced else ["list", "tuple", "array", "mask"]
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
            items.append(slice(draw(bound), draw(bound), draw(st.one_of(st.none(), st.integers(-3, 3).filter(bool)))))
        elif kind == "none":
            items.append(None)
            continue
        elif kind == "ellipsis":
            items.append(Ellipsis)
            used_ellipsis = True
            axis = len(shape) - sum(1 for i in items if i is not None and i is not Ellipsis) + 1
            continue
        elif kind == "mask":
            items.append(draw(hnp.arrays(np.bool_, (n,))))
            used_advanced = True
        else:
            ids = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)) if n else []
            assume(ids)
            items.append({"list": list, "tuple": tuple, "array": np.array}[kind](ids))
            used_advanced = True
        axis += 1
    return items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)


@given(data=st.data())
def test_every_indexing_form_matches_numpy(device, data):
    x = data.draw(arrays(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)))
    index = data.draw(indices(x.shape))
    try:
        expected = x[index]
    except IndexError:
        assume(False)
    t = tx.Tensor(x, device=device, requires_grad=True)
    out = t[index]
    np.testing.assert_array_equal(out.numpy(), expected)
    g = np.random.default_rng(1).standard_normal(expected.shape)
    out.backward(tx.Tensor(g, device=device))
    scattered = np.zeros_like(x)
    np.add.at(scattered, index, g)  # each picked element's gradient back where it came from
    np.testing.assert_allclose(t.grad.numpy(), scattered, rtol=1e-12, atol=1e-12)


# -- matmul ------------------------------------------------------------------------------------------

@given(data=st.data())
def test_matmul_of_1d_batched_and_broadcast_operands(device, torch, data):
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    left = data.draw(st.sampled_from([(k,), (*batch.input_shapes[0], n, k)]))
    right = data.draw(st.sampled_from([(k,), (*batch.input_shapes[1], k, m)]))
    check(device, torch, lambda a, b: a @ b, lambda a, b: a @ b,
          data.draw(arrays(left)), data.draw(arrays(right)), atol=1e-8)


# -- fused ops -----------------------------------------------------------------------------------------

@given(data=st.data(), log=st.booleans())
def test_softmax_and_log_softmax_on_any_axis(device, torch, data, log):
    x = data.draw(arrays(NONEMPTY))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    ours = (lambda t: t.log_softmax(axis)) if log else (lambda t: t.softmax(axis))
    theirs = (lambda t: t.log_softmax(axis)) if log else (lambda t: t.softmax(axis))
    check(device, torch, ours, theirs, x)


@given(data=st.data())
def test_layer_norm(device, torch, data):
    x = data.draw(arrays(NONEMPTY))
    D = x.shape[-1]
    w, b = data.draw(arrays((D,))), data.draw(arrays((D,)))
    check(device, torch, lambda t, u, v: F.layer_norm(t, u, v),
          lambda t, u, v: torch.nn.functional.layer_norm(t, (D,), u, v), x, w, b, atol=1e-7)


@given(data=st.data(), smoothing=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       reduction=st.sampled_from(["mean", "sum", "none"]), ignore=st.booleans())
def test_cross_entropy_with_ignore_index_and_smoothing(device, torch, data, smoothing, reduction, ignore):
    lead = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=4))
    C = data.draw(st.integers(1, 5))
    logits = data.draw(arrays((*lead, C)))
    target = data.draw(hnp.arrays(np.int64, lead, elements=st.integers(0, C - 1)))
    ignore_index = None
    if ignore:
        ignore_index = -100
        target = np.where(data.draw(hnp.arrays(np.bool_, lead)), -100, target)
        assume((target != -100).any())  # all ignored: PyTorch's mean is 0/0
    moved = target if len(lead) == 1 else target  # PyTorch wants classes on axis 1: moved below
    torch_kwargs = dict(label_smoothing=smoothing, reduction=reduction, ignore_index=-100)

    def theirs(t):
        scores = t if t.ndim == 2 else t.movedim(-1, 1)
        return torch.nn.functional.cross_entropy(scores, torch.tensor(moved), **torch_kwargs)

    check(device, torch, lambda t: F.cross_entropy(t, tx.Tensor(target, device=device), ignore_index=ignore_index,
                                                   label_smoothing=smoothing, reduction=reduction), theirs, logits)


# -- selection and joining -------------------------------------------------------------------------

@given(data=st.data(), value=FINITE)
def test_masked_fill_and_where(device, torch, data, value):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    x_shape, y_shape, mask_shape = shapes.input_shapes
    x, y = data.draw(arrays(x_shape)), data.draw(arrays(y_shape))
    mask = data.draw(hnp.arrays(np.bool_, mask_shape))
    out_shape = np.broadcast_shapes(x_shape, mask_shape)
    assume(out_shape == x_shape)  # masked_fill keeps x's shape
    check(device, torch, lambda t: t.masked_fill(mask, value), lambda t: t.masked_fill(torch.tensor(mask), value), x)
    check(device, torch, lambda a, b: tx.where(mask, a, b),
          lambda a, b: torch.where(torch.tensor(mask), a, b), x, y)


@given(data=st.data(), stack=st.booleans())
def test_cat_and_stack(device, torch, data, stack):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3))
    ndim = len(shape) + stack
    axis = data.draw(st.integers(-ndim, ndim - 1))
    count = data.draw(st.integers(1, 3))
    if stack:
        parts = [data.draw(arrays(shape)) for _ in range(count)]
    else:
        parts = [data.draw(arrays(shape[:axis % ndim] + (data.draw(st.integers(0, 3)),) + shape[axis % ndim + 1:]))
                 for _ in range(count)]
    ours = (lambda *ts: tx.stack(ts, axis)) if stack else (lambda *ts: tx.cat(ts, axis))
    theirs = (lambda *ts: torch.stack(ts, axis)) if stack else (lambda *ts: torch.cat(ts, axis))
    check(device, torch, ours, theirs, *parts)


# -- attention --------------------------------------------------------------------------------------

@given(data=st.data(), causal=st.booleans())
def test_attention_with_masks(device, torch, data, causal):
    batch = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=2))
    t_q, t_k, d, d_v = (data.draw(st.integers(1, 4)) for _ in range(4))
    if causal:
        t_k = max(t_k, t_q)  # every query then sees at least one key
    q, k, v = (data.draw(arrays((*batch, *s))) for s in ((t_q, d), (t_k, d), (t_k, d_v)))
    mask = data.draw(hnp.arrays(np.bool_, (t_q, t_k)))
    mask[:, 0] = True  # at least one key per query (PyTorch gives NaN for a fully blocked row)
    keep = mask & np.tri(t_q, t_k, k=t_k - t_q, dtype=bool) if causal else mask
    assume(keep.any(axis=-1).all())
    check(device, torch, lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mask=mask, causal=causal),
          lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c, attn_mask=torch.tensor(keep)),
          q, k, v, atol=1e-8)
