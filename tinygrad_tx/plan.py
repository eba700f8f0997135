"""The backward plan, for reading: `tx.backward_plan(loss)`, `print(plan)`, `plan.steps`, `plan.to_dict()`.

The engine makes the plan of a walk and runs it (`make_plan` and `run_plan`, in
tinygrad_tx/backward.py). A `BackwardPlan` is that same plan (the engine's `Plan`, holding
the same lists) with what a reader needs besides: each step as a `PlanStep`, the plan as
text and as JSON. Steps are numbered from 1, as the explorer numbers them ("#1" is the
first node backward visits) and as `trace_backward` does; in the engine's lists and routes,
step n is at index n - 1 (its *place*).

`trace_backward` keeps the plan of each walk it sees as one of these, and `tx.jit` keeps the
plan of each backward it records numbered for its record (`renumbered`: op and leaf numbers
in place of this call's objects), prints it with the tape and writes its code from `steps`.
So the plan for reading sits here, beside backward.py and below both `tx.jit` and `tx.inspect`
(which re-exports it), not inside inspect: the explorer, in inspect, shows the jit's record, and
the jit replays from this reading of the plan, so either placement inside the two would import
back up.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from .backward import Plan, Route, make_plan


def backward_plan(root: Any, retain_graph: bool = False) -> "BackwardPlan":
    """The plan of `root.backward(retain_graph=retain_graph)`, without running it: `print` it."""
    return BackwardPlan.of(make_plan(root, retain_graph))


@dataclass
class PlanStep:
    """One step of a plan, for reading: its routes are the plan's own, `adds[j]` says whether
    route j adds to a gradient an earlier route sent to the same place, `to_leaves` lists the
    leaves (by index) it sends to."""

    number: int  # from 1, as printed and as the explorer shows it
    index: int  # its place in the engine's lists: number - 1
    node: Any  # the Function (in a `tx.jit` record: its op number)
    op: str
    shape: tuple  # the shape of the node's output, and so of the gradient it takes
    routes: tuple[Route, ...]
    adds: tuple[bool, ...]
    to_leaves: tuple[int, ...]
    releases: bool  # its inputs and saved arrays are freed after this step
    delivers: tuple[int, ...]  # leaves complete after this step, delivered at once
    freed: bool  # released by an earlier backward: the walk cannot run
    changed: tuple[int | str, ...]  # inputs (arrays it saved: by name) modified after the op used them: cannot run


class BackwardPlan(Plan):
    """The engine's plan of a walk, for reading (see the module docstring)."""

    @classmethod
    def of(cls, plan: Plan) -> "BackwardPlan":
        """`plan` itself for reading: the same lists, not copies."""
        return cls(plan.nodes, plan.shapes, plan.routes, plan.leaves, plan.retain_graph, plan.delivers,
                   plan.freed, plan.changed, plan.ops)

    @cached_property
    def steps(self) -> list[PlanStep]:
        """The plan step by step (`print`, `to_dict`, `tx.jit`'s code, the explorer)."""
        n, arrived, steps = len(self.nodes), set(), []
        changed = {}
        for i, k, _ in self.changed:
            changed[i] = changed.get(i, ()) + (k,)
        for i, routes in enumerate(self.routes):
            adds = []  # whether an earlier route sends to the same place
            for _, to, _ in routes:
                adds.append(to in arrived)
                arrived.add(to)
            steps.append(PlanStep(i + 1, i, self.nodes[i], self.ops[i], self.shapes[i], routes, tuple(adds),
                                  tuple(to - n for _, to, _ in routes if to >= n), not self.retain_graph,
                                  self.delivers.get(i, ()), i in self.freed, changed.get(i, ())))
        return steps

    def renumbered(self, node: Callable[[PlanStep], Any], leaf: Callable[[Any], Any]) -> "BackwardPlan":
        """The same plan with each step's node replaced by `node(step)` and each leaf by `leaf(it)`
        (what `tx.jit` keeps: op and leaf numbers instead of this call's objects)."""
        return BackwardPlan([node(step) for step in self.steps], self.shapes, self.routes,
                            [leaf(t) for t in self.leaves], self.retain_graph, self.delivers, self.freed,
                            self.changed, self.ops)

    def to_dict(self) -> dict:
        """The plan as plain data (JSON-ready): a node is its sequence number, a leaf its name and
        shape; a route goes to a step, by number, or to a leaf, by its index in `leaves`."""
        n = len(self.nodes)
        return {"retain_graph": self.retain_graph,
                "leaves": [{"name": getattr(t, "name", None), "shape": list(getattr(t, "shape", ()))}
                           for t in self.leaves],
                "steps": [{"number": s.number, "node": getattr(s.node, "seq", s.node), "op": s.op,
                           "shape": list(s.shape),
                           "routes": [{"input": k, **({"leaf": to - n} if to >= n else {"step": to + 1}),
                                       "sum_to": shape, "adds": adds} for (k, to, shape), adds in zip(s.routes, s.adds)],
                           "releases": s.releases, "delivers": list(s.delivers), "freed": s.freed,
                           "changed": list(s.changed)} for s in self.steps]}

    def format(self, node_name: Callable[[PlanStep], str] = operator.attrgetter("op"),
               leaf_name: Callable[[Any], str] | None = None) -> str:
        """The plan as text, one line a step; `node_name`, `leaf_name` say how to call them."""
        leaves = [(leaf_name or _leaf_name)(t) for t in self.leaves]
        steps, n = self.steps, len(self.nodes)
        if not steps:
            return f"backward from a leaf: no steps; its gradient goes to {leaves[0]}'s .grad"
        kept = "kept (retain_graph)" if self.retain_graph else "released after its step"
        lines = [f"backward from {node_name(steps[0])}: {len(steps)} steps, {len(leaves)} leaves; "
                 f"each node's saved arrays {kept}",
                 f"{'step':>4}  {'node':<14}{'gets':<14}sends"]
        for step in steps:
            number, name = step.number, node_name(step)
            if step.freed:
                lines.append(f"{number:>4}  {name:<14}freed by an earlier backward: this walk cannot run")
                continue
            if step.changed:
                inputs = ", ".join(str(k) for k in step.changed if type(k) is int)
                saved = [f"saved {k}" for k in step.changed if type(k) is str]
                what = "; ".join([f"input {inputs}"] * bool(inputs) + saved)
                lines.append(f"{number:>4}  {name:<14}{what} modified after the op used it: this walk cannot run")
                continue
            sends = []
            for (k, to, shape), adds in zip(step.routes, step.adds):
                where = f"leaf {leaves[to - n]}" if to >= n else f"step {to + 1} ({node_name(steps[to])})"
                summed = f" sum_to {shape}" if shape is not None else ""
                sends.append(f"g{k}{summed} {'+=' if adds else '->'} {where}")
            lines.append(f"{number:>4}  {name:<14}{str(step.shape):<14}" + ("; ".join(sends) or "(nothing)"))
            if step.delivers:
                lines.append(f"{'':<20}then to .grad: {', '.join(leaves[k] for k in step.delivers)} "
                             "(post-accumulate-grad hooks; no later step sends more)")
        rest = [leaves[k] for k in range(len(leaves)) if not any(k in s.delivers for s in steps)]
        if rest:
            lines.append(f"at the end, to .grad in this order: {', '.join(rest)}")
        lines.append("(gN: the gradient backward returns for input N; += adds it to one that arrived "
                     "before (fan-out); sum_to sums a broadcast back to the input's shape)")
        return "\n".join(lines)

    __str__ = format


def _leaf_name(t: Any) -> str:
    return getattr(t, "name", None) or f"{tuple(t.shape)}"
