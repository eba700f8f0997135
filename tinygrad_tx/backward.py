"""Backward: from a tensor back to every leaf behind it, first planned, then run.

    loss.backward()                  # tensor.py hands over to `backward` below
    print(tx.backward_plan(loss))    # the same plan, for reading (tinygrad_tx/plan.py)

**The plan** (`make_plan`) decides every rule of the walk before a gradient moves:
- *order*: the nodes (the ops recorded in forward) behind the root, each after every node
  that uses its output, so that its output's gradient is complete when it runs;
- *routes*: where the gradient of each input of a node goes: to the node that made that
  input, or, for a leaf, towards its `.grad`; a tensor used k times gets k gradients, added
  up in the plan's order (fan-out); where an op broadcast an input (`Function.broadcasts`),
  its gradient is summed back to the input's shape (`sum_to`);
- *releases*: each node's inputs and saved arrays are freed after its step, unless `retain_graph`;
- *checks*: a walk through a node an earlier backward freed, or through an op whose input
  was replaced or changed in place after the op used it, is refused before any gradient moves;
- *delivery*: each leaf's summed gradient is delivered at the end (its hooks, then `.grad`);
  a leaf with a post-accumulate-grad hook as soon as no later step sends it more, so data
  parallelism can start averaging it while backward goes on.

**The run** (`backward`): its loop, `run_plan`, is the chain rule alone: each step takes the
gradient waiting at its node, calls the node's backward and sends each result along the
step's routes. The rest sits around the loop, as Chainer's backward pre- and post-process
hooks sit around its backprop step (`Walk.around`): before a step, tensor hooks and
`retain_grad`, `tx.grad`'s captures, the observers' clock; after it, the observers, the
node's release, a leaf's early delivery. A walk installs only what it needs, so a plain
`loss.backward()` runs the loop with the release alone. The leaves' end (their hooks,
`.grad`, `tx.grad`'s answers, the callbacks DataParallel queues with `queue_callback`) is
`LeafSink`, in leaf_sink.py.

Eager backward, `tx.jit` (which keeps the plan of its record and writes it out as Python),
`trace_backward` and the explorer all use this one plan; no rule of the walk is written
anywhere else. The ordinary walk runs each op's formula on raw arrays (fast, no graph);
`create_graph=True` runs the same formulas on Tensors, so that the gradient is itself a
graph that can be differentiated again.
"""
from __future__ import annotations

import operator
from time import perf_counter
from typing import Any, Callable, Sequence

import numpy as np

from . import observers
from .function import Function, enable_grad, in_place, no_grad
from .leaf_sink import LeafSink, run_hooks

# ---------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------

Route = tuple  # (input, to, sum_to): see Plan


class Plan:
    """The walk from a root: step i runs `nodes[i]`, whose output's gradient has the shape `shapes[i]`.

    Gradients wait at *places*: place i is step i's node (its output's gradient, summed so
    far), place `len(nodes) + k` leaf k of `leaves`. The root's gradient starts at place 0.
    `routes[i]` holds step i's routes `(input, to, sum_to)`: the gradient backward returns for
    its `input`-th input goes to place `to`, summed back to the shape `sum_to` first where that
    is not None (the op broadcast that input), and added to one already waiting there.
    `delivers` maps a step to the leaves complete after it (those with post-accumulate-grad
    hooks); `freed` lists steps whose node an earlier backward released, `changed` the (step,
    input, shape) of inputs modified after their op used them (an array the op saved: its name,
    `p` of attention). In a `tx.jit` record nodes and leaves are numbers, `ops` names the ops.
    """

    def __init__(self, nodes: list, shapes: list, routes: list, leaves: list, retain_graph: bool,
                 delivers: dict | None = None, freed: list | None = None, changed: list | None = None,
                 ops: list | None = None):
        self.nodes, self.shapes, self.routes, self.leaves = nodes, shapes, routes, leaves
        self.retain_graph, self.delivers = retain_graph, delivers or {}
        self.freed: list[int] = freed or []
        self.changed: list[tuple[int, int | str, tuple]] = changed or []
        self.ops = ops or [node.name for node in nodes]

    def check_runnable(self, create_graph: bool = False) -> None:
        """Refuse a walk through a node an earlier backward freed, through an op whose input was
        modified after the op used it, or (`create_graph`) through a once-differentiable op."""
        if self.freed:
            raise RuntimeError(f"backward through {self.ops[self.freed[0]]} a second time: its saved values were "
                               "freed after the first backward; pass retain_graph=True to the first call")
        if self.changed:
            i, k, shape = self.changed[0]
            what = f"an input of {self.ops[i]}" if type(k) is int else f"the {k!r} {self.ops[i]} saved for backward"
            raise RuntimeError(f"{what} (shape {shape}) was modified after the op used it; its gradient would "
                               "be wrong. Change tensors only after backward, or work on a copy")
        once = [fn.name for fn in self.nodes if not fn.differentiable_twice] if create_graph else ()
        if once:
            raise RuntimeError(f"{once[0]} is once-differentiable: its backward works on raw "
                               "arrays, so create_graph=True cannot give second derivatives through it")


