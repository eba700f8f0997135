"""The backward walk as the page steps through it: the engine's own order and values.

`backward_steps(root, grad, node_id)` runs `root.backward(grad)` under
`trace_backward` and returns one record per node visited, in the engine's order:
the gradient arriving at it, what it sends to each input (and whether that input
had already received one: fan-out, added with `+=`; whether it was summed back
over broadcast axes), and which of its arrays the engine releases right after.
This is the one place the explorer learns the walk; when the engine exposes its
plan (`tx.backward_plan`), only this function changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...tensor import Tensor
from ..instrument import raw
from ..trace import trace_backward


@dataclass(eq=False)
class WalkStep:
    """One node's turn in backward, with the arrays the page may ask to see."""

    number: int
    node: str  # the node's id in the page's graph
    op: str
    grad: Any  # d root / d (this node's output)
    sends: list[dict] = field(default_factory=list)  # JSON parts: to, arrival, summed_from
    sent: list[Any] = field(default_factory=list)  # the arrays sent, one per entry of `sends`
    releases: list[str] = field(default_factory=list)


class _Walk(trace_backward):
    """trace_backward, also noting each gradient's shape before the engine sums it back to its
    input's shape, and what the node holds when the engine releases it."""

    def __init__(self):
        super().__init__()
        self.raw_shapes: list[list[tuple]] = []
        self.held: list[list[str]] = []

    def backward(self, fn, grad, grads, seconds) -> None:
        super().backward(fn, grad, grads, seconds)
        self.raw_shapes.append([tuple(raw(g).shape) for t, g in zip(fn.inputs, grads)
                                if g is not None and t.requires_grad])
        self.held.append([f"input {i} {tuple(a.shape)}" for i, a in enumerate(fn.arrays)]
                         + [f"saved {name}" for name in fn.saved_values()])


def seed_gradient(root: Tensor) -> Tensor | None:
    """The gradient backward starts from: None (that is, 1) for a scalar, ones for any other result."""
    return None if root.size == 1 else Tensor(np.ones(root.shape, dtype=root.dtype), device=root.device)


def backward_steps(root: Tensor, grad: Tensor | None, node_id: Callable[[Any], str],
                   retain_graph: bool = False) -> list[WalkStep]:
    """Run backward from `root` and return the walk, step by step. `node_id` names a node
    (a Function, or a leaf Tensor) the way the page's graph does."""
    with _Walk() as walk:
        root.backward(grad, retain_graph=retain_graph)
    steps = []
    for step, shapes, held in zip(walk.steps, walk.raw_shapes, walk.held):
        record = WalkStep(step.number, node_id(step.node), step.op, step.grad,
                          releases=[] if retain_graph else held)
        for flow, shape in zip(step.sent, shapes):
            record.sends.append({"to": node_id(flow.target), "arrival": flow.arrival,
                                 "summed_from": list(shape) if shape != tuple(flow.grad.shape) else None})
            record.sent.append(flow.grad)
        steps.append(record)
    return steps
