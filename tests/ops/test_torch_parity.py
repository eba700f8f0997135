"""PyTorch as the oracle: forward values and gradients (for one random upstream
gradient) of every op PyTorch also has, on every device, in float64 (tight: the math
is the same) and in float32 (what users train with; the tolerance allows for the two
libraries rounding in different orders).

Skipped where torch is not installed. Conventions that differ are translated here:
our `var` is NumPy's (ddof=0, torch's correction=0); our `linear` weight is
(in, out), torch's (out, in); our cross-entropy has classes on the last axis.
"""
import functools

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor
from tinygrad_tx.ops import REDUCTIONS

TOLERANCES = {"float64": dict(rtol=1e-9, atol=1e-10), "float32": dict(rtol=2e-4, atol=2e-5)}


@pytest.fixture(params=list(TOLERANCES))
def dtype(request) -> str:
    return request.param


def compare(torch, device, dtype, ours, theirs, *arrays, seed=0, tol=None):
    """Run `ours` on Tensors and `theirs` on torch tensors made from `arrays` (floating
    arrays are cast to `dtype` and require grad, integer and boolean ones are passed as
    constants), then compare the outputs and, after backpropagating one random upstream
    gradient, every gradient. `tol` overrides the dtype's tolerance for an ill-conditioned case."""
    tol = tol or TOLERANCES[dtype]
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    xs = [Tensor(a, device=device, requires_grad=a.dtype.kind == "f") for a in arrays]
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out, ref = ours(*xs), theirs(*ts)
    assert out.shape == tuple(ref.shape) and out.dtype == dtype
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), **tol, err_msg="forward")
    u = np.random.default_rng(seed + 99).standard_normal(tuple(ref.shape)).astype(dtype)
    out.backward(Tensor(u, device=device))
    ref.backward(torch.tensor(u))
    for i, (x, t) in enumerate(zip(xs, ts)):
        if t.requires_grad:
            assert x.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), **tol, err_msg=f"gradient of input {i}")


def n(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# -- arithmetic -------------------------------------------------------------------------

ARITH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
}


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1, 4), (2, 4)), ((4,), (2, 3, 1))], ids=str)
def test_arithmetic_broadcasting(torch, device, dtype, op, shapes):
    compare(torch, device, dtype, ARITH[op], ARITH[op], n(*shapes[0]), n(*shapes[1], seed=1) + 3)


@pytest.mark.parametrize("fn", [lambda a: 2.0 - a, lambda a: 3.0 / a, lambda a: a * 0.5 + 1.0,
                                lambda a: -a, lambda a: (a - 1.0) / 4.0],
                         ids=["rsub", "rdiv", "mul_add", "neg", "sub_div"])
def test_arithmetic_with_numbers(torch, device, dtype, fn):
    compare(torch, device, dtype, fn, fn, n(3, 4) + 3)


@pytest.mark.parametrize("fn", [lambda a, b: a ** b, lambda a, b: a ** 3 * b, lambda a, b: a ** -0.5 + b,
                                lambda a, b: 2.0 ** a + b])
def test_pow(torch, device, dtype, fn):
    compare(torch, device, dtype, fn, fn, np.abs(n(3, 4)) + 0.5, n(3, 4, seed=1))


# -- elementwise ------------------------------------------------------------------------

UNARY = {
    "exp": (lambda x: x.exp(), lambda t: t.exp()),
    "log": (lambda x: x.abs().log(), lambda t: t.abs().log()),
    "sqrt": (lambda x: x.abs().sqrt(), lambda t: t.abs().sqrt()),
    "tanh": (lambda x: x.tanh(), lambda t: t.tanh()),
    "sigmoid": (lambda x: x.sigmoid(), lambda t: t.sigmoid()),
    "relu": (lambda x: x.relu(), lambda t: t.relu()),
    "abs": (lambda x: x.abs(), lambda t: t.abs()),
    "gelu": (lambda x: x.gelu(), None),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), None),
}


@pytest.mark.parametrize("op", UNARY)
def test_unary(torch, device, dtype, op):
    ours, theirs = UNARY[op]
    if op.startswith("gelu"):
        approximate = "tanh" if op == "gelu_tanh" else "none"
        theirs = lambda t: torch.nn.functional.gelu(t, approximate=approximate)  # noqa: E731
    x = n(4, 5) * 3
    x[0, :3] = [30.0, -30.0, 1e-3]  # saturated tails and a point near 0
    compare(torch, device, dtype, ours, theirs, x)


