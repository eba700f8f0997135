"""`tx.jit`: run a step once, record what the engine did, replay the record on raw arrays.

    step = tx.jit(train_step)            # train_step(src, tgt_in, tgt_out) -> loss
    loss = step(src, tgt_in, tgt_out)    # first two calls with these shapes: eager, and recorded
    loss = step(src, tgt_in, tgt_out)    # every later call: the record, replayed
    print(step.tape(src, tgt_in, tgt_out))   # what was recorded

What a compiler sees
====================
On a small model most of an eager step is bookkeeping, not arithmetic: a Tensor
per result, a device check per op, a node per op, the sort of the graph, a shape
and dtype check per gradient, a dictionary of pending gradients. Yet for one
*input signature* (argument shapes, dtypes and devices, grad mode, the modules'
train/eval mode, which captured tensors require grad) that bookkeeping comes out
the same at every call. So the first call runs eagerly while an instrument (the
engine's observer list, the one `tx.inspect` uses) writes down everything it
sees, the second call does the same and must write down the same program, and
later calls run only the arithmetic. What the instrument sees is exactly what
this file can replay:

- each op's forward (`op`): its Function class, its params, and where each input
  comes from: a *slot* written by an earlier op, an argument, a captured tensor
  (a parameter: its `.data` is read live at each call) or a constant;
- each backward (`backward_begin` ... `backward_end`): from the recorded inputs
  of each op the record derives the walk the engine would make (nodes in the
  same order, each gradient routed to its producer or to a leaf, summed on
  fan-out in the same order, summed back over broadcast axes), so no sort, no
  checks, no Tensors are left for the replay;
- each call that changes state outside the graph (`call`: `optimizer.step()`,
  `zero_grad()`, `clip_grad_norm`, `schedule.step()`): made again, as it was;
- each read of a value on the host (`read`: `item()`, `numpy()`, printing): refused.

A replay is then a straight-line program over a list of arrays: make each op's
Function object, call its `forward` on arrays, call its `backward` on arrays in
the recorded order, drop every array after its last use (the graph walk's
releasing, planned once), and make the recorded calls. Randomness is no
exception: dropout draws from the device's generator inside `forward`, so a
replay draws fresh masks in the same order as eager execution, and a replayed
run equals an eager one bit for bit.

What it cannot see (the limits, as with tinygrad's TinyJit)
===========================================================
- Python branching on tensor values: a record holds one path. `item()`,
  `numpy()`, `if t:` or printing a traced tensor while recording raises
  `JitError`. A branch on raw `.data` is caught only if the two recordings of a
  signature took different paths (then `JitError`); otherwise it goes unnoticed.
- Arrays computed outside ops (raw NumPy/CuPy on `.data`) and handed to an op
  are constants of the record; if the two recordings got different values,
  `JitError` says so. Masks and ids made with Tensor operations (`ids.ne(pad)`,
  `&`) are ops, and are replayed with each call's values.
- Arguments: Tensors (and lists, tuples, dicts of them) are the inputs; a NumPy
  array is refused (wrap it in a Tensor); a Python number or string is part of
  the signature, so a new value records anew (keep changing numbers such as the
  learning rate on the optimizer, not in the arguments).
- Value checks made by user-facing functions (ids in range) run while
  recording only; tensor hooks on intermediate results, post-accumulate-grad
  hooks (DataParallel's all-reduce) and module hooks are refused; `create_graph=True` and `tx.grad` inside the function are refused.
- Tensors returned are the replay's arrays, without a graph, unless the result
  still has one that no backward in the function used: then the whole replay is
  one node (`Replayed`) whose backward runs the recorded walk, so gradients
  (and `tx.gradcheck`) work through a jitted function.
- Instruments active during a replay see nothing of it: they saw the recording.

Recording twice is TinyJit's rhythm too (it runs once plain, captures on the
second call), here used to compare. Records are kept per signature, least
recently used evicted beyond `max_traces`; `jitted.memory()` counts the bytes they hold (their constants:
a record holds no activations between calls).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from . import autograd
from .autograd import OnceDifferentiable, _Sink, sum_to
from .backend import backend_of
from .inspect.instrument import Instrument, describe
from .nn import Module
from .nn.hooks import GLOBAL_HOOKS
from .tensor import Tensor


class JitError(RuntimeError):
    """What a jitted function did that a replay could not repeat faithfully."""


def jit(fn: Callable, max_traces: int = 8) -> "Jitted":
    """Wrap `fn` (Tensors in; forward, backward, optimizer step inside) for record and replay."""
    if max_traces < 1:
        raise ValueError(f"jit: max_traces must be at least 1, not {max_traces}")
    return Jitted(fn, max_traces)


class Jitted:
    """`fn` with a record per input signature; call it as you would call `fn`."""

    def __init__(self, fn: Callable, max_traces: int):
        self.fn, self.max_traces = fn, max_traces
        self.tapes: OrderedDict[tuple, Tape] = OrderedDict()
        self.traces = self.replays = 0  # how often each path was taken (for tests and curiosity)
        self._modules = _modules_in_reach(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors: list[Tensor] = []
        key = self._key(args, kwargs, tensors)
        tape = self.tapes.get(key)
        if tape is not None and tape.confirmed and tape.still_valid():
            self.tapes.move_to_end(key)
            self.replays += 1
            return tape.replay(tensors)
        first = tape if tape is not None and tape.still_valid() else None
        tape, result = _record(self.fn, args, kwargs, tensors, self._modules)
        if first is not None:  # the second recording of this signature: both must agree
            _check_same(first, tape)
            tape.confirmed = True
        self.tapes[key] = tape
        self.tapes.move_to_end(key)
        while len(self.tapes) > self.max_traces:
            self.tapes.popitem(last=False)  # the least recently used signature
        self.traces += 1
        return result

    def _key(self, args: tuple, kwargs: dict, tensors: list) -> tuple:
        return (_signature((args, kwargs), tensors), autograd.is_grad_enabled(),
                tuple(m.training for m in self._modules))

    def tape(self, *args: Any, **kwargs: Any) -> "Tape | None":
        """The record these arguments would replay (None if there is none yet)."""
        return self.tapes.get(self._key(args, kwargs, []))

    def memory(self) -> int:
        """Bytes held by the records (their constants; no activations are kept between calls)."""
        return sum(tape.nbytes() for tape in self.tapes.values())


# -- signatures ------------------------------------------------------------------------------

def _signature(value: Any, tensors: list) -> Any:
    """A hashable description of the arguments; their Tensors are appended to `tensors` in order."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return ("T", value.shape, value.dtype.str, value.device, value.requires_grad)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_signature(v, tensors) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _signature(value[k], tensors)) for k in sorted(value)))
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") and hasattr(value, "shape"):
        raise JitError("jit: an argument is a raw array; pass a Tensor, so that each call's values are "
                       "used (a raw array would be read as a constant of the record)")
    if isinstance(value, Module):
        return ("Module", id(value), value.training)  # the record captured this module's tensors
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return (type(value).__name__, value)
    return ("object", id(value))  # an optimizer, say: its identity matters; the record keeps it alive


