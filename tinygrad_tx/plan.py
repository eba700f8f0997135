"""The backward walk as data: what `loss.backward()` will do, step by step, before it does it.

    plan = tx.backward_plan(loss)
    print(plan)

Backward first makes this plan from the graph and then runs it; `tx.jit` keeps the
plan of its record and writes it out as Python, and `trace_backward` shows the
gradients that flowed along it. Every rule of the walk is decided here, once:

- **order**: the nodes behind the root, each after every node that uses its output
  (so its output's gradient is complete when it runs): a topological order;
- **routes**: where each input's gradient goes: to the step of the node that made
  that input, or to a leaf;
- **fan-out**: a tensor used k times gets k gradients; the second and later routes
  to one place `accumulate` (are added), in the order of the plan;
- **broadcasting**: where an op broadcasts (`Function.broadcasts`) and its output
  is larger than an input, the input's gradient is summed back to its shape
  (`sum_to`), unless it comes back in that shape already;
- **releases**: each node's inputs and saved arrays are freed after its step,
  unless `retain_graph`;
- **checks**: a walk through a node an earlier backward freed (`freed`), or through
  an op whose input was replaced or changed in place after the op used it
  (`changed`: its gradient would be wrong), cannot run; backward refuses it before
  it sends any gradient (`check_runnable`);
- **hooks**: a leaf's summed gradient is delivered (its hooks run, `.grad` grows)
  at the end, in the order of `leaves`; a leaf with a post-accumulate-grad hook as
  soon as the step that last sends it a gradient has run (`delivers`), so data
  parallelism can start averaging it while backward goes on.

At run time a gradient that is None (an op needs none for that input, or no
gradient reached a node) is not sent: the next route to the same place stores
instead of adding.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, NamedTuple


class Route(NamedTuple):
    """Where one input's gradient goes."""

    input: int  # which input of the node (its place in what backward returns)
    to: int  # the step whose node made that input, or, with `leaf`, the leaf's number in `plan.leaves`
    leaf: bool
    accumulates: bool  # an earlier route sends to the same place: this gradient is added to it
    sum_to: tuple | None  # the input's shape, where the op broadcast it to a larger output


@dataclass
class PlanStep:
    """One node's backward: take the gradient of its output, send one along each route."""

    node: Any  # the Function (in a `tx.jit` record: its op number)
    op: str  # the op's name
    shape: tuple  # the shape of the node's output, and so of the gradient it takes
    routes: tuple[Route, ...]
    releases: bool  # its inputs and saved arrays are freed after this step
    delivers: tuple[int, ...]  # leaves with post-accumulate-grad hooks complete after this step
    freed: bool  # released by an earlier backward: the walk cannot run (see `check_runnable`)
    changed: tuple[int, ...]  # inputs modified after the op used them: the walk cannot run


