"""The op exercises' cases: the shapes that catch the usual mistakes, and the mistakes each op
is known for (what they compute, so a failure can name them).

Each case's `what` says what it catches. Inputs are small, so that finite differences can
probe every element.
"""
from __future__ import annotations

import math

import numpy as np

from tinygrad_tx import Tensor

from .op_check import Case, OpSpec, Slip


def n(*shape):
    """Inputs drawn from a standard normal: a function of the case's generator."""
    return lambda rng: rng.standard_normal(shape)


def inputs(*makers):
    return lambda rng: [make(rng) for make in makers]


def transposed(*shape):
    """A non-contiguous input: the transpose of a (shape reversed) array, a view."""
    return lambda rng: rng.standard_normal(shape[::-1]).T


MUL = OpSpec("Mul", (
    Case("same shapes (3, 4) · (3, 4)", inputs(n(3, 4), n(3, 4))),
    Case("b wants no gradient (needs_grad[1] is False)", inputs(n(3, 4), n(3, 4)), frozen=(1,)),
    Case("fan-out: x · x, one tensor used twice", inputs(n(3, 4)), uses=(0, 0)),
    Case("non-contiguous inputs (transposed views)", inputs(transposed(3, 4), transposed(3, 4))),
    Case("b (4,) broadcast against a (3, 4): the engine sums b's gradient back", inputs(n(3, 4), n(4))),
), slips=(Slip("each input's gradient used its own input instead of the other one: ∂(a·b)/∂a holds no a",
               lambda x, g, **_: {0: g * x[0], 1: g * x[1]}),))

ADD = OpSpec("Add", (
    Case("same shapes (3, 4) + (3, 4)", inputs(n(3, 4), n(3, 4))),
    Case("b (4,) broadcast along the rows of a (3, 4): a bias", inputs(n(3, 4), n(4))),
    Case("a (3, 1) + b (1, 4): both broadcast", inputs(n(3, 1), n(1, 4))),
    Case("a scalar () + b (2, 3)", inputs(n(), n(2, 3))),
    Case("fan-out: x + x", inputs(n(2, 3)), uses=(0, 0)),
))


def _sum_slips():
    return (Slip("g broadcast without the summed axes put back: g lines up with the last axes, not the summed "
                 "ones; reshape g to the keepdims shape (1 where summed) before broadcasting it",
                 lambda x, g, params, **_: {0: np.broadcast_to(g, x[0].shape)} if not params["keepdims"] else {}),)


SUM = OpSpec("Sum", (
    Case("(3, 4) summed over axis 1", inputs(n(3, 4)), dict(axis=(1,), keepdims=False)),
    Case("(3, 3) summed over axis 1: g must line up with the rows", inputs(n(3, 3)), dict(axis=(1,), keepdims=False)),
    Case("(2, 3, 4) over axes (0, 2), keepdims", inputs(n(2, 3, 4)), dict(axis=(0, 2), keepdims=True)),
    Case("(2, 3) over every axis, to a scalar", inputs(n(2, 3)), dict(axis=(0, 1), keepdims=False)),
    Case("non-contiguous (4, 3) over axis 0", inputs(transposed(4, 3)), dict(axis=(0,), keepdims=False)),
), slips=_sum_slips())

MEAN = OpSpec("Mean", (
    Case("(3, 4) averaged over axis 1", inputs(n(3, 4)), dict(axis=(1,), keepdims=False)),
    Case("(2, 3, 4) over axes (0, 2), keepdims", inputs(n(2, 3, 4)), dict(axis=(0, 2), keepdims=True)),
    Case("(2, 3) over every axis, to a scalar", inputs(n(2, 3)), dict(axis=(0, 1), keepdims=False)),
), slips=_sum_slips(), engine=lambda x, axis, keepdims: x.mean(axis=axis, keepdims=keepdims),
    reference=lambda: Tensor.mean)

_NOT_TRANSPOSED = Slip("a factor not transposed: check each product with the shapes alone ((n, m) @ (m, k) gives "
                       "(n, k)), writing them out for a rectangular case", lambda x, g, **_: {0: g @ x[1], 1: x[0] @ g})