def _modules_in_reach(fn: Callable) -> list[Module]:
    """Modules `fn` can reach without arguments: `self` of a method, closure cells, globals it
    names, and their attributes one level down; their train/eval mode joins the signature."""
    found = [getattr(fn, "__self__", None)]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    found += [names[n] for n in (code.co_names if code else ()) if n in names]
    modules: dict[int, Module] = {}
    for obj in found:
        if isinstance(obj, Module):
            modules[id(obj)] = obj
        elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
            modules.update((id(v), v) for v in vars(obj).values() if isinstance(v, Module))
    return list(modules.values())


# -- the record ------------------------------------------------------------------------------

class Op:
    """One op of the record: `values[out] = cls().forward(*values[ins], **params)`."""

    __slots__ = ("index", "cls", "backend", "ins", "params", "dynamic", "out", "needs_grad", "targets",
                 "frees", "recorded")

    def __init__(self, index, cls, backend, ins, params, dynamic, out, needs_grad, targets):
        self.index, self.cls, self.backend = index, cls, backend
        self.ins, self.params, self.dynamic, self.out = ins, params, dynamic, out
        self.needs_grad, self.targets = needs_grad, targets  # for ops recorded for backward, else None
        self.recorded = needs_grad is not None
        self.frees: tuple = ()  # slots whose last use is this op's forward