def topological_order(root: Any) -> list[Function]:
    """The nodes behind `root`, each before the nodes that produced its inputs.

    Every recorded node carries a sequence number from the engine's clock, and an op's inputs
    exist before the op runs, so sorting the reachable nodes by descending number is a
    topological order. An explicit stack, not recursion, collects them (a 10,000-op chain
    stays within Python's recursion limit); a node freed by an earlier backward is collected,
    but not what is behind it.
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


def make_plan(root: Any, retain_graph: bool = False) -> Plan:
    """The plan of `root.backward(retain_graph=retain_graph)`, without running it."""
    if root.grad_fn is None:
        return Plan([], [], [], [root], retain_graph)
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
    return Plan(nodes, shapes, routes, leaves, retain_graph, delivers, freed, changed)


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------

def backward(root: Any, seed: Any, retain_graph: bool = False, create_graph: bool = False,
             tensor_math: Any = None, targets: Sequence[Any] | None = None) -> list | None:
    """Send `seed` (d loss / d root, a Tensor shaped like root) back to every leaf behind
    `root`: make the plan, check it, run it. Leaves accumulate it into `.grad`. With `targets`
    (`tx.grad`), no `.grad` changes: the gradients of those tensors are returned instead.
    `create_graph` runs the formulas on Tensors, with `tensor_math` as their `xp`."""
    plan = make_plan(root, retain_graph)
    plan.check_runnable(create_graph)
    grads = [None] * (len(plan.nodes) + len(plan.leaves))  # the gradient waiting at each place
    grads[0] = seed if create_graph else seed.data
    walk, watching = Walk(plan, grads, root._from_op, create_graph, targets), bool(observers.active)
    before, after = walk.around(watching)
    if watching:
        observers.show_backward_begin(root, seed, plan, create_graph, targets)
    try:
        with walk, enable_grad() if create_graph else no_grad():
            run_plan(plan, grads, tensor_math if create_graph else None, before, after)
            return walk.finish()
    finally:
        if watching:
            observers.show_backward_end()


def run_plan(plan: Plan, grads: list, tensor_math: Any = None, before: Sequence[Callable] = (),
             after: Sequence[Callable] = ()) -> None:
    """The chain rule, one step per node in the plan's order: take the gradient waiting at the
    node, call its backward (on Tensors, with `tensor_math` as `xp`, for create_graph), send
    each result along the step's routes. A node no gradient reached sends nothing on; what the
    leaves get stays in `grads`. Around it: `before` hooks `(fn, g) -> g` before a backward
    (they may replace its gradient), `after` hooks `(i, fn, g, gs)` after every step, whether a
    gradient reached it or not (`g` and `gs`, what backward returned, None): see `Walk.around`.
    """
    for i, fn in enumerate(plan.nodes):
        g, grads[i], gs = grads[i], None, None
        if g is not None:
            for hook in before:
                g = hook(fn, g)
            arrays = fn.arrays
            gs = fn.backward(g, *arrays) if tensor_math is None else _tensor_backward(fn, g, tensor_math)
            if len(gs) != len(arrays):
                raise RuntimeError(f"{fn.name}.backward returned {len(gs)} gradients for "
                                   f"{len(arrays)} inputs (one per input, None where none is needed)")
            for k, to, shape in plan.routes[i]:
                gk, array = gs[k], arrays[k]
                if gk is None:
                    continue
                if gk.shape != array.shape or gk.dtype is not array.dtype:
                    gk = _fit(fn, gk, array, shape)  # a broadcast summed back, or a wrong gradient refused
                grads[to] = gk if grads[to] is None else grads[to] + gk  # fan-out: the uses add up
        for hook in after:
            hook(i, fn, g, gs)


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
    if hasattr(g, "grad_fn"):  # a Tensor (create_graph): its Sum widens float16 itself
        return g.sum(axis=axes, keepdims=True).reshape(shape)
    return widened_sum(g, axes, keepdims=True).reshape(shape)


def widened_sum(array: Any, axis: tuple, keepdims: bool) -> Any:
    """`array.sum(axis, keepdims)`, with float16 added in float32 and rounded once, as PyTorch
    adds it: NumPy adds float16 along a strided axis in float16, where 10,000 ones make 2048."""
    if array.dtype != np.float16:
        return array.sum(axis=axis, keepdims=keepdims)
    return array.sum(axis=axis, keepdims=keepdims, dtype=np.float32).astype(np.float16)


def _tensor_backward(fn: Function, g: Any, tensor_math: Any) -> tuple:
    """Run `fn.backward` on Tensors, so the gradient computation is itself recorded."""
    fn.xp = tensor_math  # the same formulas, now on Tensors
    try:
        return fn.backward(g, *fn.inputs)
    finally:
        fn.xp = fn.backend.xp


# ---------------------------------------------------------------------------------------
# Around the run: hooks, captures, observers, releases, early deliveries
# ---------------------------------------------------------------------------------------

class Walk(LeafSink):
    """An eager walk: its leaves' sink, and the hooks `run_plan` runs around each step."""

    def __init__(self, plan: Plan, grads: list, wrap: Callable, create_graph: bool, targets: Sequence[Any] | None):
        super().__init__(plan.leaves, grads, len(plan.nodes), wrap, create_graph, targets)
        self.plan, self.began = plan, 0.0
        self.wanted = {t.grad_fn: t for t in targets or () if t.grad_fn is not None}  # tx.grad's non-leaves

    def around(self, watching: bool) -> tuple[tuple, tuple]:
        """(before, after): the hooks this walk needs, in order, and none it does not."""
        plan, before, after = self.plan, [], []
        if any(fn.hooks or fn.retains is not None for fn in plan.nodes):
            before.append(self.node_hooks)
        if self.wanted:
            before.append(self.capture)
        if watching:  # the clock starts last before a backward; the observers hear of it first after
            before.append(self.start_clock)
            after.append(self.announce)
        if not plan.retain_graph:
            after.append(self.release)
        if plan.delivers:
            after.append(self.deliver_early)
        return tuple(before), tuple(after)

    def node_hooks(self, fn: Function, g: Any) -> Any:
        """The hooks of the tensor `fn` made, then `retain_grad`'s: `.grad` keeps the gradient that
        flows on, whatever the order the hooks were registered in (as in PyTorch)."""
        if not fn.hooks and fn.retains is None:
            return g
        raw = not self.create_graph
        t = self.wrap(g, fn.backend) if raw else g
        t = run_hooks(fn.hooks, t, f"the output of {fn.name}")
        kept = fn.retains() if fn.retains is not None else None
        if kept is not None:
            kept.grad = t if kept.grad is None else kept.grad + t
        return t.data if raw else t

    def capture(self, fn: Function, g: Any) -> Any:
        if fn in self.wanted:  # tx.grad's answer for a tensor made by an op: the gradient its node takes
            self.captured[id(self.wanted[fn])] = g
        return g

    def start_clock(self, fn: Function, g: Any) -> Any:
        self.began = perf_counter()
        return g

    def announce(self, i: int, fn: Function, g: Any, gs: tuple | None) -> None:
        """Show the observers the step: what backward returned for each input it sends to (None
        for the others; before a broadcast is summed back, as the plan's route says), and its time."""
        if g is not None:
            seconds, sent = perf_counter() - self.began, [None] * len(gs)
            for k, _, _ in self.plan.routes[i]:
                sent[k] = gs[k]
            observers.show_backward(fn, g, sent, seconds)

    def release(self, i: int, fn: Function, g: Any, gs: tuple | None) -> None:
        fn.release()  # its inputs and saved arrays: no later step reads them

    def deliver_early(self, i: int, fn: Function, g: Any, gs: tuple | None) -> None:
        for k in self.plan.delivers.get(i, ()):  # no later step sends to these: their hooks run now
            self.deliver(k)