def test_sigmoid_and_tanh_saturate_without_nan(torch, device, dtype):
    x = np.array([-800.0, -40.0, 0.0, 40.0, 800.0])
    compare(torch, device, dtype, lambda x: x.sigmoid() + x.tanh(), lambda t: t.sigmoid() + t.tanh(), x)


# -- reductions -------------------------------------------------------------------------

AXES = [None, 0, -1, (0, 2), (1,)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "var"])
def test_reductions(torch, device, dtype, op, axis, keepdims):
    def theirs(t):
        dim = tuple(range(t.ndim)) if axis is None else axis
        if op == "max":
            return t.amax(dim=dim, keepdim=keepdims)  # amax, like ours, splits the gradient between ties
        if op == "var":
            return t.var(dim=dim, correction=0, keepdim=keepdims)
        return getattr(t, op)(dim=dim, keepdim=keepdims)

    compare(torch, device, dtype, lambda x: getattr(x, op)(axis=axis, keepdims=keepdims), theirs, n(2, 3, 4))


def test_max_splits_the_gradient_between_ties(torch, device, dtype):
    x = np.array([[1.0, 5.0, 5.0, 5.0], [2.0, 2.0, -1.0, 0.0], [7.0, 7.0, 7.0, 7.0]])
    compare(torch, device, dtype, lambda x: x.max(axis=1), lambda t: t.amax(dim=1), x)
    compare(torch, device, dtype, lambda x: x.max(), lambda t: t.amax(), x)


def torch_max(torch, t, axis=None, keepdims=False):
    """PyTorch's `max()`, taken slice by slice over `axis`: with a NaN in a slice its gradient goes to
    the NaN positions, split evenly, as between ties. (`amax`'s gradient is NaN on the whole slice,
    and `max(dim)` picks one position even between ties.)"""
    axes = sorted(a % t.ndim for a in (range(t.ndim) if axis is None else [axis] if isinstance(axis, int) else axis))
    kept = [a for a in range(t.ndim) if a not in axes]
    slices = t.permute(*kept, *axes).reshape(-1, int(np.prod([t.shape[a] for a in axes])))  # (slices, reduced)
    out = torch.stack([s.max() for s in slices]).reshape([t.shape[a] for a in kept])
    return out.reshape([1 if a in axes else size for a, size in enumerate(t.shape)]) if keepdims else out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy notes the NaN it compares
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (-1, True), ((0, 2), False)], ids=str)
def test_max_sends_the_gradient_to_the_nan(torch, device, dtype, axis, keepdims):
    """With a NaN present the gradient was NaN everywhere (x == max matched
    nothing, and 1/0 ties); PyTorch's max() sends it to the NaN, split evenly between NaNs."""
    x = n(3, 4, 5)
    x[0, 1, 2] = np.nan  # one NaN
    x[1, 2, 0] = x[1, 3, 4] = np.nan  # two in one slice (or two slices, by axis)
    x[2, :, 1] = 9.0  # ties among the finite ones
    compare(torch, device, dtype, lambda x: x.max(axis=axis, keepdims=keepdims),
            lambda t: torch_max(torch, t, axis, keepdims), x)


# -- shapes -----------------------------------------------------------------------------

SHAPE_OPS = {
    "reshape": (lambda x: x.reshape(4, -1), lambda t: t.reshape(4, -1)),
    "reshape_tuple": (lambda x: x.reshape((3, 8)), lambda t: t.reshape((3, 8))),
    "transpose": (lambda x: x.transpose(2, 0, 1), lambda t: t.permute(2, 0, 1)),
    "transpose_negative": (lambda x: x.transpose(-1, 0, -2), lambda t: t.permute(-1, 0, -2)),
    "T": (lambda x: x.T, lambda t: t.permute(2, 1, 0)),
    "swapaxes": (lambda x: x.swapaxes(0, -1), lambda t: t.swapaxes(0, -1)),
    "expand": (lambda x: x[:, :1].expand(5, 2, 3, 4), lambda t: t[:, :1].expand(5, 2, 3, 4)),
    "chain": (lambda x: x.T.reshape(6, 4).swapaxes(0, 1) * 2, lambda t: t.permute(2, 1, 0).reshape(6, 4).T * 2),
}