class Node:
    """One node of a recorded backward: op `index` gets its gradient from `pending[index]`
    and sends `grads[i]` on along each route (i, to_node, target, input shape, reduce): to op
    `target`'s pending gradient or to leaf `target`, summed to the input's shape first if `reduce`."""

    __slots__ = ("index", "ins", "routes", "frees")

    def __init__(self, index, ins, routes):
        self.index, self.ins, self.routes = index, ins, routes
        self.frees: tuple = ()  # slots whose last use is this node's backward


class Backward:
    """A backward inside the function: the walk from op `root` (None: the root is leaf `root_leaf`)."""

    def __init__(self, root, root_leaf, seed, nodes, backend, retain_graph):
        self.root, self.root_leaf, self.seed, self.nodes = root, root_leaf, seed, nodes
        self.backend, self.retain_graph = backend, retain_graph


class Call:
    """A state change outside the graph, made again at each replay (`optimizer.step()`)."""

    def __init__(self, index, function, args, kwargs):
        self.index, self.function, self.args, self.kwargs = index, function, args, kwargs


class Tape:
    """One signature's record: a program over numbered slots (see the module docstring)."""

    def __init__(self):
        self.n_slots = 0
        self.slot_names: list[str] = []
        self.slot_types: list[tuple] = []
        self.args: list[tuple[int, int]] = []  # (slot, argument tensor number)
        self.captured: list[tuple[int, Tensor]] = []  # (slot, tensor whose .data is read live)
        self.leaves: list[tuple[str, Any]] = []  # ("arg", number) or ("tensor", tensor)
        self.ops: list[Op] = []
        self.program: list = []  # runs of Ops (lists), Backward and Call, in the order they happened
        self.calls = 0
        self.output: Any = None
        self.differentiable: tuple | None = None  # (slot, op, nodes) of a result with a graph left
        self.keep_alive: list = []  # argument objects whose identity is in the signature
        self.guard: tuple = ((), [])
        self.confirmed = False  # recorded twice with the same result: replayed from now on

    # -- replay ----------------------------------------------------------------------------
    def still_valid(self) -> bool:
        """Captured tensors still require grad as when recorded (a frozen layer records anew)."""
        tensors, flags = self.guard
        return [t.requires_grad for t in tensors] == flags

    def replay(self, tensors: list[Tensor]) -> Any:
        if self.differentiable is not None and autograd.is_grad_enabled():
            leaves = [self._leaf(k, tensors) for k in range(len(self.leaves))]
            return Replayed.apply(*leaves, tape=self, tensors=tensors)
        values, results, _ = self.run(tensors)
        return self._build(self.output, values, results, tensors)

    def run(self, tensors: list[Tensor], keep: bool = False) -> tuple[list, list, list]:
        """Run the program on the arguments' arrays; returns the slots, the calls' results and
        the op objects (what a later backward outside the function needs, when `keep`)."""
        values = [None] * self.n_slots
        for slot, number in self.args:
            values[slot] = tensors[number].data
        for slot, t in self.captured:
            values[slot] = t.data
        fns: list = [None] * len(self.ops)
        results: list = [None] * self.calls
        for step in self.program:
            if type(step) is list:
                _forward(step, values, fns, keep)
            elif type(step) is Backward:
                self._backward(step, values, fns, tensors)
            else:
                results[step.index] = step.function(*step.args, **step.kwargs)
        return values, results, fns

    def _backward(self, step: Backward, values: list, fns: list, tensors: list) -> None:
        """A backward inside the function; leaves' gradients are delivered as the engine does."""
        sink = _Sink(None, step.backend)
        seed = values[step.seed[1]] if step.seed[0] == "slot" else step.seed[1].copy()
        if step.root is None:
            sink.add(self._leaf(step.root_leaf, tensors), seed)
        else:
            _walk(step.nodes, step.root, seed, values, fns, lambda k, g: sink.add(self._leaf(k, tensors), g),
                  release=not step.retain_graph)
        with autograd.no_grad():
            sink.finish(False)

    def backward_to_leaves(self, g: Any, values: list, fns: list) -> tuple:
        """The recorded walk from the differentiable result to the leaves (for `Replayed`)."""
        _, root, nodes = self.differentiable
        out: list = [None] * len(self.leaves)

        def to_leaf(k: int, gt: Any) -> None:
            out[k] = gt if out[k] is None else out[k] + gt

        _walk(nodes, root, g, values, fns, to_leaf, release=False)
        return tuple(out)

    def _leaf(self, k: int, tensors: list) -> Tensor:
        kind, ref = self.leaves[k]
        return tensors[ref] if kind == "arg" else ref

    def _build(self, spec: Any, values: list, results: list, tensors: list) -> Any:
        kind = spec[0]
        if kind == "tensor":
            return Tensor._from_op(values[spec[1]], spec[2])
        if kind == "call":
            return results[spec[1]]
        if kind == "const":
            return spec[1]
        if kind == "dict":
            return {k: self._build(v, values, results, tensors) for k, v in spec[1]}
        items = [self._build(v, values, results, tensors) for v in spec[1]]
        return items if kind == "list" else tuple(items)

    # -- looking at it ---------------------------------------------------------------------------
    def nbytes(self) -> int:
        """The arrays the record holds: constant params (masks, lifted numbers) and seeds."""
        constants = [v for op in self.ops for v in op.params.values()]
        constants += [s.seed[1] for s in self.program if type(s) is Backward and s.seed[0] == "const"]
        return sum(getattr(v, "nbytes", 0) for v in constants)

    def __str__(self) -> str:
        names = self.slot_names
        recorded = sum(op.recorded for op in self.ops)
        backwards = [s for s in self.program if type(s) is Backward]
        lines = [f"Tape: {len(self.args)} argument array(s), {len(self.captured)} captured tensor(s), "
                 f"{self.nbytes()} bytes of constants; {len(self.ops)} ops "
                 f"({recorded} recorded for backward), {len(backwards)} backward, {self.calls} call(s)"]
        for step in self.program:
            if type(step) is list:
                for op in step:
                    ins = ", ".join(names[i] for i in op.ins)
                    params = ", ".join(f"{k}={_short(v)}" for k, v in op.params.items())
                    mark = "" if op.recorded else "   (no backward)"
                    lines.append(f"  #{op.index:<4}{op.cls.__name__:<13}({ins}{', ' if params else ''}{params})"
                                 f" -> {names[op.out]} {describe(*self.slot_types[op.out])}{mark}")
            elif type(step) is Backward:
                lines.append(f"  backward from {'#' + str(step.root) if step.root is not None else 'a leaf'}"
                             f" ({len(step.nodes)} nodes, in this order):")
                arrived: set = set()
                lines += [f"    #{node.index:<4}{self.ops[node.index].cls.__name__:<13}"
                          + ", ".join(self._route_text(r, arrived) for r in node.routes) for node in step.nodes]
                sums = sum(r[4] for node in step.nodes for r in node.routes)
                lines.append(f"    ({sums} broadcast gradients summed back to their input's shape; "
                             "+= marks a gradient added to one that arrived before: fan-out)")
            else:
                lines.append(f"  call {step.function.__qualname__}")
        return "\n".join(lines)

    def _route_text(self, route: tuple, arrived: set) -> str:
        i, to_node, target, shape, reduce = route
        where = f"#{target}" if to_node else f"leaf {self._leaf_name(target)}"
        arrow = "+=" if (to_node, target) in arrived else "->"
        arrived.add((to_node, target))
        return f"g{i} {'sum_to ' + str(shape) + ' ' if reduce else ''}{arrow} {where}"

    def _leaf_name(self, k: int) -> str:
        kind, ref = self.leaves[k]
        if kind == "arg":
            return f"arg{ref}"
        return next(self.slot_names[slot] for slot, t in self.captured if t is ref)