MATMUL = OpSpec("MatMul", (
    Case("(3, 4) @ (4, 2): a transposed product has the wrong shape here", inputs(n(3, 4), n(4, 2))),
    Case("(3, 3) @ (3, 3): ... and the right shape here", inputs(n(3, 3), n(3, 3))),
    Case("a batch (2, 3, 4) @ (2, 4, 5)", inputs(n(2, 3, 4), n(2, 4, 5))),
    Case("b (4, 5) shared by a batch (2, 3, 4): summed over the batch", inputs(n(2, 3, 4), n(4, 5))),
    Case("fan-out: x @ x", inputs(n(3, 3)), uses=(0, 0)),
    Case("non-contiguous inputs", inputs(transposed(3, 4), transposed(4, 2))),
), slips=(_NOT_TRANSPOSED,))

LINEAR = OpSpec("Linear", (
    Case("x (5, 3) @ w (3, 4) + b (4,)", inputs(n(5, 3), n(3, 4), n(4))),
    Case("x (4, 4) @ w (4, 4) + b (4,): square, where a transpose keeps its shape", inputs(n(4, 4), n(4, 4), n(4))),
), slips=(_NOT_TRANSPOSED,
          Slip("db not summed over the rows: a bias is added to every row, so its gradient is the sum of g's rows",
               lambda g, **_: {2: g})))

SOFTMAX = OpSpec("Softmax", (
    Case("(3, 5) along the last axis", inputs(n(3, 5)), dict(axis=-1)),
    Case("(4, 3) along axis 0", inputs(n(4, 3)), dict(axis=0)),
    Case("(2, 3, 4) along axis 1", inputs(n(2, 3, 4)), dict(axis=1)),
    Case("large scores (x + 1000): the forward shifts by the max", lambda rng: [rng.standard_normal((2, 4)) + 1000],
         dict(axis=-1)),
    Case("non-contiguous (5, 3)", inputs(transposed(5, 3)), dict(axis=-1)),
), slips=(
    Slip("softmax's gradient without its row term: y·g is only the Jacobian's diagonal; every y_j also depends on "
         "every x_i through the sum, which adds -y·Σ(g·y) along the axis",
         lambda g, y, **_: {0: y * g}),
    Slip("a factor y is missing in front: the row term is there, but every element's gradient scales with its "
         "own y_i (a check of .sum() passes this one: with g = 1 it gives 0, as the right one does)",
         lambda g, y, params, **_: {0: g - (g * y).sum(axis=params["axis"], keepdims=True)}),
))


def _layer_norm_parts(x, w, eps):
    """x̂ and 1/σ of the layer norm's forward (given in the exercise), for the slips below."""
    centred = x - x.mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    return centred * rstd, rstd


LAYER_NORM = OpSpec("LayerNorm", (
    Case("x (4, 5), w and b (5,)", inputs(n(4, 5), n(5), n(5)), dict(eps=1e-5)),
    Case("x (2, 3, 6): rows on two axes", inputs(n(2, 3, 6), n(6), n(6)), dict(eps=1e-5)),
    Case("a row of equal values (variance 0: eps keeps it finite)",
         lambda rng: [np.vstack([rng.standard_normal(4), np.full(4, 0.5)]), rng.standard_normal(4),
                      rng.standard_normal(4)], dict(eps=1e-5)),
    Case("non-contiguous x (3, 5)", inputs(transposed(3, 5), n(5), n(5)), dict(eps=1e-5)),
), slips=(
    Slip("the mean and the variance treated as constants: ĝ/σ misses how every x of the row moves them "
         "(one term through the mean, one through the variance)",
         lambda x, g, params, **_: {0: g * x[1] * _layer_norm_parts(x[0], x[1], params["eps"])[1]}),
    Slip("the term through the variance is missing (the one through the mean is there)",
         lambda x, g, params, **_: {0: (lambda gh, rstd: (gh - gh.mean(-1, keepdims=True)) * rstd)(
             g * x[1], _layer_norm_parts(x[0], x[1], params["eps"])[1])}),
    Slip("dw not summed over the rows: w scales every row (a broadcast, as in 02), so its gradient adds up the rows'",
         lambda x, g, params, **_: {1: g * _layer_norm_parts(x[0], x[1], params["eps"])[0]}),
))