@pytest.mark.parametrize("op", SHAPE_OPS)
def test_shape_ops(torch, device, dtype, op):
    compare(torch, device, dtype, *SHAPE_OPS[op], n(2, 3, 4))


INDEXES = {
    "int": 1, "negative": (-1, 2), "slices": (slice(1, None), slice(None, None, 2)),
    "ellipsis_none": (Ellipsis, None, 1), "repeated": [1, 1, 1, 2], "ids_and_slice": (slice(None), [3, 0, 3]),
    "two_arrays": ([0, 2, 2], [1, 1, 1]), "bool_rows": np.array([True, False, True]),
    "bool_mask": np.arange(12).reshape(3, 4) % 3 == 0,
}


@pytest.mark.parametrize("name", INDEXES)
def test_indexing(torch, device, dtype, name):
    index = INDEXES[name]

    def torch_index(i):
        return torch.tensor(i) if isinstance(i, (list, np.ndarray)) else i

    theirs_index = tuple(map(torch_index, index)) if isinstance(index, tuple) else torch_index(index)
    compare(torch, device, dtype, lambda x: x[index], lambda t: t[theirs_index], n(3, 4))


def test_cat_stack_where(torch, device, dtype):
    a, b, c = n(2, 3), n(4, 3, seed=1), n(2, 3, seed=2)
    compare(torch, device, dtype, lambda a, b: tx.cat([a, b, a]), lambda a, b: torch.cat([a, b, a]), a, b)
    compare(torch, device, dtype, lambda a, b: tx.cat([a, b], axis=1), lambda a, b: torch.cat([a, b], dim=1), a, b[:2])
    compare(torch, device, dtype, lambda a, b: tx.cat([a, b.T], axis=1), lambda a, b: torch.cat([a, b.T], dim=1),
            a, n(4, 2, seed=4))
    compare(torch, device, dtype, lambda a, c: tx.stack([a, c], axis=-1), lambda a, c: torch.stack([a, c], dim=-1), a, c)
    cond = n(2, 3, seed=3) > 0
    compare(torch, device, dtype, lambda a, c, m: tx.where(m, a, c), lambda a, c, m: torch.where(m, a, c), a, c, cond)
    compare(torch, device, dtype, lambda a, c, m: tx.where(m, a, c[0]), lambda a, c, m: torch.where(m, a, c[0]),
            a, c, cond)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                    ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((4,), (4, 3)), ((2, 3, 4), (4,)),
                                    ((4,), (4,)), ((4,), (2, 4, 3))], ids=str)
def test_matmul(torch, device, dtype, shapes):
    compare(torch, device, dtype, lambda a, b: a @ b, lambda a, b: a @ b, n(*shapes[0]), n(*shapes[1], seed=1))


def test_linear(torch, device, dtype):
    x, w, b = n(2, 3, 4), n(4, 5, seed=1), n(5, seed=2)  # our weight is (in, out)
    compare(torch, device, dtype, F.linear, lambda x, w, b: torch.nn.functional.linear(x, w.T, b), x, w, b)
    compare(torch, device, dtype, F.linear, lambda x, w: torch.nn.functional.linear(x, w.T), x, w)


# -- fused ------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(torch, device, dtype, axis):
    x = n(3, 4, 5) * 4
    compare(torch, device, dtype, lambda x: x.softmax(axis), lambda t: t.softmax(axis), x)
    compare(torch, device, dtype, lambda x: F.log_softmax(x, axis=axis), lambda t: t.log_softmax(axis), x)


def test_layer_norm(torch, device, dtype):
    x, w, b = n(2, 3, 6) * 3 + 1, n(6, seed=1), n(6, seed=2)
    x[0, 0] += 2000.0  # a row with a large mean
    # in float32 the 2000-mean row's own rounding (ulp 1.2e-4) bounds both libraries: both are
    # about 1e-4 from the float64 result, in different directions
    loose = dict(rtol=2e-4, atol=3e-4) if dtype == "float32" else None
    compare(torch, device, dtype, F.layer_norm, lambda x, w, b: torch.nn.functional.layer_norm(x, (6,), w, b),
            x, w, b, tol=loose)
    compare(torch, device, dtype, lambda x: F.layer_norm(x, eps=0.1),
            lambda x: torch.nn.functional.layer_norm(x, (6,), eps=0.1), x, tol=loose)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index,smoothing", [(None, 0.0), (None, 0.1), (0, 0.0), (0, 0.25)], ids=str)
