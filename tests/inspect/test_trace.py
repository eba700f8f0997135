"""trace_backward (inspect/trace.py): every node backward visits, in order, with the
gradients it sent, each use of a fan-out tensor an accumulation of its own."""
import re

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import Tensor
from tinygrad_tx.inspect import tensors_in_graph, trace_backward

from ..helpers import leaf, no_observer_left
from .helpers import small_graph


def test_trace_visits_every_node_in_a_topological_order(device):
    x, w, h, y = small_graph(device)
    with trace_backward() as tr:
        y.backward(retain_graph=True)
    position = {step.node: step.number for step in tr.steps}
    ops = [t.grad_fn for t in tensors_in_graph(y) if t.grad_fn is not None]
    assert sorted(position.values()) == list(range(1, len(ops) + 1)) and set(position) == set(ops)
    for step in tr.steps:  # every node comes before the nodes that made its inputs
        for t in step.node.inputs:
            if t.grad_fn is not None:
                assert position[t.grad_fn] > step.number, (step.op, t.grad_fn.name)
    assert tr.steps[0].node is y.grad_fn and no_observer_left()


def test_trace_gradients_equal_the_final_grads(device):
    x, w, h, y = small_graph(device)
    h.retain_grad()
    with trace_backward() as tr:
        y.backward()
    for t in (x, w, h):
        np.testing.assert_allclose(tr.grad_of(t).numpy(), t.grad.numpy(), rtol=1e-12)
    assert tr.grad_of(y).item() == 1.0


def test_trace_shows_each_use_of_a_fan_out_tensor_as_an_accumulation():
    a = leaf(3.0, name="a")
    b = a + a
    c = b + b  # REFERENCE.md's fan-out case: a.grad must be 4
    with trace_backward() as tr:
        c.backward()
    assert [f.arrival for f in tr.flows_into(b)] == [1, 2]
    assert [f.arrival for f in tr.flows_into(a)] == [1, 2]  # b's node runs once, with both uses summed
    assert [f.grad.item() for f in tr.flows_into(a)] == [2.0, 2.0] and a.grad.item() == 4.0
    table = str(tr)
    assert re.search(r"^\s+1\s+Add", table, re.M) and re.search(r"^\s+2\s+Add", table, re.M)
    assert table.count("+= Add #2") == 1 and table.count("+= a") == 1


def test_trace_under_create_graph_records_tensors():
    x = leaf([0.3, -0.7])
    y = (x * x * x).sum()
    with trace_backward() as tr:
        (gx,) = tx.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(tr.grad_of(x).numpy(), gx.numpy())
    assert not any(isinstance(f.grad, Tensor) for step in tr.steps for f in step.sent)  # arrays: no graph kept
    assert gx.requires_grad and "Mul" in str(tr)
