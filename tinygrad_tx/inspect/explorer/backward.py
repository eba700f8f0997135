"""The backward walk as the page steps through it: the engine's own plan, and its values.

`backward_steps(root, grad, node_id)` runs `root.backward(grad)` under
`trace_backward` and returns one record per step of the engine's plan
(`tx.backward_plan`), in its order: the gradient arriving at the node, what it sends
along each of the plan's routes (whether that input had already received one: fan-out,
added with `+=`; whether the plan sums it back over broadcast axes: `sum_to`), and
which of its arrays the plan releases right after. Orders, routes and releases are the
plan's; values are the engine's own arrays. Nothing here decides a rule of the walk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ... import Tensor, backward_plan
from ..trace import trace_backward


@dataclass(eq=False)
class WalkStep:
    """One node's turn in backward, with the arrays the page may ask to see."""

    number: int
    node: str  # the node's id in the page's graph
    op: str
    grad: Any  # d root / d (this node's output)
    sends: list[dict] = field(default_factory=list)  # JSON parts: to, input, arrival, summed_from
    sent: list[Any] = field(default_factory=list)  # the arrays sent, one per entry of `sends`
    releases: list[str] = field(default_factory=list)


def _held(fn) -> list[str]:
    """What a node holds for backward, as the plan's release will free it."""
    return ([f"input {i} {tuple(a.shape)}" for i, a in enumerate(fn.arrays)]
            + [f"saved {name}" for name in fn.saved_values()])


def plan_steps(plan: Any) -> list:
    """A plan's steps, each with `.node`, `.shape`, `.releases` and `.freed`: the one place this
    file reads the engine's plan presentation (`BackwardPlan.steps`)."""
    return plan.steps


def seed_gradient(root: Tensor) -> Tensor | None:
    """The gradient backward starts from: None (that is, 1) for a scalar, ones for any other result."""
    return None if root.size == 1 else Tensor(np.ones(root.shape, dtype=root.dtype), device=root.device)


def backward_steps(root: Tensor, grad: Tensor | None, node_id: Callable[[Any], str],
                   retain_graph: bool = False) -> list[WalkStep]:
    """Run backward from `root` and return the walk, step by step. `node_id` names a node
    (a Function, or a leaf Tensor) the way the page's graph does."""
    held = {}  # what each node holds for backward, noted before the walk releases it
    if root.grad_fn is not None:
        held = {id(s.node): _held(s.node) for s in plan_steps(backward_plan(root, retain_graph)) if not s.freed}
    with trace_backward() as walk:
        root.backward(grad, retain_graph=retain_graph)
    steps = []
    for step in walk.steps:
        planned = plan_steps(walk.plans[0])[step.step]
        record = WalkStep(step.number, node_id(step.node), step.op, step.grad,
                          releases=held.get(id(step.node), []) if planned.releases else [])
        for flow in step.sent:
            # where the plan sums a broadcast back, the node sent a gradient of its output's shape
            which, _, sum_to = flow.route  # (input, to, sum_to)
            summed_from = list(planned.shape) if sum_to is not None else None
            record.sends.append({"to": node_id(flow.target), "input": which, "arrival": flow.arrival,
                                 "summed_from": summed_from})
            record.sent.append(flow.grad)
        steps.append(record)
    return steps