def test_cross_entropy(torch, device, dtype, reduction, ignore_index, smoothing):
    logits = n(2, 4, 5) * 2
    target = np.array([[1, 0, 4, 3], [0, 2, 2, 0]])  # classes on the last axis; torch wants (N, C)

    def ours(x, t):
        return F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=smoothing, reduction=reduction)

    def theirs(x, t):
        loss = torch.nn.functional.cross_entropy(
            x.reshape(-1, 5), t.reshape(-1), ignore_index=-100 if ignore_index is None else ignore_index,
            label_smoothing=smoothing, reduction=reduction)
        return loss.reshape(2, 4) if reduction == "none" else loss

    compare(torch, device, dtype, ours, theirs, logits, target)


@pytest.mark.parametrize("padding_idx", [None, 0, 2])
def test_embedding(torch, device, dtype, padding_idx):
    ids = np.array([[1, 0, 2, 2], [2, 2, 3, 0]])
    compare(torch, device, dtype, lambda w, i: F.embedding(i, w, padding_idx=padding_idx),
            lambda w, i: torch.nn.functional.embedding(i, w, padding_idx=padding_idx), n(4, 3), ids)


@pytest.mark.parametrize("padding_idx", range(-4, 4))
def test_embedding_padding_idx_counted_either_way_eagerly_under_create_graph_and_second_order(torch, device,
                                                                                              padding_idx):
    """Every row named either way (2 or -2 of four), as PyTorch: the padding row's uses send no
    gradient, in ordinary backward, under create_graph, and in the second derivative. Under
    create_graph a negative padding_idx was compared with the ids as given, so -1 sent the last
    row a gradient (2, 2, 2 for w² at ones) that eager execution and PyTorch zero."""
    ids, w0, v = np.array([[1, 0, 3, 3], [2, 3, 3, 0]]), n(4, 3), n(4, 3, seed=1)
    w, tw = Tensor(w0, device=device, requires_grad=True), torch.tensor(w0, requires_grad=True)
    loss = (F.embedding(ids, w, padding_idx=padding_idx) ** 3).sum()
    (expected,) = torch.autograd.grad((torch.nn.functional.embedding(torch.tensor(ids), tw, padding_idx=padding_idx)
                                       ** 3).sum(), [tw], create_graph=True)
    for create_graph in (False, True):
        (g,) = tx.grad(loss, [w], retain_graph=True, create_graph=create_graph)
        np.testing.assert_allclose(g.numpy(), expected.detach().numpy(), rtol=1e-12)
    (second,) = tx.grad((g * Tensor(v, device=device)).sum(), [w])
    (expected_second,) = torch.autograd.grad((expected * torch.tensor(v)).sum(), [tw])
    np.testing.assert_allclose(second.numpy(), expected_second.numpy(), rtol=1e-12)
    assert not g.numpy()[padding_idx % 4].any() and not second.numpy()[padding_idx % 4].any()


def test_masked_fill(torch, device, dtype):
    mask = n(1, 4, seed=5) > 0
    compare(torch, device, dtype, lambda x, m: x.masked_fill(m, -3.5), lambda t, m: t.masked_fill(m, -3.5), n(3, 4), mask)


@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True), (True, True)])
def test_scaled_dot_product_attention(torch, device, dtype, masked, causal):
    B, H, T, D = 2, 2, 5, 4
    q, k, v = n(B, H, T, D), n(B, H, T, D, seed=1), n(B, H, T, 3, seed=2)
    keep = np.ones((B, 1, 1, T), dtype=bool)
    keep[0, ..., 3:] = False  # padding keys; no row loses every key, where torch would give NaN

    def ours(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, mask=Tensor(keep, device=device) if masked else None,
                                              causal=causal)

    def theirs(q, k, v):
        mask = torch.tensor(keep) if masked else None
        if masked and causal:  # torch takes a mask or is_causal, not both
            mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

    compare(torch, device, dtype, ours, theirs, q, k, v)