class BackwardPlan:
    """The walk from a root: its steps in order, and the leaves its gradients end in.

    The root's gradient goes to step 0; with no steps the root is a leaf, `leaves[0]`.
    Read it as `steps` (a list of `PlanStep`). Eager backward makes a plan at every
    call, so the plan itself is kept as the cheapest thing to make, parallel lists
    by step number (`nodes`, `shapes`, and `routes` as tuples (input, to, leaf, sum_to)),
    and `steps` is made from them when first asked for (a route `accumulates` where an
    earlier one has the same destination).
    """

    def __init__(self, nodes: list, shapes: list, routes: list, leaves: list, retain_graph: bool,
                 delivers: dict[int, tuple] | None = None, freed: list[int] | None = None,
                 changed: list[tuple[int, int, tuple]] | None = None, names: list[str] | None = None):
        self.nodes, self.shapes, self.routes = nodes, shapes, routes
        self.leaves = leaves  # the leaf Tensors (in a `tx.jit` record: leaf numbers), by first route
        self.retain_graph = retain_graph
        self.delivers = delivers or {}  # step -> leaves delivered right after it
        self.freed = freed or []  # steps whose node an earlier backward released
        self.changed = changed or []  # (step, input, its shape) for inputs modified after the op used them
        self.names = names  # the op of each step, where the nodes are not Functions (numbered)

    @cached_property
    def steps(self) -> list[PlanStep]:
        freed, names = set(self.freed), self.names or [node.name for node in self.nodes]
        changed = _by_step((i, k) for i, k, _ in self.changed)
        reached = set()  # (leaf, to) of the routes so far: a later route there accumulates
        steps = []
        for i, (node, name, shape, routes) in enumerate(zip(self.nodes, names, self.shapes, self.routes)):
            viewed = []
            for k, to, leaf, summed in routes:
                viewed.append(Route(k, to, leaf, (leaf, to) in reached, summed))
                reached.add((leaf, to))
            steps.append(PlanStep(node, name, shape, tuple(viewed), not self.retain_graph,
                                  self.delivers.get(i, ()), i in freed, changed.get(i, ())))
        return steps

    def check_runnable(self) -> None:
        """Refuse a walk through a node an earlier backward freed, or through an op whose input
        was modified after the op used it."""
        if self.freed:
            raise RuntimeError(
                f"backward through {self.steps[self.freed[0]].op} a second time: its saved values were freed "
                "after the first backward; pass retain_graph=True to the first call")
        if self.changed:
            i, k, shape = self.changed[0]
            raise RuntimeError(
                f"an input of {self.steps[i].op} (shape {shape}) was modified after the "
                "op used it; its gradient would be wrong. Change tensors only after backward, or work on a copy")

    def renumbered(self, node: Callable[[PlanStep], Any], leaf: Callable[[Any], Any]) -> "BackwardPlan":
        """The same plan with each step's node replaced by `node(step)` and each leaf by `leaf(it)`
        (what `tx.jit` keeps: op and leaf numbers instead of this call's objects)."""
        return BackwardPlan([node(step) for step in self.steps], self.shapes, self.routes, [leaf(t) for t in self.leaves],
                            self.retain_graph, self.delivers, self.freed, self.changed, [step.op for step in self.steps])

    def to_dict(self) -> dict:
        """The plan as plain data (JSON-ready): a node is its sequence number, a leaf its name and shape."""
        return {"retain_graph": self.retain_graph,
                "leaves": [{"name": getattr(t, "name", None), "shape": list(getattr(t, "shape", ()))}
                           for t in self.leaves],
                "steps": [{"node": getattr(step.node, "seq", step.node), "op": step.op, "shape": list(step.shape),
                           "routes": [r._asdict() for r in step.routes], "releases": step.releases,
                           "delivers": list(step.delivers), "freed": step.freed, "changed": list(step.changed)}
                          for step in self.steps]}

    def format(self, node_name: Callable[[PlanStep], str] = operator.attrgetter("op"),
               leaf_name: Callable[[Any], str] | None = None) -> str:
        """The plan as text, one line a step; `node_name`, `leaf_name` say how to call them."""
        leaves = [(leaf_name or _leaf_name)(t) for t in self.leaves]
        if not self.steps:
            return f"backward from a leaf: no steps; its gradient goes to {leaves[0]}'s .grad"
        kept = "kept (retain_graph)" if self.retain_graph else "released after its step"
        lines = [f"backward from {node_name(self.steps[0])}: {len(self.steps)} steps, {len(leaves)} leaves; "
                 f"each node's saved arrays {kept}",
                 f"{'step':>4}  {'node':<14}{'gets':<14}sends"]
        for i, step in enumerate(self.steps):
            if step.freed:
                lines.append(f"{i:>4}  {node_name(step):<14}freed by an earlier backward: this walk cannot run")
                continue
            if step.changed:
                lines.append(f"{i:>4}  {node_name(step):<14}input {', '.join(map(str, step.changed))} modified "
                             "after the op used it: this walk cannot run")
                continue
            sends = []
            for r in step.routes:
                where = f"leaf {leaves[r.to]}" if r.leaf else f"step {r.to} ({node_name(self.steps[r.to])})"
                summed = f" sum_to {r.sum_to}" if r.sum_to is not None else ""
                sends.append(f"g{r.input}{summed} {'+=' if r.accumulates else '->'} {where}")
            lines.append(f"{i:>4}  {node_name(step):<14}{str(step.shape):<14}" + ("; ".join(sends) or "(nothing)"))
            if step.delivers:
                lines.append(f"{'':<20}then to .grad: {', '.join(leaves[k] for k in step.delivers)} "
                             "(post-accumulate-grad hooks; no later step sends more)")
        rest = [leaves[k] for k in range(len(leaves)) if not any(k in s.delivers for s in self.steps)]
        if rest:
            lines.append(f"at the end, to .grad in this order: {', '.join(rest)}")
        lines.append("(gN: the gradient backward returns for input N; += adds it to one that arrived "
                     "before (fan-out); sum_to sums a broadcast back to the input's shape)")
        return "\n".join(lines)

    __str__ = format


