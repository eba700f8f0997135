"""Typical wrong answers fail their exercise's check, naming the input and the element, with the
value expected, the value got, and the hint for that mistake's pattern.

Each wrong answer is the engine's own op with one mistake put in (its gradients transformed the
way the mistake transforms them), or the mistake's formula itself."""
from __future__ import annotations

import re

import numpy as np

from exercises import check
from tinygrad_tx import Tensor, ops, optim

from .standins import engine_answers

NAMED = re.compile(r"(input \w+|leaf \d+|parameter \d+) \(shape \(([\d, ]*)\)\), element \(([\d, ]*)\): "
                   r"expected (\S+), got (.+)")


def failure(number: str, **wrong) -> tuple[str, re.Match]:
    """The report of exercise `number` with the engine's answers but `wrong`'s, which must fail
    naming an input and an element."""
    report = check(number, {**engine_answers(number), **wrong})
    assert not report, str(report)
    named = NAMED.search(str(report))
    assert named, str(report)
    return str(report), named


class SignFlipped(ops.Mul, register=False):
    def backward(self, g, a, b):
        return tuple(-d for d in super().backward(g, a, b))


def test_a_flipped_sign_is_named():
    text, named = failure("01", Mul=SignFlipped)
    assert named[1] == "input a" and float(named[4]) == -float(named[5])
    assert "hint: a sign flipped: got == -expected at every element" in text


class NoBroadcastSum(ops.Add, register=False):
    broadcasts = False  # as the exercise's Add: it must sum its own broadcast, and forgets

    def backward(self, g, a, b):
        return g, g


def test_a_missing_sum_over_a_broadcast_axis_is_named_by_its_shape():
    text, named = failure("02", Add=NoBroadcastSum)
    assert named[1] == "input b" and named[2] == "4," and named[3] == "0,"
    assert named[5].startswith("an array of shape (3, 4) (its first element: ")
    assert "hint: a missing sum over a broadcast axis" in text and "g.sum(axis=0, keepdims=True)" in text


class MeanOverBroadcast(ops.Add, register=False):
    broadcasts = False

    def backward(self, g, a, b):
        def back(shape):
            lead = g.ndim - len(shape)
            axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] > 1)
            return g.mean(axis=axes, keepdims=True).reshape(shape) if axes else g
        return back(a.shape), back(b.shape)


def test_a_mean_where_the_sum_belongs_is_named_by_its_factor():
    text, named = failure("02", Add=MeanOverBroadcast)
    assert named[1] == "input b" and np.isclose(float(named[5]) * 3, float(named[4]), rtol=1e-4)
    assert "off by a factor 1/3 (the number of broadcast copies of the input = 3)" in text


class TransposedProduct(ops.MatMul, register=False):
    def backward(self, g, a, b):
        ga, gb = super().backward(g, a, b)
        return ga, g.swapaxes(-1, -2) @ a  # dbᵀ: gᵀ @ a where aᵀ @ g belongs


def test_a_transposed_product_is_named():
    text, named = failure("04", MatMul=TransposedProduct)
    assert named[1] == "input b" and named[2] == "4, 2"
    assert named[5].startswith("an array of shape (2, 4)") and "a transposed product" in text


class SquareTransposed(ops.MatMul, register=False):
    def backward(self, g, a, b):
        ga, gb = super().backward(g, a, b)
        return ga.swapaxes(-1, -2) if a.shape[-1] == a.shape[-2] else ga, gb


def test_a_transposed_gradient_of_the_right_shape_is_named():
    text, named = failure("04", MatMul=SquareTransposed)
    assert named[1] == "input a" and named[2] == "3, 3"
    assert "got is expected transposed" in text


class SoftmaxWithoutRowTerm(ops.Softmax, register=False):
    def backward(self, g, x):
        return (self.y * g,)


def test_softmax_without_its_row_term_is_named():
    text, named = failure("05", Softmax=SoftmaxWithoutRowTerm)
    assert named[1] == "input x"
    assert "softmax's gradient without its row term" in text