def test_cross_attention_with_different_lengths(torch, device, dtype):
    q, k, v = n(2, 3, 4), n(2, 6, 4, seed=1), n(2, 6, 2, seed=2)
    keep = np.array([True, True, False, True, False, True])
    compare(torch, device, dtype, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask=keep),
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(keep)),
            q, k, v)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy notes the overflow of q·k
@pytest.mark.parametrize("causal", [False, True])
def test_attention_never_weights_a_blocked_key(torch, device, dtype, causal):
    """Blocked scores were the dtype's most negative finite value, so a row whose
    kept scores overflowed to -inf (q = 1e20, k = -1e20 in float32) gave the blocked key all the
    weight. A blocked key gets weight 0 whatever the scores; a row whose kept scores are all -inf is
    all zero, with zero gradients, as in PyTorch, and one kept finite score takes all the weight."""
    big = 1e20 if dtype == "float32" else 1e200  # q·k overflows to -inf in both
    q = np.array([[big], [big], [1.0], [big]])  # (Tq, 1)
    k = np.array([[-big], [-big], [0.5], [2.0]])  # (Tk, 1): keys 0, 1 overflow against a big query
    v = n(4, 2)
    keep = np.array([[True, True, False, False],  # kept scores all -inf, blocked ones finite
                     [True, False, True, False],  # one kept score -inf, one finite
                     [True, True, True, False],
                     [False, True, False, True]])
    ours = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask=keep, causal=causal)  # noqa: E731
    mask = torch.tensor(keep & np.tri(4, dtype=bool) if causal else keep)
    theirs = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    compare(torch, device, dtype, ours, theirs, q, k, v)
    _, weights = F.scaled_dot_product_attention(*(Tensor(a.astype(dtype), device=device) for a in (q, k, v)),
                                                mask=keep, causal=causal, return_weights=True)
    assert np.all(weights.numpy()[~mask.numpy()] == 0)
    assert np.all(weights.numpy()[0] == 0)  # no finite kept score: no weight anywhere


# -- edges: NaN, ±0, ±inf and the far tails --------------------------------------------------

EDGES = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-30, -1e-30, 90.0, -90.0, 1e30, -1e30])
EDGE_OPS = {
    **{name: fns for name, fns in UNARY.items() if not name.startswith("gelu")},
    "log": (lambda x: x.log(), lambda t: t.log()),
    "sqrt": (lambda x: x.sqrt(), lambda t: t.sqrt()),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), None),  # torch's function: in the test
    "pow_half": (lambda x: x ** 0.5, lambda t: t ** 0.5),  # sqrt's gradient: -inf at -0.0
    "pow_1.5": (lambda x: x ** 1.5, lambda t: t ** 1.5),
    "pow_2": (lambda x: x ** 2, lambda t: t ** 2),
    "pow_-1": (lambda x: x ** -1, lambda t: t ** -1),
    "pow_0": (lambda x: x ** 0, lambda t: t ** 0),
    "rdiv": (lambda x: 1.0 / x, lambda t: 1.0 / t),
}
# Not matched, on purpose: x ** -0.5 at -0.0 and -inf is IEEE's pow (+inf, 0), where PyTorch's rsqrt
# gives -inf and NaN; exact gelu at ±inf is NaN or inf depending on PyTorch's code path.


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy says so when it makes a NaN or an inf
@pytest.mark.parametrize("op", EDGE_OPS)
def test_elementwise_edges_match_torch(torch, device, dtype, op):
    """relu passes a NaN's gradient on, abs' gradient at NaN is 0, (x ** 0.5)' at -0.0 is -inf..."""
    ours, theirs = EDGE_OPS[op]
    theirs = theirs or (lambda t: torch.nn.functional.gelu(t, approximate="tanh"))
    compare(torch, device, dtype, ours, theirs, EDGES)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "max", "sum", "mean"])
def test_reduction_edges_match_torch(torch, device, dtype, op):
    """Rows with a NaN, a +inf, a -inf, only -inf, a huge and a tiny value."""
    rows = np.array([[np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0], [-np.inf, 1.0, 2.0], [-np.inf] * 3,
                     [1e30, -1e30, 0.0], [1e-30, -0.0, 0.0]])
    theirs = {"softmax": lambda t: t.softmax(-1), "log_softmax": lambda t: t.log_softmax(-1),
              "max": lambda t: torch_max(torch, t, -1), "sum": lambda t: t.sum(-1), "mean": lambda t: t.mean(-1)}[op]
    compare(torch, device, dtype, lambda x: getattr(x, op)(axis=-1), theirs, rows)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy notes the inf, NaN it makes
