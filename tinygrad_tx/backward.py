"""Backward, in one file: from a tensor back to every leaf behind it, first planned, then run.

    loss.backward()                  # tensor.py hands over to `backward` at the end of this file
    print(tx.backward_plan(loss))    # the same walk, as data, without running it

**The plan** (`backward_plan`) decides every rule of the walk before a gradient moves:

- *order*: the nodes (the ops recorded in forward) behind the root, each after every
  node that uses its output, so that its output's gradient is complete when it runs;
- *routes*: where the gradient of each input of a node goes: to the node that made that
  input, or, for a leaf, towards its `.grad`;
- *fan-out*: a tensor used k times gets k gradients, added up in the plan's order;
- *broadcasting*: where an op broadcast an input to a larger output
  (`Function.broadcasts`), its gradient is summed back to the input's shape (`sum_to`);
- *releases*: each node's inputs and saved arrays are freed after its step, unless
  `retain_graph`;
- *checks*: a walk through a node an earlier backward freed, or through an op whose
  input was replaced or changed in place after the op used it (its gradient would be
  wrong), is refused before any gradient moves;
- *delivery*: each leaf's summed gradient is delivered at the end (its hooks run, then
  `.grad` grows); a leaf with a post-accumulate-grad hook as soon as no later step sends
  it more, so data parallelism can start averaging it while backward goes on.

**The run** (`run_plan`) follows the plan: each step takes the gradient waiting at its
node, runs the node's `backward`, checks what comes back and sends it along the routes.

Eager backward, `tx.jit` (which keeps the plan of its record and writes it out as
Python), `trace_backward` and the explorer all use this one plan; no rule of the walk is
written anywhere else. The ordinary walk runs each op's formula on raw arrays (fast, no
graph); `create_graph=True` runs the same formulas on Tensors, so that the gradient is
itself a graph that can be differentiated again.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from time import perf_counter
from typing import Any, Callable, Sequence

import numpy as np

from . import observers
from .function import Function, enable_grad, in_place, no_grad

# ---------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------

Route = tuple  # (input, to, sum_to): see BackwardPlan


class BackwardPlan:
    """The walk from a root: step i runs `nodes[i]`, whose output's gradient has the shape `shapes[i]`.

    Gradients wait at *places*: place i is step i's node (the gradient of its output, summed
    so far); place `len(nodes) + k` is leaf k of `leaves` (the gradient it will get). The root's
    gradient starts at place 0: the first step, or, when the root is a leaf, that leaf.

    `routes[i]` holds step i's routes, each a tuple `(input, to, sum_to)`: the gradient that
    backward returns for its `input`-th input is sent to place `to`, summed back to the shape
    `sum_to` first where that is not None (the op broadcast that input). A gradient arriving
    where another already waits is added to it. `delivers` maps a step to the leaves complete
    after it (those with post-accumulate-grad hooks); `freed` lists steps whose node an earlier
    backward released, `changed` the (step, input, shape) of inputs modified after their op
    used them (for an array the op saved, its name in place of the input: `p` of attention): a
    plan with either cannot run (`check_runnable`). In a `tx.jit` record the nodes and leaves
    are numbers, and `ops` names each step's op.
    """

    def __init__(self, nodes: list, shapes: list, routes: list, leaves: list, retain_graph: bool,
                 delivers: dict | None = None, freed: list | None = None, changed: list | None = None,
                 ops: list | None = None):
        self.nodes, self.shapes, self.routes, self.leaves = nodes, shapes, routes, leaves
        self.retain_graph = retain_graph
        self.delivers: dict[int, tuple[int, ...]] = delivers or {}
        self.freed: list[int] = freed or []
        self.changed: list[tuple[int, int | str, tuple]] = changed or []
        self.ops = ops or [node.name for node in nodes]

    @cached_property
    def steps(self) -> list["PlanStep"]:
        """The plan step by step, for reading (`print`, `to_dict`, `tx.jit`'s code, the explorer)."""
        n, arrived, steps = len(self.nodes), set(), []
        changed = {}
        for i, k, _ in self.changed:
            changed[i] = changed.get(i, ()) + (k,)
        for i, routes in enumerate(self.routes):
            adds = []  # whether an earlier route sends to the same place
            for _, to, _ in routes:
                adds.append(to in arrived)
                arrived.add(to)
            steps.append(PlanStep(i, self.nodes[i], self.ops[i], self.shapes[i], routes, tuple(adds),
                                  tuple(to - n for _, to, _ in routes if to >= n), not self.retain_graph,
                                  self.delivers.get(i, ()), i in self.freed, changed.get(i, ())))
        return steps

    def check_runnable(self) -> None:
        """Refuse a walk through a node an earlier backward freed, or through an op whose input
        was modified after the op used it."""
        if self.freed:
            raise RuntimeError(
                f"backward through {self.ops[self.freed[0]]} a second time: its saved values were freed "
                "after the first backward; pass retain_graph=True to the first call")
        if self.changed:
            i, k, shape = self.changed[0]
            what = f"an input of {self.ops[i]}" if type(k) is int else f"the {k!r} {self.ops[i]} saved for backward"
            raise RuntimeError(
                f"{what} (shape {shape}) was modified after the "
                "op used it; its gradient would be wrong. Change tensors only after backward, or work on a copy")

    def renumbered(self, node: Callable[["PlanStep"], Any], leaf: Callable[[Any], Any]) -> "BackwardPlan":
        """The same plan with each step's node replaced by `node(step)` and each leaf by `leaf(it)`
        (what `tx.jit` keeps: op and leaf numbers instead of this call's objects)."""
        return BackwardPlan([node(step) for step in self.steps], self.shapes, self.routes, [leaf(t) for t in self.leaves],
                            self.retain_graph, self.delivers, self.freed, self.changed, self.ops)

    def to_dict(self) -> dict:
        """The plan as plain data (JSON-ready): a node is its sequence number, a leaf its name and shape."""
        return {"retain_graph": self.retain_graph, "places": "step i is place i; leaf k is place steps + k",
                "leaves": [{"name": getattr(t, "name", None), "shape": list(getattr(t, "shape", ()))}
                           for t in self.leaves],
                "steps": [{"node": getattr(s.node, "seq", s.node), "op": s.op, "shape": list(s.shape),
                           "routes": [{"input": k, "to": to, "sum_to": shape, "adds": adds}
                                      for (k, to, shape), adds in zip(s.routes, s.adds)],
                           "releases": s.releases, "delivers": list(s.delivers), "freed": s.freed,
                           "changed": list(s.changed)} for s in self.steps]}

    def format(self, node_name: Callable[["PlanStep"], str] = operator.attrgetter("op"),
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
            i, name = step.index, node_name(step)
            if step.freed:
                lines.append(f"{i:>4}  {name:<14}freed by an earlier backward: this walk cannot run")
                continue
            if step.changed:
                inputs = ", ".join(str(k) for k in step.changed if type(k) is int)
                saved = [f"saved {k}" for k in step.changed if type(k) is str]
                what = "; ".join([f"input {inputs}"] * bool(inputs) + saved)
                lines.append(f"{i:>4}  {name:<14}{what} modified after the op used it: this walk cannot run")
                continue
            sends = []
            for (k, to, shape), adds in zip(step.routes, step.adds):
                where = f"leaf {leaves[to - n]}" if to >= n else f"step {to} ({node_name(steps[to])})"
                summed = f" sum_to {shape}" if shape is not None else ""
                sends.append(f"g{k}{summed} {'+=' if adds else '->'} {where}")
            lines.append(f"{i:>4}  {name:<14}{str(step.shape):<14}" + ("; ".join(sends) or "(nothing)"))
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


@dataclass
class PlanStep:
    """One step of a plan, for reading: its routes are the plan's own, `adds[j]` says whether
    route j adds to a gradient an earlier route sent to the same place, `to_leaves` lists the
    leaves (by number) it sends to."""

    index: int
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


def _leaf_name(t: Any) -> str:
    return getattr(t, "name", None) or f"{tuple(t.shape)}"


def topological_order(root: Any) -> list[Function]:
    """The nodes behind `root`, each before the nodes that produced its inputs.

    Every recorded node carries a sequence number from the engine's clock, and an op's
    inputs always exist before the op runs, so sorting the reachable nodes by descending
    number is a topological order. Collecting them uses an explicit stack, not recursion,
    so a 10,000-op chain does not hit Python's recursion limit; a node reached twice
    (fan-out) is collected once. A node freed by an earlier backward is collected, but
    not what is behind it.
    """
    seen, stack = {root.grad_fn}, [root.grad_fn]
    while stack:
        fn = stack.pop()
        for t in () if fn.released else fn.inputs:
            producer = t.grad_fn
            if producer is not None and producer not in seen:
                seen.add(producer)
                stack.append(producer)
    return sorted(seen, key=operator.attrgetter("seq"), reverse=True)


def backward_plan(root: Any, retain_graph: bool = False) -> BackwardPlan:
    """The plan of `root.backward(retain_graph=retain_graph)`, without running it."""
    if root.grad_fn is None:
        return BackwardPlan([], [], [], [root], retain_graph)
    nodes = topological_order(root)
    n = len(nodes)
    step_of = {fn: i for i, fn in enumerate(nodes)}
    shapes = [root.shape] + [None] * (n - 1)  # each node's output shape, learnt from its first user
    routes, leaves, place_of_leaf, freed, changed = [], [], {}, [], []
    last_use = {}  # leaf with post-accumulate-grad hooks -> the last step that sends it a gradient
    for i, fn in enumerate(nodes):
        if fn.released:
            freed.append(i)
            routes.append(())
            continue
        sends, recheck = [], in_place.last > fn.seq  # some memory changed in place since this op ran
        for k, (t, array) in enumerate(zip(fn.inputs, fn.arrays)):  # `array`: the input as forward saw it
            if t.data is not array or recheck and in_place.time_of(fn.backend.memory(array)) > fn.seq:
                changed.append((i, k, array.shape))  # replaced, or changed in place, after the op ran
            if not t.requires_grad:
                continue
            if t.grad_fn is not None:
                to = step_of[t.grad_fn]
                if shapes[to] is None:
                    shapes[to] = array.shape
            else:
                to = place_of_leaf.get(t)
                if to is None:
                    to = place_of_leaf[t] = n + len(leaves)
                    leaves.append(t)
                if t._ready_hooks:
                    last_use[to - n] = i
            sends.append((k, to, array.shape if fn.broadcasts and array.shape != shapes[i] else None))
        if recheck:  # what it saved beyond its inputs, too (an output it kept: `y` of exp)
            changed += [(i, name, v.shape) for name, v in fn.saved_values().items()
                        if type(v) is fn.backend.array_type and in_place.time_of(fn.backend.memory(v)) > fn.seq]
        routes.append(tuple(sends))
    delivers = {}
    for leaf, i in last_use.items():
        delivers[i] = delivers.get(i, ()) + (leaf,)
    return BackwardPlan(nodes, shapes, routes, leaves, retain_graph, delivers, freed, changed)


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------

def backward(root: Any, seed: Any, retain_graph: bool = False, create_graph: bool = False,
             tensor_math: Any = None, targets: Sequence[Any] | None = None) -> list | None:
    """Send `seed` (d loss / d root, a Tensor shaped like root) back to every leaf behind
    `root`: make the plan, check it, run it. Leaves accumulate it into `.grad`. With `targets`
    (`tx.grad`), no `.grad` changes: the gradients of those tensors are returned instead.
    `create_graph` runs the formulas on Tensors, with `tensor_math` as their `xp`."""
    plan = backward_plan(root, retain_graph)
    plan.check_runnable()
    if create_graph:
        blocking = next((fn for fn in plan.nodes if not fn.differentiable_twice), None)
        if blocking is not None:
            raise RuntimeError(f"{blocking.name} is once-differentiable: its backward works on raw "
                               "arrays, so create_graph=True cannot give second derivatives through it")
    start = seed if create_graph else seed.data
    if not observers.active:
        return run_plan(plan, start, root._from_op, tensor_math if create_graph else None, targets)
    observers.show_backward_begin(root, seed, plan, create_graph, targets)
    try:
        return run_plan(plan, start, root._from_op, tensor_math if create_graph else None, targets)
    finally:
        observers.show_backward_end()


def run_plan(plan: BackwardPlan, seed: Any, wrap: Callable, tensor_math: Any = None,
             targets: Sequence[Any] | None = None) -> list | None:
    """Run the steps of `plan` in order, from `seed` (the root's gradient, an array; a Tensor
    when `tensor_math` is given, for create_graph). `wrap(array, backend)` makes a Tensor.

    A step takes the gradient waiting at its node, lets the node's tensor hooks replace it,
    runs the node's backward, checks what it returns and sends it along the step's routes.
    A node no gradient reached (every route to it sent None) sends nothing on.
    """
    nodes, n, release, delivers = plan.nodes, len(plan.nodes), not plan.retain_graph, plan.delivers
    grads = [None] * (n + len(plan.leaves))  # the gradient waiting at each place, summed so far
    grads[0] = seed
    create_graph, watching = tensor_math is not None, observers.active
    wanted = {t.grad_fn: t for t in targets or () if t.grad_fn is not None}  # tx.grad's intermediate tensors
    with LeafSink(plan.leaves, grads, n, wrap, create_graph, targets) as sink, \
            enable_grad() if create_graph else no_grad():
        for i, fn in enumerate(nodes):
            g, grads[i] = grads[i], None
            if g is not None:
                if fn.hooks or fn.retains is not None:
                    g = _node_hooks(fn, g, wrap)
                if fn in wanted:
                    sink.captured[id(wanted[fn])] = g
                start = perf_counter() if watching else None
                arrays = fn.arrays
                gs = fn.backward(g, *arrays) if not create_graph else _tensor_backward(fn, g, tensor_math)
                if len(gs) != len(arrays):
                    raise RuntimeError(f"{fn.name}.backward returned {len(gs)} gradients for "
                                       f"{len(arrays)} inputs (one per input, None where none is needed)")
                sent = [None] * len(gs) if start is not None else None
                for k, to, shape in plan.routes[i]:
                    gk, array = gs[k], arrays[k]
                    if gk is None:
                        continue
                    if gk.shape != array.shape or gk.dtype is not array.dtype:
                        gk = _fit(fn, gk, array, shape)
                    grads[to] = gk if grads[to] is None else grads[to] + gk  # fan-out: the uses add up
                    if sent is not None:
                        sent[k] = gk
                if start is not None:
                    observers.show_backward(fn, g, sent, perf_counter() - start)
            if release:
                fn.release()
            if delivers and i in delivers:
                for k in delivers[i]:
                    sink.deliver(k)
        return sink.finish()


def _fit(fn: Function, g: Any, array: Any, shape: tuple | None) -> Any:
    """The gradient summed back to `shape` where the plan says a broadcast may need undoing,
    and checked against the input's shape and dtype."""
    if g.shape != array.shape:
        if shape is not None:
            g = sum_to(g, shape)
        if g.shape != array.shape:
            raise RuntimeError(f"{fn.name}.backward returned a gradient of shape {g.shape} "
                               f"for an input of shape {array.shape}")
    if g.dtype != array.dtype:
        raise RuntimeError(f"{fn.name}.backward returned a {g.dtype} gradient for a {array.dtype} input")
    return g


def sum_to(g: Any, shape: tuple) -> Any:
    """Sum a gradient (array or Tensor) over the axes broadcasting added (leading) or
    stretched (size 1 in `shape`): the one place broadcasting is undone."""
    lead = len(g.shape) - len(shape)
    if lead < 0:
        return g  # cannot be summed to a larger shape; the caller's shape check reports it
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    if not axes:
        return g
    if hasattr(g, "grad_fn") or g.dtype != np.float16:  # a Tensor (create_graph): its Sum widens float16 itself
        return g.sum(axis=axes, keepdims=True).reshape(shape)
    # float16 added in float32 and rounded once, as PyTorch does: NumPy adds float16 along a
    # strided axis in float16, where 10,000 ones make 2048
    return g.sum(axis=axes, keepdims=True, dtype=np.float32).astype(np.float16).reshape(shape)


def _tensor_backward(fn: Function, g: Any, tensor_math: Any) -> tuple:
    """Run `fn.backward` on Tensors, so the gradient computation is itself recorded."""
    fn.xp = tensor_math  # the same formulas, now on Tensors
    try:
        return fn.backward(g, *fn.inputs)
    finally:
        fn.xp = fn.backend.xp


def _node_hooks(fn: Function, g: Any, wrap: Callable) -> Any:
    """The hooks of the tensor `fn` made, then `retain_grad`'s: `.grad` keeps the gradient that
    flows on, whatever the order the hooks were registered in (as in PyTorch)."""
    raw = not hasattr(g, "grad_fn")
    t = wrap(g, fn.backend) if raw else g
    if fn.hooks:
        t = run_hooks(fn.hooks, t, f"the output of {fn.name}")
    kept = fn.retains() if fn.retains is not None else None
    if kept is not None:
        kept.grad = t if kept.grad is None else kept.grad + t
    return t.data if raw else t


def run_hooks(hooks: Sequence[Callable], g: Any, what: str) -> Any:
    """Call each hook with the gradient (a Tensor); a returned tensor replaces it, and must keep
    its shape and dtype: everything after it (`.grad`, the optimizer) expects them."""
    for hook in hooks:
        replaced = hook(g)
        if replaced is None:
            continue
        if replaced.shape != g.shape or replaced.dtype != g.dtype:
            raise RuntimeError(f"a hook on {what} returned a gradient of shape {replaced.shape}, dtype "
                               f"{replaced.dtype} for one of shape {g.shape}, dtype {g.dtype}; a hook may "
                               "change the gradient's values, not its shape or dtype")
        g = replaced
    return g


class LeafSink:
    """Where a walk's gradients end: the leaves' `.grad`, or, for `tx.grad`, the tensors asked
    for. `tx.jit`'s replay of a backward delivers through one as well.

    Leaf k's gradient is summed at `grads[first + k]` while the walk runs and delivered once
    (`deliver`: its hooks, then `.grad`, then its post-accumulate-grad hooks), so its hooks see
    the whole gradient. `finish` delivers the leaves not delivered yet, in the plan's order,
    then runs the callbacks queued during the walk (`queue_callback`). While it is entered
    (`with`), it is the walk now running.
    """

    def __init__(self, leaves: Sequence[Any], grads: list, first: int, wrap: Callable,
                 create_graph: bool = False, targets: Sequence[Any] | None = None):
        self.leaves, self.grads, self.first, self.wrap = leaves, grads, first, wrap
        self.create_graph, self.targets = create_graph, targets
        self.captured: dict[int, Any] = {}  # tx.grad: id of a tensor asked for -> its gradient
        self.owned: set[int] = set()  # the arrays a leaf's .grad holds (see _own)
        self.callbacks: list = []  # see queue_callback

    def __enter__(self) -> "LeafSink":
        _walks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _walks.pop()

    def deliver(self, k: int) -> None:
        """Give leaf `k` its summed gradient, if it got one (none: every use sent None)."""
        g, leaf = self.grads[self.first + k], self.leaves[k]
        if g is None:
            return
        self.grads[self.first + k] = None
        if leaf._hooks:
            raw = not self.create_graph
            t = run_hooks(leaf._hooks, self.wrap(g, leaf.backend) if raw else g, f"the leaf {_leaf_name(leaf)}")
            g = t.data if raw else t
        if self.targets is not None:
            self.captured[id(leaf)] = g
            return
        g = g if self.create_graph else self.wrap(_own(g, self.owned, leaf.backend), leaf.backend)
        leaf.grad = g if leaf.grad is None else leaf.grad + g
        for hook in leaf._ready_hooks:
            hook(leaf)

    def finish(self) -> list | None:
        """Deliver the rest; the gradients asked for (`tx.grad`), or None after the callbacks ran."""
        for k in range(len(self.leaves)):
            self.deliver(k)
        if self.targets is not None:
            got = [self.captured.get(id(t)) for t in self.targets]
            if self.create_graph:
                return got
            return [None if g is None else self.wrap(g, t.backend) for g, t in zip(got, self.targets)]
        for callback in self.callbacks:
            callback()
        return None


def _own(g: Any, owned: set, backend: Any) -> Any:
    """`g` itself if no other leaf holds it and it is a plain writeable array, else a copy.

    An op may hand the same array to two inputs (`a + b` gives both g); copying
    then keeps one leaf's `.grad` from changing when another's is edited in place.
    """
    base = getattr(g, "base", None)
    writeable = getattr(getattr(g, "flags", None), "writeable", True)  # CuPy flags have no writeable
    if id(g) in owned or base is not None or not writeable:
        g = backend.xp.array(g, copy=True)
    owned.add(id(g))
    return g


_walks: list[LeafSink] = []  # the walks running now (a hook may start another)


def queue_callback(callback: Callable[[], None]) -> None:
    """Call `callback()` once the walk now running has delivered every gradient (once
    per walk, however often it is queued). DataParallel waits for its all-reduces there,
    so that `loss.backward()` returns with the averaged gradients in place."""
    if not _walks:
        raise RuntimeError("queue_callback outside backward: call it from a gradient hook")
    callbacks = _walks[-1].callbacks
    if callback not in callbacks:
        callbacks.append(callback)