class NaNOnTheMaskedRow(ops.Attention, register=False):
    def backward(self, g, q, k, v):
        gq, gk, gv = super().backward(g, q, k, v)
        empty = ~self.p.any(axis=-1)  # a query with no key: the fully masked row
        return np.where(empty[..., None], np.nan, gq), gk, gv


def test_a_nan_on_a_fully_masked_row_is_named():
    text, named = failure("08", Attention=NaNOnTheMaskedRow)
    assert named[1] == "input q" and named[3] == "1, 0" and named[5] == "nan"
    assert "a fully masked row" in text and "✗ Attention: a fully masked row" in text


def pushed_order(root) -> list:
    """Depth-first, each node marked seen when pushed, the post-order reversed: a node marked seen
    through one user may be finished before another of its users is (the mistake)."""
    order, seen, stack = [], {root.grad_fn}, [(root.grad_fn, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        stack.append((node, True))
        for t in node.inputs:
            if t.grad_fn is not None and t.grad_fn not in seen:
                seen.add(t.grad_fn)
                stack.append((t.grad_fn, False))
    return order[::-1]


def by_sequence(root) -> list:
    """Every node behind root, the latest made first (the engine's order)."""
    return sorted(pushed_order(root), key=lambda node: node.seq, reverse=True)


def walk_with(order, add: bool):
    """A walk that runs the nodes in `order(root)` and, unless `add`, puts (=) a gradient where it
    should add (+=) one to the gradient waiting."""
    def backward(root, grad):
        waiting, leaves = {root.grad_fn: grad}, {}
        for node in order(root):
            for t, a, gk in zip(node.inputs, node.arrays, node.backward(waiting[node], *node.arrays)):
                if gk is None or not t.requires_grad:
                    continue
                gk = gk.sum(axis=tuple(range(gk.ndim - a.ndim))) if gk.ndim > a.ndim else gk
                place, key = (leaves, t) if t.grad_fn is None else (waiting, t.grad_fn)
                place[key] = place[key] + gk if add and key in place else gk
        for leaf, g in leaves.items():
            leaf.grad = Tensor(g) if leaf.grad is None else leaf.grad + Tensor(g)
    return backward


def test_a_walk_that_overwrites_instead_of_adding_is_named():
    text, named = failure("09", backward=walk_with(by_sequence, add=False))
    assert named[1] == "leaf 0"
    assert "✗ fan-out at a leaf" in text and "a walk that overwrites where it should add" in text


def test_a_walk_that_runs_a_node_before_all_its_users_is_named():
    text, named = failure("09", backward=walk_with(pushed_order, add=True))
    assert named[1] == "leaf 0"
    assert "✗ fan-out at a node, the other way round" in text and "run a node only after every node that uses" in text


class NoBiasCorrection(optim.Adam):
    def _update(self, param, grad, state, xp, decays):  # the engine's update, with m̂ = m and v̂ = v at step 1
        beta1, beta2 = self.betas
        lr = self.lr
        self.lr = lr * (1 - beta1) / np.sqrt(1 - beta2) if self.t == 1 else lr
        try:
            super()._update(param, grad, state, xp, decays)
        finally:
            self.lr = lr


def test_adam_without_its_bias_correction_is_named():
    text, named = failure("10", Adam=NoBiasCorrection)
    assert named[1] == "parameter 0" and "step 1, the update Δw of parameter 0" in text
    assert "both bias corrections are missing" in text


class ChangesG(ops.Mul, register=False):
    def backward(self, g, a, b):
        ga, gb = super().backward(g, a, b)
        g *= 2
        return ga, gb


def test_a_backward_that_changes_g_in_place_is_refused():
    report = check("01", {"Mul": ChangesG})
    assert not report and "backward changed g in place" in str(report)


class Float64Constant(ops.Mul, register=False):
    def backward(self, g, a, b):
        return tuple(None if d is None else d * np.float64(1.0) for d in super().backward(g, a, b))


def test_a_float64_constant_that_widens_float32_gradients_is_named():
    report = check("01", {"Mul": Float64Constant})
    assert not report and "✗ Mul: float32 inputs" in str(report) and "np.float64" in str(report)