def test_sigmoid_is_accurate_in_the_tails(torch, device, dtype):
    """-log σ(x) is finite until σ itself underflows (at -800 in both libraries). The tanh form
    made σ exactly 0 below -17 in float32: inf and a NaN gradient where PyTorch gives 50 and -1."""
    x = np.array([-800.0, -50.0, -20.0, -1.0, 0.0, 1.0, 20.0, 50.0])
    compare(torch, device, dtype, lambda x: -x.sigmoid().log(), lambda t: -t.sigmoid().log(), x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy notes the inf, NaN it makes
def test_cross_entropy_with_every_target_ignored_is_nan(torch, device, dtype):
    """The mean over no targets is 0/0 = NaN, with zero gradients, as in PyTorch (0 would pass
    for a perfect prediction)."""
    target = np.zeros((2, 3), dtype=np.int64)
    compare(torch, device, dtype, lambda x, t: F.cross_entropy(x, t, ignore_index=0),
            lambda x, t: torch.nn.functional.cross_entropy(x.reshape(-1, 4), t.reshape(-1), ignore_index=0),
            n(2, 3, 4), target)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy notes the inf, NaN it makes
def test_layer_norm_of_a_row_whose_variance_overflows_is_nan(torch, device, dtype):
    """PyTorch gives NaN for [1e308, -1e308] but zeros for [9e307, -9e307] (which
    path overflows differs); we give NaN whenever the variance overflows: the true answer, [1, -1],
    is out of reach, and a row of zeros would pass for a constant row."""
    rows = np.array([[1e308, -1e308], [1.0, 2.0]]) if dtype == "float64" else np.array([[3e38, -3e38], [1.0, 2.0]])
    compare(torch, device, dtype, F.layer_norm, lambda t: torch.nn.functional.layer_norm(t, (2,)), rows)
    half_max = Tensor(np.array([np.finfo(dtype).max / 2, -np.finfo(dtype).max / 2], dtype=dtype), device=device)
    assert np.isnan(F.layer_norm(half_max).numpy()).all()


# -- float16 reductions accumulate in float32, as PyTorch's -----------------------------------
# The oracle is PyTorch in float64 on the same float16 values; ours may be off by the rounding
# of its float16 result and inputs (about 1e-3 relative).

HALF = dict(rtol=4e-3, atol=2e-3)


def compare_half(torch, device, ours, theirs, *arrays, tol=HALF):
    xs = [Tensor(a.astype(np.float16), device=device, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a.astype(np.float16).astype(np.float64), requires_grad=True) for a in arrays]
    out, ref = ours(*xs), theirs(*ts)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref.detach().numpy(), **tol, err_msg="forward")
    u = np.random.default_rng(7).uniform(0.5, 1.5, tuple(ref.shape)).astype(np.float16)
    out.backward(Tensor(u, device=device))
    ref.backward(torch.tensor(u.astype(np.float64)))
    for i, (x, t) in enumerate(zip(xs, ts)):
        assert x.grad.dtype == np.float16
        np.testing.assert_allclose(x.grad.numpy().astype(np.float64), t.grad.numpy(), **tol,
                                   err_msg=f"gradient of input {i}")


def test_float16_mean_and_var_past_65504(torch, device):
    """A float16 mean of 10,000 tens is 10 (its float16 sum is inf); squares above 256 overflow."""
    tens = np.full(10_000, 10.0)
    compare_half(torch, device, lambda x: x.mean(), lambda t: t.mean(), tens)
    spread = np.zeros(100)
    spread[:2] = [300.0, -300.0]  # variance 1800, squares 90,000
    compare_half(torch, device, lambda x: x.var(), lambda t: t.var(correction=0), spread, tol=dict(rtol=4e-3, atol=0))
    compare_half(torch, device, lambda x: x.reshape(100, 100).mean(axis=0), lambda t: t.reshape(100, 100).mean(0), tens)


