"""Every registered op against central finite differences, on every device.

CASES maps each op in `tx.REGISTRY` to its checks; `test_every_registered_op_has_a_case`
fails when an op is added without one, and each case must really run its op (the
graph it builds is searched for it). `tx.gradcheck` backpropagates a random
upstream gradient (never a plain sum) in float64; the tolerances here are tight.
Every op is also checked to second order (`tx.gradgradcheck`): the fused ops build their
gradient from differentiable ops under create_graph, so it can be differentiated again.
Each op's docstring is checked in test_docstrings.py, gradcheck itself in
tests/engine/test_gradcheck.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor
from tinygrad_tx.ops import AttentionWeights, Erf, ScatterAdd

from ..helpers import TIGHT


class Draw:
    """Random inputs for one case (a fresh, fixed seed per case, so every run sees the same numbers)."""

    def __init__(self):
        self.rng = np.random.default_rng(1234)

    def n(self, *shape):  # standard normal
        return self.rng.standard_normal(shape)

    def pos(self, *shape):  # away from 0, for log, sqrt, x ** y
        return self.rng.uniform(0.5, 2.0, shape)

    def away(self, *shape):  # random sign, |x| >= 0.1: clear of relu's and abs's kink
        return self.rng.uniform(0.1, 2.0, shape) * self.rng.choice([-1.0, 1.0], shape)

    def distinct(self, *shape):  # no two equal values: max has a unique winner
        return self.rng.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) * 0.3 \
            + self.rng.uniform(-0.01, 0.01, shape)


class Const:
    """A floating input that is passed as a Tensor but not differentiated."""

    def __init__(self, array):
        self.array = array


@dataclass
class Case:
    fn: Callable
    inputs: Callable[[Draw], list]  # float arrays become Tensors with requires_grad=True
    tol: dict = field(default_factory=lambda: dict(TIGHT))
    twice: bool = True  # include in the second-derivative check (for twice-differentiable ops)


def seeded_dropout(p):
    def fn(x):
        tx.manual_seed(7)  # every evaluation draws the same mask
        return F.dropout(x, p)
    return fn


def seeded_attention(mask=None, causal=False, dropout_p=0.0):
    def fn(q, k, v):
        tx.manual_seed(7)
        m = None if mask is None else Tensor(mask, device=q.device)
        return F.scaled_dot_product_attention(q, k, v, mask=m, causal=causal, dropout_p=dropout_p)
    return fn


def attention_weights(mask=None, causal=False):
    """AttentionWeights (Attention's softmax part, used by its gradient under create_graph) called directly."""
    def fn(q, k):
        m = None if mask is None else Tensor(mask, device=q.device).data
        return AttentionWeights.apply(q, k, mask=m, causal=causal, scale=1 / np.sqrt(q.shape[-1]))
    return fn


def ids(values, like):
    return Tensor(np.array(values), device=like.device)


def scatter_add(shape, index):
    """ScatterAdd (Getitem's gradient) called directly: `index` is a tuple of int lists or slices."""
    def fn(g):
        idx = tuple(ids(i, g).data if isinstance(i, list) else i for i in index)
        return ScatterAdd.apply(g, shape=shape, index=idx, advanced=any(isinstance(i, list) for i in index))
    return fn


KEEP = np.array([[True, True, False, False],
                 [True, False, True, True],
                 [False, False, False, False],  # a query that may attend to nothing
                 [True, True, True, True]])

CASES: dict[str, dict[str, Case]] = {
    "Add": {
        "same": Case(lambda a, b: a + b, lambda d: [d.n(3, 4), d.n(3, 4)]),
        "broadcast": Case(lambda a, b: a + b, lambda d: [d.n(3, 1, 4), d.n(2, 4)]),
        "scalar": Case(lambda a: 2.5 + a, lambda d: [d.n(3)]),
        "transposed": Case(lambda a, b: a + b, lambda d: [d.n(4, 3).T, d.n(3, 4)]),
        "fan_out": Case(lambda a: a + a * a, lambda d: [d.n(5)]),
    },
    "Sub": {
        "broadcast": Case(lambda a, b: a - b, lambda d: [d.n(2, 3, 1), d.n(3, 4)]),
        "reflected": Case(lambda a: 1 - a, lambda d: [d.n(4)]),
        "transposed": Case(lambda a, b: a - b, lambda d: [d.n(3, 4).T, d.n(4, 3)]),
    },
    "Mul": {
        "broadcast": Case(lambda a, b: a * b, lambda d: [d.n(3, 1, 4), d.n(2, 4)]),
        "scalar": Case(lambda a: a * 3.0, lambda d: [d.n(2, 3)]),
        "square": Case(lambda a: a * a, lambda d: [d.n(2, 3)]),
        "transposed": Case(lambda a, b: a * b, lambda d: [d.n(4, 3).T, d.n(4, 3).T]),
    },
    "Div": {
        "broadcast": Case(lambda a, b: a / b, lambda d: [d.n(2, 3), d.away(3)]),
        "reflected": Case(lambda a: 2.0 / a, lambda d: [d.away(2, 3)]),
        "by_scalar": Case(lambda a: a / 7.0, lambda d: [d.n(3)]),
    },
    "Neg": {
        "plain": Case(lambda a: -a, lambda d: [d.n(2, 3)]),
        "transposed": Case(lambda a: -a, lambda d: [d.n(3, 2).T]),
    },
    "Pow": {
        "both": Case(lambda a, b: a ** b, lambda d: [d.pos(2, 3), d.n(2, 3)]),
        "broadcast": Case(lambda a, b: a ** b, lambda d: [d.pos(2, 3), d.n(3)]),
        "base_scalar": Case(lambda a: 2.0 ** a, lambda d: [d.n(4)]),
        "negative_base_int_exponent": Case(lambda a, b: a ** b,  # the exponent is constant: no log(x < 0)
                                           lambda d: [d.away(3), Const(np.array([2.0, 3.0, 4.0]))]),
    },
    "PowScalar": {
        "square": Case(lambda a: a ** 2, lambda d: [d.n(2, 3)]),
        "cube": Case(lambda a: a ** 3, lambda d: [d.n(4)]),
        "sqrt": Case(lambda a: a ** 0.5, lambda d: [d.pos(4)]),
        "negative": Case(lambda a: a ** -1.5, lambda d: [d.pos(4)]),
    },
    "Cast": {
        # float32 keeps ~7 digits, so the finite difference needs a larger step and a looser tolerance
        "via_float32": Case(lambda a: a.astype(np.float32).astype(np.float64) * 3.0, lambda d: [d.n(2, 3)],
                            tol=dict(eps=1e-3, atol=1e-4, rtol=1e-4)),
        "to_float32_out": Case(lambda a: a.astype(np.float32).exp(), lambda d: [d.n(3)],
                               tol=dict(eps=1e-3, atol=1e-4, rtol=1e-3), twice=False),
    },
    "MatMul": {
        "2d": Case(lambda a, b: a @ b, lambda d: [d.n(3, 4), d.n(4, 2)]),
        "batched": Case(lambda a, b: a @ b, lambda d: [d.n(2, 3, 4), d.n(2, 4, 2)]),
        "broadcast_batch": Case(lambda a, b: a @ b, lambda d: [d.n(2, 1, 3, 4), d.n(3, 4, 2)]),
        "rows_times_matrix": Case(lambda a, b: a @ b, lambda d: [d.n(2, 3, 4), d.n(4, 5)]),
        "matrix_times_batch": Case(lambda a, b: a @ b, lambda d: [d.n(3, 4), d.n(2, 4, 5)]),
        "vec_mat": Case(lambda a, b: a @ b, lambda d: [d.n(4), d.n(4, 3)]),
        "mat_vec": Case(lambda a, b: a @ b, lambda d: [d.n(2, 3, 4), d.n(4)]),
        "vec_batch": Case(lambda a, b: a @ b, lambda d: [d.n(4), d.n(2, 4, 3)]),
        "transposed": Case(lambda a, b: a @ b, lambda d: [d.n(4, 3).T, d.n(2, 4).T]),
        "transposed_op": Case(lambda a, b: a.T @ b.swapaxes(0, 1), lambda d: [d.n(4, 3), d.n(2, 4)]),
    },
    "Linear": {
        "rows": Case(F.linear, lambda d: [d.n(3, 4), d.n(4, 2), d.n(2)]),
        "batched_input": Case(F.linear, lambda d: [d.n(2, 3, 4), d.n(4, 5), d.n(5)]),
        "transposed": Case(F.linear, lambda d: [d.n(4, 3).T, d.n(2, 4).T, d.n(2)]),
    },
    "Exp": {"plain": Case(lambda a: a.exp(), lambda d: [d.n(2, 3)]),
            "transposed": Case(lambda a: a.exp(), lambda d: [d.n(3, 2).T])},
    "Log": {"plain": Case(lambda a: a.log(), lambda d: [d.pos(2, 3)])},
    "Sqrt": {"plain": Case(lambda a: a.sqrt(), lambda d: [d.pos(2, 3)])},
    "Tanh": {"plain": Case(lambda a: a.tanh(), lambda d: [d.n(2, 3) * 2])},
    "Sigmoid": {"plain": Case(lambda a: a.sigmoid(), lambda d: [d.n(2, 3) * 3]),
                # log σ in both tails: the tanh form made σ(-40) exactly 0 (log: -inf, gradient NaN)
                "log_tails": Case(lambda a: a.sigmoid().log(), lambda d: [np.array([-60.0, -40.0, -18.0, 18.0, 40.0])
                                                                          + d.n(5) * 0.1])},
    "Relu": {"plain": Case(lambda a: a.relu(), lambda d: [d.away(3, 4)]),
             "functional": Case(lambda a: F.relu(a), lambda d: [d.away(5)])},
    "Abs": {"plain": Case(lambda a: a.abs(), lambda d: [d.away(3, 4)])},
    "Erf": {"plain": Case(Erf.apply, lambda d: [d.n(3, 4) * 1.5])},
    "Gelu": {
        "exact": Case(lambda a: a.gelu(), lambda d: [d.n(3, 4) * 2]),
        "tanh": Case(lambda a: F.gelu(a, approximate="tanh"), lambda d: [d.n(3, 4) * 2]),
        "transposed": Case(lambda a: a.gelu(), lambda d: [d.n(4, 3).T]),
    },
    "Sum": {
        "all": Case(lambda a: a.sum(), lambda d: [d.n(2, 3, 4)]),
        "axis": Case(lambda a: a.sum(axis=1), lambda d: [d.n(2, 3, 4)]),
        "negative_axis_keepdims": Case(lambda a: a.sum(axis=-1, keepdims=True), lambda d: [d.n(2, 3, 4)]),
        "tuple_axes": Case(lambda a: a.sum(axis=(0, 2)), lambda d: [d.n(2, 3, 4)]),
        "tuple_axes_keepdims": Case(lambda a: a.sum(axis=(0, -1), keepdims=True), lambda d: [d.n(2, 3, 4)]),
        "mean": Case(lambda a: a.mean(axis=(1, 2)), lambda d: [d.n(2, 3, 4)]),
        "var": Case(lambda a: a.var(axis=-1, keepdims=True), lambda d: [d.n(3, 5)]),
        "transposed": Case(lambda a: a.sum(axis=0), lambda d: [d.n(4, 3).T]),
    },
    "Max": {
        "all": Case(lambda a: a.max(), lambda d: [d.distinct(3, 4)]),
        "axis": Case(lambda a: a.max(axis=1), lambda d: [d.distinct(2, 3, 4)]),
        "keepdims": Case(lambda a: a.max(axis=-1, keepdims=True), lambda d: [d.distinct(2, 3, 4)]),
        "tuple_axes": Case(lambda a: a.max(axis=(0, 2)), lambda d: [d.distinct(2, 3, 4)]),
        # two tied maxima: one-sided moves of either give the slopes 1 and 0, central 1/2, the even split
        "two_way_tie": Case(lambda a: a.max(axis=1), lambda d: [np.array([[1.0, 3.0, 3.0], [2.0, 0.5, 2.0]])],
                            twice=False),
    },
    "Expand": {
        "new_and_stretched": Case(lambda a: a.expand(2, 3, 4), lambda d: [d.n(3, 1)]),
        "tuple": Case(lambda a: a.expand((4, 3)), lambda d: [d.n(3)]),
    },
    "Reshape": {
        "plain": Case(lambda a: a.reshape(4, 3), lambda d: [d.n(2, 6)]),
        "minus_one": Case(lambda a: a.reshape(-1), lambda d: [d.n(2, 3, 2)]),
        "transposed": Case(lambda a: a.reshape(2, 6), lambda d: [d.n(4, 3).T]),
    },
    "Transpose": {
        "reverse": Case(lambda a: a.T, lambda d: [d.n(2, 3, 4)]),
        "axes": Case(lambda a: a.transpose(1, 2, 0), lambda d: [d.n(2, 3, 4)]),
        "negative_axes": Case(lambda a: a.transpose(0, -1, 1), lambda d: [d.n(2, 3, 4)]),
        "swapaxes": Case(lambda a: a.swapaxes(0, -1), lambda d: [d.n(2, 3, 4)]),
    },
    "Cat": {
        "axis0": Case(lambda a, b: tx.cat([a, b]), lambda d: [d.n(2, 3), d.n(4, 3)]),
        "axis_last_three": Case(lambda a, b, c: tx.cat([a, b, c], axis=-1),
                                lambda d: [d.n(2, 1), d.n(2, 3), d.n(2, 2)]),
        "reused": Case(lambda a: tx.cat([a, a * 2], axis=1), lambda d: [d.n(2, 3)]),
        "stack": Case(lambda a, b: tx.stack([a, b], axis=1), lambda d: [d.n(2, 3), d.n(2, 3)]),
        "stack_last": Case(lambda a, b: tx.stack([a, b], axis=-1), lambda d: [d.n(3), d.n(3)]),
    },
    "Getitem": {
        "int": Case(lambda a: a[1], lambda d: [d.n(3, 4)]),
        "negative_int": Case(lambda a: a[-1, 2], lambda d: [d.n(3, 4)]),
        "slices": Case(lambda a: a[1:, ::2], lambda d: [d.n(3, 4)]),
        "ellipsis_none": Case(lambda a: a[..., None, 1:3], lambda d: [d.n(2, 3, 4)]),
        "repeated_ids": Case(lambda a: a[[1, 1, 1, 2]], lambda d: [d.n(3, 4)]),
        "repeated_ids_tensor": Case(lambda a: a[ids([[0, 2], [2, 2]], a)], lambda d: [d.n(3, 2)]),
        "ids_with_slice": Case(lambda a: a[:, np.array([3, 0, 3])], lambda d: [d.n(2, 4)]),
        "two_arrays": Case(lambda a: a[[0, 1, 1], [2, 2, 2]], lambda d: [d.n(3, 4)]),
        "negative_ids": Case(lambda a: a[[-1, 0, -1]], lambda d: [d.n(3, 2)]),
        "bool_mask": Case(lambda a: a[np.array([True, False, True])], lambda d: [d.n(3, 4)]),
        "bool_mask_full": Case(lambda a: a[Tensor(np.arange(12).reshape(3, 4) % 3 == 0, device=a.device)],
                               lambda d: [d.n(3, 4)]),
        "transposed": Case(lambda a: a[[0, 0], 1:], lambda d: [d.n(3, 4).T]),
    },
    "ScatterAdd": {
        "repeated": Case(scatter_add((4, 3), ([1, 1, 3, 1],)), lambda d: [d.n(4, 3)]),
        "slice": Case(scatter_add((4, 3), (slice(1, 3),)), lambda d: [d.n(2, 3)]),
        "two_arrays": Case(scatter_add((3, 3), ([0, 0, 2], [1, 1, 0])), lambda d: [d.n(3)]),
    },
    "MaskedFill": {
        "broadcast_mask": Case(lambda a: a.masked_fill(np.array([[True, False, False, True]]), -2.0),
                               lambda d: [d.n(3, 4)]),
        "tensor_mask": Case(lambda a: a.masked_fill(Tensor(np.eye(3, dtype=bool), device=a.device), 0.0),
                            lambda d: [d.n(3, 3)]),
        "all_filled": Case(lambda a: a.masked_fill(np.ones((2, 2), dtype=bool), 5.0) + a, lambda d: [d.n(2, 2)]),
    },
    "Where": {
        "two_tensors": Case(lambda a, b: tx.where(np.array([[True, False, True]]), a, b),
                            lambda d: [d.n(2, 3), d.n(2, 3)]),
        "broadcast": Case(lambda a, b: tx.where(np.array([True, False, False, True]), a, b),
                          lambda d: [d.n(3, 4), d.n(4)]),
        "scalar_branch": Case(lambda a: tx.where(a > 0, a, 0.5), lambda d: [d.away(3, 3)]),
        "scalar_first": Case(lambda a: tx.where(a > 0, -1.0, a * a), lambda d: [d.away(5)]),
    },
    "Softmax": {
        "last": Case(lambda a: a.softmax(), lambda d: [d.n(3, 5)]),
        "axis0": Case(lambda a: F.softmax(a, axis=0), lambda d: [d.n(3, 4)]),
        "middle_3d": Case(lambda a: a.softmax(axis=1), lambda d: [d.n(2, 3, 4)]),
        "transposed": Case(lambda a: a.softmax(), lambda d: [d.n(5, 3).T]),
    },
    "LogSoftmax": {
        "last": Case(lambda a: a.log_softmax(), lambda d: [d.n(3, 5)]),
        "axis0": Case(lambda a: F.log_softmax(a, axis=0), lambda d: [d.n(3, 4)]),
        "transposed": Case(lambda a: a.log_softmax(), lambda d: [d.n(5, 3).T]),
    },
    "LayerNorm": {
        "plain": Case(lambda a: F.layer_norm(a), lambda d: [d.n(3, 5)]),
        "weight_bias": Case(lambda a, w, b: F.layer_norm(a, w, b), lambda d: [d.n(2, 3, 5), d.n(5), d.n(5)]),
        "large_mean": Case(lambda a, w, b: F.layer_norm(a, w, b, eps=1e-3),
                           lambda d: [d.n(2, 4) + 20, d.n(4), d.n(4)]),
        "transposed": Case(lambda a, w, b: F.layer_norm(a, w, b), lambda d: [d.n(4, 3).T, d.n(4), d.n(4)]),
        "wide": Case(lambda a, w, b: F.layer_norm(a, w, b), lambda d: [d.n(2, 3, 40), d.n(40), d.n(40)]),  # einsum dots
    },
    "CrossEntropy": {
        "mean": Case(lambda a: F.cross_entropy(a, ids([1, 0, 4], a)), lambda d: [d.n(3, 5)]),
        "sum": Case(lambda a: F.cross_entropy(a, ids([1, 0, 4], a), reduction="sum"), lambda d: [d.n(3, 5)]),
        "none": Case(lambda a: F.cross_entropy(a, ids([1, 0, 4], a), reduction="none"), lambda d: [d.n(3, 5)]),
        "ignore_smooth_3d": Case(
            lambda a: F.cross_entropy(a, ids([[1, 0, 4], [2, 0, 3]], a), ignore_index=0, label_smoothing=0.2),
            lambda d: [d.n(2, 3, 5)]),
        "ignore_smooth_none": Case(
            lambda a: F.cross_entropy(a, ids([1, -100, 2, 3], a), ignore_index=-100, label_smoothing=0.1,
                                      reduction="none"),
            lambda d: [d.n(4, 4)]),
        "ignore_sum": Case(lambda a: F.cross_entropy(a, ids([1, 2, 2], a), ignore_index=2, reduction="sum"),
                           lambda d: [d.n(3, 4)]),
        "transposed": Case(lambda a: F.cross_entropy(a, ids([0, 2, 1, 1], a), label_smoothing=0.3),
                           lambda d: [d.n(3, 4).T]),
    },
    "Embedding": {
        "repeated_ids": Case(lambda w: F.embedding(ids([1, 1, 1, 2], w), w), lambda d: [d.n(4, 3)]),
        "2d_ids": Case(lambda w: F.embedding(ids([[0, 3], [3, 3]], w), w), lambda d: [d.n(5, 2)]),
        "list_ids": Case(lambda w: F.embedding([2, 0, 2], w), lambda d: [d.n(3, 4)]),
    },
    "Dropout": {
        "half": Case(seeded_dropout(0.5), lambda d: [d.n(4, 5)]),
        "small_p": Case(seeded_dropout(0.1), lambda d: [d.n(3, 3).T]),
    },
    "Attention": {
        "plain": Case(seeded_attention(), lambda d: [d.n(2, 4, 3), d.n(2, 5, 3), d.n(2, 5, 2)]),
        "keep_mask": Case(seeded_attention(mask=KEEP), lambda d: [d.n(2, 4, 3), d.n(2, 4, 3), d.n(2, 4, 2)]),
        "causal": Case(seeded_attention(causal=True), lambda d: [d.n(2, 4, 3), d.n(2, 4, 3), d.n(2, 4, 2)]),
        "causal_and_mask": Case(seeded_attention(mask=KEEP, causal=True),
                                lambda d: [d.n(4, 3), d.n(4, 3), d.n(4, 3)]),
        "padding_mask_heads": Case(seeded_attention(mask=np.array([True, True, False])[None, None, None, :]),
                                   lambda d: [d.n(1, 2, 3, 2), d.n(1, 2, 3, 2), d.n(1, 2, 3, 2)]),
        "causal_with_cache": Case(seeded_attention(causal=True), lambda d: [d.n(2, 3), d.n(4, 3), d.n(4, 2)]),
        "dropout": Case(seeded_attention(mask=KEEP, dropout_p=0.3), lambda d: [d.n(4, 3), d.n(4, 3), d.n(4, 2)]),
        "transposed": Case(seeded_attention(), lambda d: [d.n(3, 4).T, d.n(3, 4).T, d.n(4, 2)]),
        "mask_adds_batch": Case(seeded_attention(mask=np.stack([KEEP, KEEP.T])),  # (2, 4, 4) mask, 2-D q, k, v
                                lambda d: [d.n(4, 3), d.n(4, 3), d.n(4, 2)]),
        "many_keys": Case(seeded_attention(causal=True), lambda d: [d.n(3, 2), d.n(33, 2), d.n(33, 2)]),  # einsum dots
    },
    "AttentionWeights": {
        "plain": Case(attention_weights(), lambda d: [d.n(2, 4, 3), d.n(2, 5, 3)]),
        "keep_mask": Case(attention_weights(mask=KEEP), lambda d: [d.n(2, 4, 3), d.n(2, 4, 3)]),
        "causal_with_cache": Case(attention_weights(causal=True), lambda d: [d.n(2, 3), d.n(4, 3)]),
        "mask_adds_batch": Case(attention_weights(mask=np.stack([KEEP, KEEP.T])), lambda d: [d.n(4, 3), d.n(4, 3)]),
    },
}


def make_inputs(case: Case, device: str) -> list:
    out = []
    for a in case.inputs(Draw()):
        if isinstance(a, Const):
            out.append(Tensor(a.array, device=device))
        elif isinstance(a, np.ndarray) and a.dtype.kind == "f":
            out.append(Tensor(a, device=device, requires_grad=True))
        else:
            out.append(a)
    return out


def nodes_in_graph(out) -> list:
    """The nodes of the graph behind `out` (a Tensor or a tuple of them)."""
    seen, stack = {}, [t.grad_fn for t in (out if isinstance(out, tuple) else (out,)) if t.grad_fn]
    while stack:
        fn = stack.pop()
        if id(fn) not in seen:
            seen[id(fn)] = fn
            stack.extend(t.grad_fn for t in fn.inputs if t.grad_fn is not None)
    return list(seen.values())


ALL = [pytest.param(op, name, id=f"{op}-{name}") for op, cases in CASES.items() for name in cases]
SECOND = [pytest.param(op, name, id=f"{op}-{name}") for op, cases in CASES.items()
          for name, case in cases.items() if case.twice]


def test_every_registered_op_has_a_case():
    missing = sorted(set(tx.REGISTRY) - set(CASES))
    assert not missing, f"ops without a gradcheck case: {missing}"
    stale = sorted(set(CASES) - set(tx.REGISTRY))
    assert not stale, f"cases for ops that are not registered: {stale}"


def test_every_op_is_differentiable_twice_and_checked_so():
    """No op is once-differentiable: the fused ones too build their gradient from differentiable
    ops under create_graph, and each op has at least one case that gradgradcheck runs."""
    once = sorted(name for name, cls in tx.REGISTRY.items() if not cls.differentiable_twice)
    assert not once, f"once-differentiable ops: {once}"
    unchecked = sorted(op for op, cases in CASES.items() if not any(case.twice for case in cases.values()))
    assert not unchecked, f"ops with no second-order case: {unchecked}"


ENGINE_STATE = {"backend", "xp", "inputs", "arrays", "needs_grad", "seq"}  # what `Function.apply` records


@pytest.mark.parametrize("op,name", ALL)
def test_ops_store_only_the_state_they_declare(op, name):
    """Whatever forward keeps on the node beyond what the engine records is listed in `saved`
    (the profiler counts it and `release()` frees it), and backward then frees all of it."""
    case = CASES[op][name]
    out = case.fn(*make_inputs(case, "cpu"))
    nodes = nodes_in_graph(out)
    for fn in nodes:
        undeclared = set(vars(fn)) - ENGINE_STATE - set(fn.saved)
        assert not undeclared, f"{fn.name} stores {sorted(undeclared)} without declaring them in `saved`"
    (out if isinstance(out, tuple) else (out,))[0].sum().backward()
    for fn in nodes:
        kept = set(vars(fn)) & ({"inputs", "arrays"} | set(fn.saved))
        assert fn.released and not kept, f"{fn.name} still holds {sorted(kept)} after backward"


@pytest.mark.parametrize("op,name", ALL)
def test_gradcheck(op, name, device):
    case = CASES[op][name]
    inputs = make_inputs(case, device)
    assert op in {fn.name for fn in nodes_in_graph(case.fn(*inputs))}, f"case {name!r} does not run {op}"
    assert tx.gradcheck(case.fn, inputs, **case.tol)


@pytest.mark.parametrize("op,name", SECOND)
def test_gradgradcheck(op, name, device):
    case = CASES[op][name]
    assert tx.gradgradcheck(case.fn, make_inputs(case, device), **case.tol)


def upstream_for(out, seed: int = 3) -> list:
    return [Tensor(np.random.default_rng(seed).standard_normal(o.shape).astype(o.dtype), device=o.device)
            for o in (out if isinstance(out, tuple) else (out,))]


def weighted(out, upstream):
    """Σ out · u over the outputs: the scalar whose gradient is the op's backward of u."""
    return sum((o * u).sum() for o, u in zip(out if isinstance(out, tuple) else (out,), upstream))


@pytest.mark.parametrize("op,name", ALL)
def test_create_graph_gives_the_fast_gradient(op, name, device):
    """The gradient an op builds from differentiable ops under create_graph has the values of its fast
    raw-array gradient (gradgradcheck alone would pass a create_graph formula that is smooth but wrong)."""
    case = CASES[op][name]
    inputs = make_inputs(case, device)
    wanted = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    upstream = upstream_for(case.fn(*inputs))
    fast = tx.grad(weighted(case.fn(*inputs), upstream), wanted)
    graph = tx.grad(weighted(case.fn(*inputs), upstream), wanted, create_graph=True)
    for f, g in zip(fast, graph):
        assert (f is None) == (g is None)
        if f is not None:
            np.testing.assert_allclose(g.numpy(), f.numpy(), rtol=1e-12, atol=1e-14)


THIRD = [pytest.param(op, name, id=f"{op}-{name}") for op, name in [
    ("Softmax", "middle_3d"), ("LogSoftmax", "axis0"), ("LayerNorm", "weight_bias"), ("CrossEntropy", "ignore_smooth_3d"),
    ("Attention", "causal_and_mask"), ("Attention", "dropout"), ("AttentionWeights", "keep_mask"),
    ("Gelu", "exact"), ("Gelu", "tanh"), ("Erf", "plain")]]


@pytest.mark.parametrize("op,name", THIRD)
def test_fused_ops_to_third_order(op, name):
    """"To any order": a fused op's create_graph gradient is made of ops that are themselves
    differentiable twice, so gradgradcheck of the gradient checks third derivatives. (The
    second derivatives must depend on the inputs, or the check would compare zeros with zeros.)"""
    case = CASES[op][name]
    inputs = make_inputs(case, "cpu")
    upstream = upstream_for(case.fn(*inputs))

    def gradient(*xs):
        wanted = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
        grads = tx.grad(weighted(case.fn(*xs), upstream), wanted, create_graph=True)
        return tuple(g if g is not None else x * 0.0 for g, x in zip(grads, wanted))

    first = gradient(*inputs)
    second = tx.grad(weighted(first, upstream_for(first, seed=4)), [x for x in inputs if isinstance(x, Tensor)
                                                                      and x.requires_grad], create_graph=True)
    assert any(g is not None and g.requires_grad for g in second), "third derivatives are all zero here"
    assert tx.gradgradcheck(gradient, inputs, **case.tol)


def test_transposed_inputs_really_are_non_contiguous():
    """The "transposed" cases test strided arrays only if the Tensor keeps the view."""
    x = make_inputs(CASES["Add"]["transposed"], "cpu")[0]
    assert not x.data.flags["C_CONTIGUOUS"]


def test_dropout_reseeded_draws_the_same_mask(device):
    x = Tensor(np.ones((6, 7)), device=device)
    fn = seeded_dropout(0.5)
    first, second = fn(x).numpy(), fn(x).numpy()
    np.testing.assert_array_equal(first, second)
    assert set(np.unique(first)) == {0.0, 2.0}
    tx.manual_seed(8)
    assert not np.array_equal(F.dropout(x, 0.5).numpy(), first)


def test_cast_gradient_by_hand(device):
    """float32 -> float64 -> float32: values and gradient dtypes exactly as expected."""
    x = Tensor(np.array([1.5, -2.0, 0.25], dtype=np.float32), requires_grad=True, device=device)
    y = x.astype(np.float64)
    assert y.dtype == np.float64
    (y * Tensor(np.array([2.0, 3.0, 4.0]), device=device)).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0, 4.0])
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True, device=device)
    z = w.astype(np.float32) * Tensor(np.array([0.5, 0.25], dtype=np.float32), device=device)
    assert z.dtype == np.float32
    z.sum().backward()
    assert w.grad.dtype == np.float64
    np.testing.assert_array_equal(w.grad.numpy(), [0.5, 0.25])