def _logits_and_targets(*shape, classes=5, ignored=()):
    def make(rng):
        target = rng.integers(1, classes, size=shape)
        target.reshape(-1)[list(ignored)] = 0  # the padding id
        return [rng.standard_normal((*shape, classes)), target]
    return make


def _kept_fraction(x, params):
    target = x[1]
    ignored = params["ignore_index"]
    return (target != ignored).mean() if ignored is not None else 1.0


def _ignored_rows_moved(target, got, ignored) -> bool:
    """Whether a row whose target is ignored got a gradient (the symptom of not zeroing them)."""
    rows = target == ignored
    return ignored is not None and bool(rows.any()) and bool(np.abs(got[rows]).max() > 1e-9)


CROSS_ENTROPY = OpSpec("CrossEntropy", (
    Case("logits (4, 5), mean over the rows", _logits_and_targets(4),
         dict(ignore_index=None, label_smoothing=0.0, reduction="mean")),
    Case("padding: rows 1 and 3 ignored, the mean over the 2 kept", _logits_and_targets(4, ignored=(1, 3)),
         dict(ignore_index=0, label_smoothing=0.0, reduction="mean")),
    Case("label smoothing 0.1, with padding", _logits_and_targets(4, ignored=(2,)),
         dict(ignore_index=0, label_smoothing=0.1, reduction="mean")),
    Case("reduction 'sum' (what the trainer uses), with padding", _logits_and_targets(4, ignored=(0,)),
         dict(ignore_index=0, label_smoothing=0.1, reduction="sum")),
    Case("reduction 'none': one loss a row", _logits_and_targets(4, ignored=(3,)),
         dict(ignore_index=0, label_smoothing=0.1, reduction="none")),
    Case("logits (2, 3, 5) for targets (2, 3), as a model makes them", _logits_and_targets(2, 3, ignored=(4,)),
         dict(ignore_index=0, label_smoothing=0.1, reduction="mean")),
), slips=(
    Slip("the mean divides by every row, padding included: it divides by the rows kept (ignore_index's rows "
         "count for nothing)",
         lambda x, want, params, **_: {0: want[0] * _kept_fraction(x, params)} if params["reduction"] == "mean"
         else {}),
    Slip("ignored rows got a gradient: a row whose target is ignore_index contributes nothing, so its gradient "
         "is 0", lambda x, got, params, **_: {0: _ignored_rows_moved(x[1], got[0], params["ignore_index"])}),
))


def _mask(rows):
    return np.array(rows, dtype=bool)


def _qkv(*lead, t_q=3, t_k=4, d=3):
    return inputs(n(*lead, t_q, d), n(*lead, t_k, d), n(*lead, t_k, d))


def _attention(mask=None, causal=False, d=3):
    return dict(mask=mask, causal=causal, dropout_p=0.0, scale=1 / math.sqrt(d))  # a Python float, as F passes it


ATTENTION = OpSpec("Attention", (
    Case("q (3, 3), k and v (4, 3): one head, no mask", _qkv(), _attention()),
    Case("heads (2, 2, 3, 3) with a padding mask (2, 1, 1, 4)", _qkv(2, 2),
         _attention(_mask([[[[1, 1, 1, 0]]], [[[1, 1, 0, 0]]]]))),
    Case("causal, q k v (1, 2, 4, 3)", _qkv(1, 2, t_q=4), _attention(causal=True)),
    Case("a fully masked row: no key left for query 1 gives zeros, never NaN", _qkv(),
         _attention(_mask([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]))),
    Case("fan-out: self-attention, q = k = v = x", inputs(n(4, 3)), _attention(), uses=(0, 0, 0)),
))