def test_float16_softmax_and_cross_entropy_over_70000_classes(torch, device):
    """Σ exp over 70,000 near-equal logits passes 65504: the rows were 0 or NaN in float16."""
    logits = n(2, 70_000) * 0.01
    small = dict(rtol=4e-3, atol=1e-7)  # the probabilities are about 1.4e-5
    compare_half(torch, device, lambda x: x.softmax(), lambda t: t.softmax(-1), logits, tol=small)
    compare_half(torch, device, lambda x: x.log_softmax(), lambda t: t.log_softmax(-1), logits)
    target = np.array([3, 69_999])
    compare_half(torch, device, lambda x: F.cross_entropy(x, target, label_smoothing=0.1),
                 lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(target), label_smoothing=0.1),
                 logits, tol=small)


def test_float16_layer_norm_and_attention(torch, device):
    """A layer norm of values near 30: the float16 mean alone was 0.008 off (ten times PyTorch's error)."""
    x, w, b = n(4, 512) + 30, n(512, seed=1), n(512, seed=2)
    tight = dict(rtol=2e-3, atol=1e-3)  # a float16 result's own rounding; float16 arithmetic was 3-10× off
    compare_half(torch, device, F.layer_norm, lambda x, w, b: torch.nn.functional.layer_norm(x, (512,), w, b), x, w, b,
                 tol=dict(rtol=2e-3, atol=2e-3))
    q, k, v = n(2, 2, 6, 8) * 3, n(2, 2, 6, 8, seed=1) * 3, n(2, 2, 6, 8, seed=2)
    compare_half(torch, device, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True),
                 lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
                 tol=tight)


def test_float16_gelu_far_out(torch, device):
    """The tanh form's gradient multiplies 1 - tanh² (0 far out) by 1 + 0.134·x² (inf in float16
    above 256): NaN, where PyTorch, in float32, gives 0 and 1."""
    x = np.array([-60000.0, -300.0, -3.0, 0.5, 300.0, 60000.0])
    compare_half(torch, device, lambda x: F.gelu(x, approximate="tanh"),
                 lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x)
    compare_half(torch, device, lambda x: x.gelu(), lambda t: torch.nn.functional.gelu(t), x)


def test_float16_sums_along_a_strided_axis(torch, device):
    """NumPy adds float16 along a strided axis in float16: 10,000 ones over axis 0 made 2048,
    and so did the gradient of a bias broadcast over 10,000 rows."""
    ones = np.ones((10_000, 3))
    compare_half(torch, device, lambda x: x.sum(axis=0), lambda t: t.sum(0), ones)
    compare_half(torch, device, lambda x, b: x + b, lambda x, b: x + b, ones, np.zeros(3))


# -- a zero-size axis anywhere -------------------------------------------------------------------
# Fused ops and reductions on an empty axis give empty results (or PyTorch's value: the sum of
# nothing is 0, its mean NaN) and gradients of the inputs' shapes, as PyTorch; first and second
# derivatives alike. They raised: NumPy's max has no value for an empty axis, and
# reshape(-1, 0) cannot tell what -1 is.

def attention_pair(mask=None, causal=False):
    def ours(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)

    def theirs(torch, q, k, v):
        keep = None if mask is None else torch.tensor(mask)
        if causal:
            tri = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
            keep = tri if keep is None else keep & tri
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return ours, theirs


