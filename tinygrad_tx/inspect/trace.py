"""A step-by-step record of backward: which node ran when, with which gradients.

    with trace_backward() as tr:
        loss.backward()
    print(tr)

It answers the two questions everyone asks about reverse mode:

- *Why a topological order?* A node may run only once the gradient of its
  output is complete, i.e. after every node that used that output has sent its
  share. In the table, every node comes before the nodes that produced its inputs.
- *Why `+=`?* A tensor used k times receives k gradients, one per use, and its
  gradient is their sum. The table marks each further arrival with `+=`.

Backward runs a plan made beforehand (`tx.backward_plan`); the trace keeps each
walk's plan (`plans`, each a `BackwardPlan`) and the gradients that flowed along its
routes, so the two can be read side by side: `Step.step` is the step's index in its plan's
`steps`, and `Flow.route` the plan's route the gradient took.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..function import Function
from ..backward import Route, sum_to
from ..tensor import Tensor
from .instrument import Instrument, describe, norm, raw
from ..plan import BackwardPlan


@dataclass(eq=False)
class Flow:
    """One gradient a node sent to one of its inputs."""

    target: Any  # the input's node (a Function) or, for a leaf, the leaf Tensor
    grad: Any  # the array, summed to the input's shape
    arrival: int  # 1 for the first gradient the target received, 2 for the second (+=), …
    route: Route  # the plan's route it took


@dataclass(eq=False)
class Step:
    """One node visited by backward."""

    number: int
    node: Function
    grad: Any  # the array d root / d (this node's output), after any tensor hooks
    step: int  # its index in the steps of its walk's plan
    sent: list[Flow] = field(default_factory=list)

    @property
    def op(self) -> str:
        return self.node.name


class trace_backward(Instrument):
    """Records every node backward visits, in order (see the module docstring).

    The gradients are kept as the engine's arrays, not copies (under
    create_graph, the arrays inside the gradient Tensors, so the record holds
    no graph): change a `.grad` in place and the record changes with it. (One
    the plan sums back over broadcast axes is summed here, as the engine does.)
    """

    def __init__(self):
        self.steps: list[Step] = []
        self.plans: list[BackwardPlan] = []  # the plan of each walk, in the order they began
        self._walking: list[tuple[BackwardPlan, dict]] = []  # the walks running now: plan, node -> step
        self._arrivals: Counter = Counter()

    def backward_begin(self, root, grad, plan, create_graph, inputs) -> None:
        plan = BackwardPlan.of(plan)
        self.plans.append(plan)
        self._walking.append((plan, {id(node): i for i, node in enumerate(plan.nodes)}))

    def backward_end(self) -> None:
        self._walking.pop()

    def backward(self, fn, grad, grads, seconds) -> None:
        plan, number = self._walking[-1]
        i = number[id(fn)]
        step = Step(len(self.steps) + 1, fn, raw(grad), i)
        n = len(plan.nodes)
        for route in plan.routes[i]:
            k, to, shape = route
            g = grads[k]
            if g is not None:
                g = raw(g) if shape is None else sum_to(raw(g), shape)  # as the engine sends it on
                target = plan.leaves[to - n] if to >= n else plan.nodes[to]
                self._arrivals[id(target)] += 1
                step.sent.append(Flow(target, g, self._arrivals[id(target)], route))
        self.steps.append(step)

    # -- questions about the record -------------------------------------------------------
    def flows_into(self, t: Tensor) -> list[Flow]:
        """Every gradient sent to `t` (one per use of `t`), in the order they arrived."""
        target = t if t.grad_fn is None else t.grad_fn
        return [flow for step in self.steps for flow in step.sent if flow.target is target]

    def grad_of(self, t: Tensor) -> Tensor | None:
        """d root / d t as recorded: what t's node worked with, or for a leaf the sum of what it received."""
        if t.grad_fn is not None:
            step = next((s for s in self.steps if s.node is t.grad_fn), None)
            return None if step is None else Tensor._from_op(step.grad, t.backend)
        flows = self.flows_into(t)
        return Tensor._from_op(sum(f.grad for f in flows), t.backend) if flows else None

    # -- the table ---------------------------------------------------------------------------
    def __str__(self) -> str:
        numbers = {id(step.node): step.number for step in self.steps}
        rows = [f"{'#':>4}  {'op':<14}{'gradient of its output':<30}sends"]
        for step in self.steps:
            first = f"{step.number:>4}  {step.op:<14}{_grad_text(step.grad):<30}"
            sends = [_flow_text(flow, numbers) for flow in step.sent] or ["(nothing: no input needs a gradient)"]
            rows += [(first if i == 0 else " " * len(first)) + text for i, text in enumerate(sends)]
        fan_out = sum(1 for step in self.steps for flow in step.sent if flow.arrival > 1)
        rows.append(f"{len(self.steps)} nodes, each visited after every node that uses its output (topological order).")
        rows.append(f"{fan_out} gradient(s) added (+=) to one that had already arrived: a tensor used k times "
                    "gets the sum of k gradients.")
        return "\n".join(rows)


def _grad_text(g: Any) -> str:
    return f"{describe(g.shape, g.dtype)}  ‖{norm(g):.4g}‖"


def _flow_text(flow: Flow, numbers: dict) -> str:
    target = flow.target
    if isinstance(target, Function):
        name = f"{target.name} #{numbers.get(id(target), '?')}"
    else:
        name = target.name or f"leaf {tuple(target.shape)}"
    arrow = "+=" if flow.arrival > 1 else "→ "
    return f"{arrow} {name:<22}{_grad_text(flow.grad)}"