def _walk(nodes: list, root: int, seed: Any, values: list, fns: list, to_leaf: Callable, release: bool) -> None:
    """The graph walk as recorded: each node's backward on arrays, gradients routed, fan-out summed
    in the engine's order, broadcasts summed back where the recording saw them; with `release`,
    each node's op object (and what it saved) and its last-used arrays dropped after it."""
    pending = {root: seed}
    for node in nodes:
        g = pending.pop(node.index, None)
        if g is not None:
            grads = fns[node.index].backward(g, *[values[i] for i in node.ins])
            for i, to_node, target, shape, reduce in node.routes:
                gt = grads[i]
                if gt is None:
                    continue
                if reduce:
                    gt = sum_to(gt, shape)
                if not to_node:
                    to_leaf(target, gt)
                elif target in pending:
                    pending[target] = pending[target] + gt  # fan-out: the uses add up
                else:
                    pending[target] = gt
        if release:
            fns[node.index] = None
            for slot in node.frees:
                values[slot] = None


def _forward(ops: list, values: list, fns: list, keep: bool) -> None:
    """A run of recorded forwards: each op object made anew (it keeps what its backward needs)."""
    for op in ops:
        fn = op.cls()
        fn.backend, fn.xp = op.backend, op.backend.xp
        params = op.params if op.dynamic is None else _bind_params(op, values)
        values[op.out] = fn.forward(*[values[i] for i in op.ins], **params)
        if op.recorded:
            fn.needs_grad = op.needs_grad
            fns[op.index] = fn
        if not keep:
            for slot in op.frees:
                values[slot] = None