def zero_size_cases():
    """name -> (ours, theirs(torch, *tensors), arrays): every fused op and reduction, with a
    zero-size axis in each position."""
    cases = {}
    for shape in [(2, 0), (0, 3), (0, 0), (2, 0, 3), (0,)]:
        for axis in range(len(shape)):
            for op in ("softmax", "log_softmax", "sum", "mean", "var"):
                theirs = (lambda torch, t, axis=axis: t.var(axis, correction=0)) if op == "var" else \
                    (lambda torch, t, op=op, axis=axis: getattr(t, op)(axis))
                cases[f"{op}{shape}axis{axis}"] = (lambda x, op=op, axis=axis: getattr(x, op)(axis=axis), theirs,
                                                   [n(*shape)])
            if shape[axis]:  # the max of an empty axis is an error: see the next test
                cases[f"max{shape}axis{axis}"] = (lambda x, axis=axis: x.max(axis=axis),
                                                  lambda torch, t, axis=axis: t.amax(axis), [n(*shape)])
        cases[f"layer_norm{shape}"] = (F.layer_norm, lambda torch, x, w, b: torch.nn.functional.layer_norm(
            x, x.shape[-1:], w, b), [n(*shape), n(shape[-1]), n(shape[-1])])
        cases[f"gelu{shape}"] = (lambda x: x.gelu(), lambda torch, x: torch.nn.functional.gelu(x), [n(*shape)])
    for B, Tq, Tk, d, dv in [(2, 0, 4, 3, 2), (2, 4, 0, 3, 2), (2, 0, 0, 3, 2), (2, 3, 4, 0, 2), (2, 3, 4, 3, 0),
                             (0, 3, 4, 3, 2)]:
        qkv = [n(B, Tq, d), n(B, Tk, d, seed=1), n(B, Tk, dv, seed=2)]
        for how, pair in [("", attention_pair()), ("_causal", attention_pair(causal=True)),
                          ("_mask", attention_pair(mask=n(Tq, Tk, seed=3) > 0))]:
            cases[f"attention{how}(B{B},Tq{Tq},Tk{Tk},d{d},dv{dv})"] = (*pair, qkv)
    for reduction in REDUCTIONS:
        for ignore, eps in [(-100, 0.0), (0, 0.2)]:
            cases[f"cross_entropy_N0_{reduction}_ignore{ignore}_smoothing{eps}"] = (
                lambda x, t, r=reduction, i=ignore, e=eps: F.cross_entropy(x, t, i, e, r),
                lambda torch, x, t, r=reduction, i=ignore, e=eps: torch.nn.functional.cross_entropy(
                    x.reshape(-1, 5), t.reshape(-1), ignore_index=i, label_smoothing=e, reduction=r
                ).reshape(t.shape if r == "none" else ()),
                [n(2, 0, 5), np.zeros((2, 0), dtype=np.int64)])
    for padding_idx in (None, 1):
        for what, (w, ids) in {"no_ids": ((4, 3), np.zeros((2, 0), dtype=np.int64)),
                               "D0": ((4, 0), np.array([[1, 2, 1]]))}.items():
            cases[f"embedding_{what}_padding{padding_idx}"] = (
                lambda w, i, p=padding_idx: F.embedding(i, w, p),
                lambda torch, w, i, p=padding_idx: torch.nn.functional.embedding(i, w, p), [n(*w), ids])
    for x, w in [((0, 3), (3, 2)), ((4, 0), (0, 2)), ((4, 3), (3, 0)), ((2, 4, 0), (0, 2))]:
        cases[f"linear{x}{w}"] = (F.linear, lambda torch, x, w, b: x @ w + b, [n(*x), n(*w), n(w[1])])
        cases[f"matmul{x}{w}"] = (lambda x, w: x @ w, lambda torch, x, w: x @ w, [n(*x), n(*w)])
    return cases


ZERO_SIZE = zero_size_cases()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the mean of nothing: NumPy notes its 0/0
@pytest.mark.parametrize("case", ZERO_SIZE)
def test_a_zero_size_axis_gives_empty_results_and_gradients(torch, device, dtype, case):
    """Softmax, log_softmax and layer_norm on a (2, 0) input, and attention with T=0, raised; they
    give empty results and empty gradients, as PyTorch."""
    ours, theirs, arrays = ZERO_SIZE[case]
    compare(torch, device, dtype, ours, functools.partial(theirs, torch), *arrays)
    xs = [Tensor(a.astype(dtype) if a.dtype.kind == "f" else a, device=device, requires_grad=a.dtype.kind == "f")
          for a in arrays]
    floats = [x for x in xs if x.requires_grad]
    out = ours(*xs)
    firsts = tx.grad((out * out).sum(), floats, create_graph=True)  # second derivatives run on empties too
    seconds = tx.grad(sum(((g * g).sum() for g in firsts if g is not None), start=0.0) + out.sum(), floats)
    assert [g.shape for g in seconds] == [x.shape for x in floats]


def test_max_of_an_empty_axis_is_an_error(torch, device):
    """The maximum of no numbers does not exist; PyTorch raises too (its amax and max alike)."""
    x = Tensor(np.zeros((2, 0, 3)), device=device)
    for axis in (1, None, (0, 1)):
        with pytest.raises(ValueError, match="empty"):
            x.max(axis=axis)
    with pytest.raises((IndexError, RuntimeError)):
        torch.zeros(2, 0, 3).amax(1)
    assert x.max(axis=2).shape == (2, 0)  # an empty result over a non-empty axis is fine