def _by_step(pairs) -> dict[int, tuple]:
    """(step, item) pairs as step -> its items, in the order given."""
    grouped: dict[int, tuple] = {}
    for i, item in pairs:
        grouped[i] = grouped.get(i, ()) + (item,)
    return grouped


def _leaf_name(t: Any) -> str:
    return getattr(t, "name", None) or f"{tuple(t.shape)}"


def topological_order(root: Any) -> list:
    """The nodes behind `root`, each before the nodes that produced its inputs.

    Every recorded node carries a sequence number from a global counter, and an
    op's inputs always exist before the op runs, so sorting the reachable nodes
    by descending number is a topological order. Collecting them uses an
    explicit stack, not recursion, so a 10,000-op chain does not hit Python's
    recursion limit; a node reached twice (fan-out) is collected once. A node
    freed by an earlier backward is collected, but not what is behind it.
    """
    seen, stack = {root.grad_fn}, [root.grad_fn]
    while stack:
        fn = stack.pop()
        for t in () if fn.released else fn.inputs:
            producer = t.grad_fn
            if producer is not None and producer not in seen:
                seen.add(producer)
                stack.append(producer)
    return sorted(seen, key=_sequence_number, reverse=True)


_sequence_number = operator.attrgetter("seq")


def backward_plan(root: Any, retain_graph: bool = False) -> BackwardPlan:
    """The plan of `root.backward(retain_graph=retain_graph)`, without running it.

    Eager backward makes one at every call, so this loop, which visits every input of
    every node, is written for speed: a counter instead of `enumerate` (whose tuples
    cost 5% more), each value looked up once."""
    if root.grad_fn is None:
        return BackwardPlan([], [], [], [root], retain_graph)
    nodes = topological_order(root)
    number = {fn: i for i, fn in enumerate(nodes)}
    shapes = [None] * len(nodes)  # each node's output shape, learnt from its first user
    shapes[0] = root.shape
    routes, leaves, leaf_number, freed, changed = [], [], {}, [], []
    last_use: dict[int, int] = {}  # leaf with post-accumulate-grad hooks -> the last step that sends it one
    for i, fn in enumerate(nodes):
        if fn.released:
            freed.append(i)
            routes.append(())
            continue
        shape, arrays, broadcasts, sends = shapes[i], fn.arrays, fn.broadcasts, []
        k = -1
        for t in fn.inputs:
            k += 1
            array = arrays[k]  # the input as forward saw it
            if t.data is not array or t._version > fn.seq:  # replaced or changed after the op ran
                changed.append((i, k, array.shape))
            if not t.requires_grad:
                continue
            producer = t.grad_fn
            if producer is not None:
                to, leaf = number[producer], False
                if shapes[to] is None:
                    shapes[to] = array.shape
            else:
                to, leaf = leaf_number.get(t), True
                if to is None:
                    to = leaf_number[t] = len(leaves)
                    leaves.append(t)
                if t._ready_hooks:
                    last_use[to] = i
            sends.append((k, to, leaf, array.shape if broadcasts and array.shape != shape else None))
        routes.append(sends)
    delivers = _by_step((i, leaf) for leaf, i in last_use.items())
    return BackwardPlan(nodes, shapes, routes, leaves, retain_graph, delivers, freed, changed)