def _bind_params(op: Op, values: list) -> dict:
    """The op's params with this call's arrays (masks, index arrays made from the inputs)."""
    params = dict(op.params)
    for name, binding in op.dynamic:
        params[name] = _bind(binding, values)
    return params


def _bind(binding: Any, values: list) -> Any:
    kind, ref = binding
    if kind == "slot":
        return values[ref]
    if kind == "const":
        return ref
    return tuple(_bind(b, values) for b in ref)


def _short(v: Any) -> str:
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"<{tuple(v.shape)} {v.dtype}>"
    if callable(v):
        return getattr(v, "__name__", type(v).__name__)
    text = repr(v)
    return text if len(text) < 30 else text[:27] + "..."


class Replayed(OnceDifferentiable, register=False):
    """A whole replay as one node, when its result is differentiated outside the function: its
    inputs are the record's leaves (arguments and parameters that take gradients)."""

    saved = ("tape", "values", "fns")

    def forward(self, *leaf_arrays, tape, tensors):
        self.tape = tape
        self.values, _, self.fns = tape.run(tensors, keep=True)
        return self.values[tape.differentiable[0]]

    def backward(self, g, *leaf_arrays):
        return self.tape.backward_to_leaves(g, self.values, self.fns)


# -- recording twice ---------------------------------------------------------------------------

def _check_same(first: Tape, second: Tape) -> None:
    """Refuse a function whose two recordings of one signature differ: its Python took another
    path (it branched on values), or an op got an array computed outside ops from the inputs."""
    a_steps = [("ops", len(s)) if type(s) is list else type(s).__name__ for s in first.program]
    b_steps = [("ops", len(s)) if type(s) is list else type(s).__name__ for s in second.program]
    if a_steps != b_steps or len(first.ops) != len(second.ops):
        raise JitError("jit: two calls with the same signature ran different ops; the function's Python "
                       "depends on tensor values (a branch on .data?), which a replay cannot follow")
    for a, b in zip(first.ops, second.ops):
        where = f"op #{a.index} ({a.cls.__name__})"
        if a.cls is not b.cls or a.ins != b.ins or a.params.keys() != b.params.keys() or a.dynamic != b.dynamic:
            raise JitError(f"jit: two calls with the same signature ran different ops (at {where}); the "
                           "function's Python depends on tensor values, which a replay cannot follow")
        bound = {name for name, _ in a.dynamic or ()}  # made by an op or an argument: replayed anyway
        for name, value in a.params.items():
            if name not in bound and not _same_value(value, b.params[name]):
                raise JitError(f"jit: the {name!r} of {where} differed between two calls with the same "
                               "signature: a value computed outside ops from the inputs (raw .data), which "
                               "a replay would keep fixed. Compute it with Tensor operations")


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):
        return (a.shape == b.shape and a.dtype == b.dtype
                and bool(np.array_equal(backend_of(a).to_host(a), backend_of(b).to_host(b))))
    return type(a) is type(b) and a == b


# -- recording -------------------------------------------------------------------------------

def _record(fn: Callable, args: tuple, kwargs: dict, tensors: list, modules: list) -> tuple[Tape, Any]:
    """Run `fn` eagerly under a `Recorder`; returns the record and `fn`'s result."""
    _refuse_hooks(modules, args, kwargs)
    recorder = Recorder(tensors)
    with recorder:
        result = fn(*args, **kwargs)
    tape = recorder.finish(result)
    tape.keep_alive = [args, kwargs]
    return tape, result


def _refuse_hooks(modules: list, args: tuple, kwargs: dict) -> None:
    arg_modules = [v for v in (*args, *kwargs.values()) if isinstance(v, Module)]
    hooked = GLOBAL_HOOKS or any(m._hooks for top in (*modules, *arg_modules) for m in top.modules())
    if hooked:
        raise JitError("jit: a module hook is registered; hooks run Python code that a replay would skip. "
                       "Remove the hooks, or run this function without tx.jit")


class Recorder(Instrument):
    """The instrument that writes a `Tape` while the function runs eagerly."""

    def __init__(self, tensors: list[Tensor]):
        self.tape = Tape()
        self.slot_of: dict[int, int] = {}  # id(array) -> slot
        self.entry_of: dict[int, int] = {}  # id(eager Function) -> op number
        self.leaf_of: dict[int, int] = {}  # id(leaf tensor) -> leaf number
        self.arg_number = {id(t): i for i, t in enumerate(tensors)}
        self.alive: list = []  # everything whose id is a key above, so that no id is reused meanwhile
        self.eager_fns: list = []
        self.consumed: set[int] = set()  # ops walked by a backward inside the function
        self.call_of: dict[int, int] = {}  # id(result of a call) -> call number
        self.walking = 0
        self.grad_shapes: dict[int, list] = {}  # op number -> shapes of the gradients its backward returned
        for i, t in enumerate(tensors):
            if id(t.data) not in self.slot_of:
                self.tape.args.append((self._new_slot(t.data, f"arg{i}"), i))

    def _new_slot(self, array: Any, name: str) -> int:
        slot = self.tape.n_slots
        self.tape.n_slots += 1
        self.tape.slot_names.append(name)
        self.tape.slot_types.append((getattr(array, "shape", ()), getattr(array, "dtype", type(array).__name__)))
        self.slot_of[id(array)] = slot
        self.alive.append(array)
        return slot

    def _source(self, t: Tensor) -> int:
        slot = self.slot_of.get(id(t.data))
        if slot is None:  # a tensor from outside: a parameter, a buffer, a lifted constant
            slot = self._new_slot(t.data, t.name or f"t{len(self.tape.captured)}")
            self.tape.captured.append((slot, t))
            self.alive.append(t)
        return slot

    def _bind(self, value: Any) -> Any:
        """("slot", k) for an array some op or argument made, a tuple of bindings, or None (a constant)."""
        if isinstance(value, tuple):
            items = [self._bind(v) for v in value]
            if all(b is None for b in items):
                return None
            return ("tuple", tuple(("const", v) if b is None else b for v, b in zip(value, items)))
        slot = self.slot_of.get(id(value)) if hasattr(value, "shape") else None
        return None if slot is None else ("slot", slot)

    def _target(self, t: Tensor) -> tuple | None:
        """Where a gradient for input `t` goes: (True, op number) or (False, leaf number)."""
        if not t.requires_grad:
            return None
        if t.grad_fn is not None:
            entry = self.entry_of.get(id(t.grad_fn))
            if entry is None:
                raise JitError(f"jit: an input of shape {t.shape} was computed outside the function with a graph; "
                               "a replay cannot backpropagate into it. Compute it inside, or pass it detached")
            return (True, entry)
        leaf = self.leaf_of.get(id(t))
        if leaf is None:
            if t._ready_hooks:
                raise JitError("jit: a parameter has a post-accumulate-grad hook (DataParallel with several "
                               "processes, say), which runs during backward; a replay would skip it")
            number = self.arg_number.get(id(t))
            leaf = self.leaf_of[id(t)] = len(self.tape.leaves)
            self.tape.leaves.append(("arg", number) if number is not None else ("tensor", t))
            self.alive.append(t)
        return (False, leaf)

    # -- what the engine shows -----------------------------------------------------------------
    def op(self, fn, inputs, params, output, recorded) -> None:
        if self.walking:
            return  # a leaf's `.grad + g`: part of the walk, which the record derives itself
        ins = tuple(self._source(t) for t in inputs)
        dynamic = [(name, b) for name, b in ((n, self._bind(v)) for n, v in params.items()) if b is not None]
        index = len(self.tape.ops)
        targets = tuple(self._target(t) for t in inputs) if recorded else None
        needs_grad = [t.requires_grad for t in inputs] if recorded else None
        out = self._new_slot(output, f"s{index}")
        op = Op(index, type(fn), fn.backend, ins, dict(params), dynamic or None, out, needs_grad, targets)
        self.tape.ops.append(op)
        self.entry_of[id(fn)] = index
        self.eager_fns.append(fn)
        if self.tape.program and type(self.tape.program[-1]) is list:
            self.tape.program[-1].append(op)
        else:
            self.tape.program.append([op])

    def backward_begin(self, root, grad, retain_graph, create_graph, inputs) -> None:
        if create_graph or inputs is not None:
            raise JitError("jit: create_graph=True and tx.grad are not supported inside a jitted function")
        self.walking += 1
        slot = self.slot_of.get(id(grad.data))
        seed = ("slot", slot) if slot is not None else ("const", grad.data.copy())
        if root.grad_fn is None:
            step = Backward(None, self._target(root)[1], seed, [], root.backend, retain_graph)
        else:
            root_entry = self.entry_of.get(id(root.grad_fn))
            if root_entry is None:
                raise JitError("jit: backward() from a tensor computed outside the function")
            nodes = self._walk(root_entry)
            self.consumed.update(node.index for node in nodes)
            step = Backward(root_entry, None, seed, nodes, root.backend, retain_graph)
        self.tape.program.append(step)

    def backward(self, fn, grad, grads, seconds) -> None:
        self.grad_shapes[self.entry_of[id(fn)]] = [None if g is None else g.shape for g in grads]

    def backward_end(self) -> None:
        """Now that the walk ran, mark the routes that need a broadcast sum (`sum_to`) and drop
        that check from the others: the shapes the backward returned are known."""
        self.walking -= 1
        step = self.tape.program[-1]
        for node in step.nodes:
            shapes = self.grad_shapes.get(node.index)
            if shapes is not None:
                node.routes = tuple((i, to_node, where, shape, shapes[i] != shape)
                                    for i, to_node, where, shape, _ in node.routes)

    def _walk(self, root: int) -> list[Node]:
        """The nodes the engine visits from op `root`: those reachable through inputs that
        require grad, by descending op number (= its topological order by sequence number)."""
        reached, nodes = {root}, []
        for index in range(root, -1, -1):
            if index not in reached:
                continue
            op, fn = self.tape.ops[index], self.eager_fns[index]
            if fn.hooks:
                raise JitError(f"jit: a hook on the result of {op.cls.__name__}; tensor hooks on intermediate "
                               "results are not replayed")
            routes = []
            for i, target in enumerate(op.targets):
                if target is None:
                    continue
                to_node, where = target
                if to_node:
                    reached.add(where)
                routes.append((i, to_node, where, self.tape.slot_types[op.ins[i]][0], True))
            nodes.append(Node(index, op.ins, tuple(routes)))
        return nodes

    def call(self, function, args, kwargs, result) -> None:
        if self.walking:
            return
        self.tape.program.append(Call(self.tape.calls, function, args, kwargs))
        self.call_of[id(result)] = self.tape.calls
        self.alive.append(result)
        self.tape.calls += 1

    def read(self, t) -> None:
        if id(t.data) in self.slot_of:
            raise JitError(f"jit: the value of a tensor of shape {t.shape} was read (item(), numpy() or print) "
                           "while recording; a replay cannot follow Python that depends on values. "
                           "Return the tensor and read it after the call")

    # -- the end -------------------------------------------------------------------------------
    def finish(self, result: Any) -> Tape:
        tape = self.tape
        tape.output = self._output(result)
        tensors = [t for _, t in tape.captured]
        tape.guard = (tuple(tensors), [t.requires_grad for t in tensors])
        self._plan_frees()
        return tape

    def _output(self, value: Any) -> tuple:
        if isinstance(value, Tensor):
            slot = self.slot_of.get(id(value.data))
            if slot is None:
                raise JitError(f"jit: the function returned a tensor of shape {value.shape} that no op or "
                               "argument made; a replay could not give it anew")
            entry = self.entry_of.get(id(value.grad_fn)) if value.grad_fn is not None else None
            if entry is not None and entry not in self.consumed:
                if self.tape.differentiable is not None:
                    raise JitError("jit: the function returns two results with a graph; return one")
                self.tape.differentiable = (slot, entry, self._walk(entry))
            return ("tensor", slot, value.backend)
        if id(value) in self.call_of:
            return ("call", self.call_of[id(value)])
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, [self._output(v) for v in value])
        if isinstance(value, dict):
            return ("dict", [(k, self._output(v)) for k, v in value.items()])
        if value is None or isinstance(value, (bool, int, float, str)):
            return ("const", value)
        raise JitError(f"jit: the function returned a {type(value).__name__}; return Tensors, numbers "
                       "or what optimizer calls returned")

    def _plan_frees(self) -> None:
        """Give each slot back at its last use, as the eager graph lets go of an array once the
        last node holding it is released: forward reads, backward reads, then never."""
        tape, last = self.tape, {}
        keep = set()  # what the result or a later walk outside the function still needs
        for spec in _slots_in(tape.output):
            keep.add(spec)
        if tape.differentiable is not None:
            keep.add(tape.differentiable[0])
            keep.update(i for node in tape.differentiable[2] for i in node.ins)
        for step in tape.program:
            if type(step) is list:
                for op in step:
                    for slot in (*op.ins, *_dynamic_slots(op)):
                        last[slot] = op
            elif type(step) is Backward:
                if step.seed[0] == "slot":
                    last[step.seed[1]] = step
                for node in step.nodes:
                    for slot in node.ins:
                        last[slot] = node
        owners: dict[int, list] = {}
        captured = {slot for slot, _ in tape.captured} | {slot for slot, _ in tape.args}
        for slot, user in last.items():
            if slot not in keep and slot not in captured:
                owners.setdefault(id(user), [user, []])[1].append(slot)
        for user, slots in owners.values():
            user.frees = tuple(slots)


def _dynamic_slots(op: Op) -> list[int]:
    out = []

    def walk(binding):
        kind, ref = binding
        if kind == "slot":
            out.append(ref)
        elif kind == "tuple":
            for b in ref:
                walk(b)

    for _, binding in op.dynamic or ():
        walk(binding)
    return out


def _slots_in(spec: tuple) -> list[int]:
    kind = spec[0]
    if kind == "tensor":
        return [spec[1]]
    if kind in ("tuple", "list"):
        return [s for v in spec[1] for s in _slots_in(v)]
    if kind == "dict":
        return [s for _, v in spec[1] for s in _slots_in(v)]
    return []
