"""Reverse-mode autograd: the op pattern (`Function`), grad mode, and the graph walk.

How to add an op
================
Everything an op needs is in this section; `ops/unary.py` is the shortest worked example.

1. **Write a `Function` subclass** in the `tinygrad_tx/ops/` file of its kind (arith,
   unary, reduce, shape, select, nn, fused, loss, attention). Defining the class
   registers it in `REGISTRY` under its class name; re-export it from
   `tinygrad_tx/ops/__init__.py`.

2. **`forward(self, *arrays, **params)`** computes on raw backend arrays (NumPy or
   CuPy: use `self.xp` for array functions and `self.backend` for random numbers,
   casts and scatter-add, never `numpy` directly). Tensor inputs arrive as
   positional arrays in the order given to `apply`; keyword arguments of `apply`
   arrive as `params` (axes, shapes, flags: plain Python values). Return one array.

3. **Declare what backward keeps.** The engine already keeps the input arrays and
   hands them to backward. Anything else backward needs (an output, a mask, a
   param) is stored on `self` in forward, and every such name is listed in the
   class attribute `saved = ("y", "axis")`. Nothing undeclared may be stored: the
   registry tests check it, the profiler counts exactly these as "held for
   backward", and `release()` frees exactly these after backward.

4. **`backward(self, g, *inputs)`** gets the gradient of the output (`g`, shaped
   like the output) and the inputs, and returns a tuple with one gradient per
   Tensor input (None for an input that needs none; `self.needs_grad[i]` says
   which want one, so skip the work for the others). Return the gradient in the
   broadcast shape if that is natural: the engine sums it back to the input's
   shape (`sum_to`) and checks shape and dtype, naming the op when they are wrong.

   To be *twice* differentiable, write backward only with what works on both raw
   arrays and Tensors: the operators `+ - * / ** @`, unary `-`, comparisons,
   indexing `g[i]`; methods `.sum(axis=, keepdims=)`, `.reshape`, `.transpose`,
   `.swapaxes`, `.astype`, `.shape`/`.ndim`/`.dtype`; and from `self.xp` only
   the functions `TensorMath` provides (`exp log sqrt tanh sign where
   broadcast_to ones_like`). Under `backward(create_graph=True)` the engine calls the same
   backward with Tensors and `self.xp = TENSOR_MATH`, so every step of the
   gradient is itself recorded. If backward needs more (in-place updates,
   `scatter_add`, any other `xp` function), derive it on raw arrays and subclass
   `OnceDifferentiable` instead: a second derivative then raises a clear error.

5. **Give users a way in**: a Tensor method (`tensor.py`) or a function
   (`functional.py`) that checks arguments, lifts numbers with `x._pair`, and calls
   `YourOp.apply(*tensors, **params)`.

6. **Test it** (the suite fails until you do). In `tests/engine/test_gradcheck_ops.py`
   add `"YourOp": {"basic": Case(lambda x: x.your_op(), lambda d: [d.n(3, 4)])}` to
   `CASES` (`d.n`, `d.pos`, `d.away`, `d.distinct` draw float64 inputs; each float
   array becomes a Tensor that requires grad; the case must really run your op),
   and add the name to `TWICE` if it is twice differentiable. The suite then runs
   finite differences with a random upstream gradient on every device, a second
   -order check, and checks that forward stored nothing undeclared. Where PyTorch
   has the op, add a row to `tests/engine/test_torch_parity.py` (`UNARY`, `ARITH`,
   ... or a test calling `compare(torch, device, dtype, ours, theirs, *arrays)`).

The engine's side
=================
One backward, two readings: the ordinary backward runs each op's formula on raw
arrays (fast, no graph); `create_graph=True` runs the same lines on Tensors. The
engine, not each op, undoes broadcasting and checks every gradient, walks the
graph in topological order without recursion, and releases each node after use
unless `retain_graph=True`.

`tensor.py` and this module need each other (an op makes a Tensor; a Tensor's
methods apply ops), and `ops/` needs both: this module is imported first, and
binds `Tensor` at its end, once `tensor.py` (which imports `ops` at its own
end) has been defined. That is the one import cycle of the engine.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import operator
from time import perf_counter
from typing import Any, Sequence

from .backend import DeviceError, widened_sum

REGISTRY: dict[str, type["Function"]] = {}
"""Every differentiable op by name; the test suite checks each has a gradcheck case."""

_grad_enabled = True

_observers: list = []
"""Instruments watching every op (see `tinygrad_tx.inspect`); empty unless one is active,
so an ordinary run pays one truthiness check per op and one per backward node."""

clock = itertools.count(1)
"""The engine's one clock: each recorded op takes its `seq` from it and each in-place change
(`Tensor.bump_version`) its `_version`, so "changed after the op used it" is `_version > seq`."""


class no_grad(contextlib.ContextDecorator):
    """Context manager and decorator: ops inside record no graph (inference, optimizer updates).

    A decorator is one instance entered on every call, also before an earlier call
    has exited (recursion), so the modes to restore are kept on a stack.
    """

    enabled = False

    def __init__(self):
        self._previous: list[bool] = []

    def __enter__(self):
        global _grad_enabled
        self._previous.append(_grad_enabled)
        _grad_enabled = self.enabled

    def __exit__(self, *exc):
        global _grad_enabled
        _grad_enabled = self._previous.pop()


class enable_grad(no_grad):
    """The opposite of `no_grad`; the engine uses it for `create_graph=True`."""

    enabled = True


def is_grad_enabled() -> bool:
    return _grad_enabled


class Function:
    """One differentiable op (see "How to add an op" above). Subclasses register by name.

    A recorded node holds `inputs` (the input Tensors), `arrays` (their arrays as
    forward saw them), `needs_grad` (which inputs want a gradient) and the values
    named in `saved`. `release()` drops all of them once backward is done with the
    node: a released node is `released`, and walking it again is a clear error.
    """

    saved: tuple[str, ...] = ()  # what forward stores on self for backward, declared per op
    differentiable_twice = True  # fused ops with a raw-array backward set this False
    hooks = ()  # filled in by Tensor.register_hook on an intermediate tensor
    released = False

    def __init_subclass__(cls, register: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        if register:
            REGISTRY[cls.__name__] = cls

    @property
    def name(self) -> str:
        return type(self).__name__

    def forward(self, *arrays: Any, **params: Any) -> Any:
        raise NotImplementedError

    def backward(self, g: Any, *inputs: Any) -> tuple:
        raise NotImplementedError

    def saved_values(self) -> dict[str, Any]:
        """The values this node keeps for backward beyond its inputs, by name (an op may
        leave one unset when a param makes it unneeded)."""
        return {name: vars(self)[name] for name in self.saved if name in vars(self)}

    def release(self) -> None:
        """Forget the inputs and the saved values, so their memory can be freed."""
        for name in ("inputs", "arrays", *self.saved):
            self.__dict__.pop(name, None)
        self.released = True

    @classmethod
    def apply(cls, *inputs: "Tensor", **params: Any) -> "Tensor":
        """Run forward on the inputs' arrays and, if any input wants a gradient, record the node."""
        backend = inputs[0].backend
        for t in inputs:
            if t.backend is not backend:
                raise DeviceError(f"{cls.__name__}: inputs are on different devices "
                                  f"({backend.name} and {t.backend.name}); move one with .to()")
        fn = cls()
        fn.backend, fn.xp = backend, backend.xp
        arrays = [t.data for t in inputs]
        try:
            data = fn.forward(*arrays, **params) if not _observers else _watch_forward(fn, inputs, arrays, params)
        except (ValueError, IndexError) as e:
            raise op_error(e, cls.__name__, [t.shape for t in inputs]) from None
        out = Tensor._from_op(data, backend)
        if _grad_enabled:
            needs_grad = [t.requires_grad for t in inputs]
            if True in needs_grad:
                fn.inputs, fn.arrays, fn.needs_grad = inputs, arrays, needs_grad
                fn.seq = next(clock)
                out.requires_grad, out.grad_fn = True, fn
        return out

    def __repr__(self) -> str:
        if self.released:
            return f"<{self.name}, graph released>"
        args = ", ".join(t.name or str(t.shape) for t in self.inputs)
        return f"<{self.name}({args})>"


def op_error(e: Exception, op: str, shapes: Sequence[tuple]) -> Exception:
    """`e` with the op and its input shapes named, not just NumPy's words; unchanged if an
    op inside this one (a jit replay runs many) already named itself. Its traceback still
    shows where the error arose."""
    if getattr(e, "op_named", False):
        return e
    named = type(e)(f"{op} on inputs of shape {', '.join(str(s) for s in shapes)}: {e}")
    named.with_traceback(e.__traceback__)
    named.op_named = True
    return named


class OnceDifferentiable(Function, register=False):
    """Base of fused ops whose backward works on raw arrays (fast, but no second derivative)."""

    differentiable_twice = False


class TensorMath:
    """The array-module functions backward formulas use, on Tensors (`self.xp` under create_graph)."""

    exp = staticmethod(lambda x: x.exp())
    log = staticmethod(lambda x: x.log())
    sqrt = staticmethod(lambda x: x.sqrt())
    tanh = staticmethod(lambda x: x.tanh())
    broadcast_to = staticmethod(lambda x, shape: x.expand(shape))
    sign = staticmethod(lambda x: Tensor._from_op(x.backend.xp.sign(x.data), x.backend))  # a constant
    ones_like = staticmethod(lambda x: Tensor._from_op(x.backend.xp.ones_like(x.data), x.backend))  # a constant

    @staticmethod
    def where(cond, a, b):
        from .ops import where

        return where(cond, a, b)


TENSOR_MATH = TensorMath()


# -- the graph walk --------------------------------------------------------------------

_sequence_number = operator.attrgetter("seq")


def topological_order(root: "Tensor") -> list[Function]:
    """The nodes behind `root`, each before the nodes that produced its inputs.

    Every recorded node carries a sequence number from a global counter, and an
    op's inputs always exist before the op runs, so sorting the reachable nodes
    by descending number is a topological order. Collecting them uses an
    explicit stack, not recursion, so a 10,000-op chain does not hit Python's
    recursion limit; a node reached twice (fan-out) is collected once.
    """
    seen, stack = {root.grad_fn}, [root.grad_fn]
    while stack:
        fn = stack.pop()
        if fn.released:
            raise RuntimeError(
                f"backward through {fn.name} a second time: its saved values were freed after "
                "the first backward; pass retain_graph=True to the first call")
        for t in fn.inputs:
            producer = t.grad_fn
            if producer is not None and producer not in seen:
                seen.add(producer)
                stack.append(producer)
    return sorted(seen, key=_sequence_number, reverse=True)


def run_backward(root: "Tensor", grad: "Tensor", retain_graph: bool = False,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None):
    """Propagate `grad` (d loss / d root) to every leaf behind `root`.

    Each node's output gradient is complete before the node runs (topological
    order), and a tensor used twice gets the sum of both uses (fan-out). Leaves
    accumulate into `.grad`. With `inputs`, nothing is accumulated and the
    gradients of those tensors are returned instead (that is `tx.grad`).
    """
    sink = _Sink(inputs, root.backend)
    _walks.append(sink)
    try:
        return _walk(root, grad, retain_graph, create_graph, sink)
    finally:
        _walks.pop()


def _walk(root: "Tensor", grad: "Tensor", retain_graph: bool, create_graph: bool, sink: "_Sink"):
    if root.grad_fn is None:
        sink.add(root, grad if create_graph else grad.data)
        return sink.finish(create_graph)
    order = topological_order(root)
    if create_graph:
        _check_twice_differentiable(order)
    sink.watch(order)
    pending = {root.grad_fn: grad if create_graph else grad.data}  # node -> gradient of its output
    with enable_grad() if create_graph else no_grad():
        for fn in order:
            if sink.waiting:  # leaves with post-accumulate-grad hooks: deliver those no node left uses
                sink.deliver_finished(fn.seq, create_graph)
            g = pending.pop(fn, None)
            if g is not None:  # None: every use of its output sent nothing back, so neither does it
                if fn.hooks:
                    g = _run_hooks(fn.hooks, g, fn.backend)
                sink.capture(fn, g)
                for t, gt in _input_gradients(fn, g, create_graph):
                    _route(t, gt, pending, sink)
            if not retain_graph:
                fn.release()
        return sink.finish(create_graph)


def _input_gradients(fn: Function, g: Any, create_graph: bool):
    """Run one node's backward; yield (input, gradient) for each input that takes one,
    the gradient summed to the input's shape and checked."""
    if _observers:
        grads = _watch_backward(fn, g, create_graph)
    else:
        grads = fn.backward(g, *fn.arrays) if not create_graph else _tensor_backward(fn, g)
    if len(grads) != len(fn.inputs):
        raise RuntimeError(f"{fn.name}.backward returned {len(grads)} gradients for "
                           f"{len(fn.inputs)} inputs (one per input, None where none is needed)")
    for t, gt, array in zip(fn.inputs, grads, fn.arrays):
        _check_unchanged(fn, t, array)
        if gt is not None and t.requires_grad:
            yield t, _fit(fn, gt, array)


def _check_unchanged(fn: Function, t: "Tensor", array: Any) -> None:
    """Refuse an input whose data was replaced or updated in place after `fn` used it."""
    if t.data is not array or t._version > fn.seq:
        raise RuntimeError(
            f"an input of {fn.name} (shape {t.shape}) was modified after the op used it; its "
            "gradient would be wrong. Change tensors only after backward, or work on a copy")


def _fit(fn: Function, gt: Any, array: Any) -> Any:
    """The gradient summed back over broadcast axes to the input's shape, and checked."""
    if gt.shape != array.shape:
        gt = sum_to(gt, array.shape)
        if gt.shape != array.shape:
            raise RuntimeError(f"{fn.name}.backward returned a gradient of shape {gt.shape} "
                               f"for an input of shape {array.shape}")
    if gt.dtype is not array.dtype and gt.dtype != array.dtype:
        raise RuntimeError(f"{fn.name}.backward returned a {gt.dtype} gradient for a {array.dtype} input")
    return gt


def _route(t: "Tensor", gt: Any, pending: dict, sink: "_Sink") -> None:
    """Send a gradient on: to the sink for a leaf, to the node that made `t` otherwise.

    A tensor used k times gets k gradients; they are summed before its node runs."""
    producer = t.grad_fn
    if producer is None:
        sink.add(t, gt)
    elif producer in pending:
        pending[producer] = pending[producer] + gt  # fan-out: the uses add up
    else:
        pending[producer] = gt


def _check_twice_differentiable(order: list[Function]) -> None:
    blocking = next((fn for fn in order if not fn.differentiable_twice), None)
    if blocking is not None:
        raise RuntimeError(f"{blocking.name} is once-differentiable: its backward works on raw "
                           "arrays, so create_graph=True cannot give second derivatives through it")


def _watch_forward(fn: Function, inputs: Sequence["Tensor"], arrays: list, params: dict) -> Any:
    """`fn.forward`, timed and shown to every observer: the path ops take while an instrument is on.

    An observer gets `forward(fn, inputs, output_array, seconds, recorded)`, where
    `recorded` says whether the node will be kept for backward, and may raise.
    """
    start = perf_counter()
    data = fn.forward(*arrays, **params)
    seconds = perf_counter() - start
    if type(data) is not fn.backend.array_type:  # shown as the tensor will hold it (Tensor._from_op)
        data = fn.backend.as_array(data)
    recorded = _grad_enabled and any(t.requires_grad for t in inputs)
    for observer in tuple(_observers):
        observer.forward(fn, inputs, data, seconds, recorded)
        observer.op(fn, inputs, params, data, recorded)
    return data


def watch_walk(root: "Tensor", grad: "Tensor", retain_graph: bool, create_graph: bool,
               inputs: Sequence["Tensor"] | None):
    """`run_backward` between `backward_begin(root, grad, retain_graph, create_graph, inputs)`
    and `backward_end()` shown to every observer: ops run inside it (a leaf's `.grad + g`)
    belong to the walk, not to the program around it (what `tx.jit` needs to know)."""
    for observer in tuple(_observers):
        observer.backward_begin(root, grad, retain_graph, create_graph, inputs)
    try:
        return run_backward(root, grad, retain_graph, create_graph, inputs)
    finally:
        for observer in tuple(_observers):
            observer.backward_end()


def show_read(t: "Tensor | None", how: str = "read on the host (item(), numpy(), print or if)") -> None:
    """Show observers that a value leaves the graph (`how`): read on the host, where Python may
    branch on it, or cast or copied outside ops; `t` None: numbers drawn outside ops (`tx.randn`).
    A recording such as `tx.jit`'s could only keep such a value fixed."""
    for observer in tuple(_observers):
        observer.read(t, how)


def show_side_effect(how: str) -> None:
    """Show observers a change made outside ops and replayable calls (`how`: a tensor's `.data`
    replaced, a hook registered, an instrument turned on). A recording such as `tx.jit`'s
    refuses it: a replay makes only the ops and calls, so it would not make this change again."""
    for observer in tuple(_observers):
        observer.side_effect(how)


def show_module(module) -> None:
    """Show observers that a module is called (what `tx.jit` records: its mode and hooks)."""
    for observer in tuple(_observers):
        observer.module(module)


def replayable(function):
    """Mark a function that changes state outside the graph, on raw arrays (an optimizer's
    `step` and `zero_grad`, `clip_grad_norm`), so that observers see each call as
    `call(function, args, kwargs, result)`: `tx.jit` records it and calls it again at replay."""

    @functools.wraps(function)
    def announced(*args, **kwargs):
        result = function(*args, **kwargs)
        for observer in tuple(_observers):
            observer.call(function, args, kwargs, result)
        return result

    return announced


def _watch_backward(fn: Function, g: Any, create_graph: bool) -> tuple:
    """`fn.backward`, timed and shown to every observer as `backward(fn, g, grads, seconds)`,
    before the engine reduces the gradients to the inputs' shapes and releases the node."""
    start = perf_counter()
    grads = _tensor_backward(fn, g) if create_graph else fn.backward(g, *fn.arrays)
    seconds = perf_counter() - start
    for observer in tuple(_observers):
        observer.backward(fn, g, grads, seconds)
    return grads


def _tensor_backward(fn: Function, g: "Tensor") -> tuple:
    """Run `fn.backward` on Tensors, so the gradient computation is itself recorded."""
    fn.xp = TENSOR_MATH  # the same formulas, now on Tensors
    try:
        return fn.backward(g, *fn.inputs)
    finally:
        fn.xp = fn.backend.xp


def sum_to(g: Any, shape: tuple) -> Any:
    """Sum a gradient (array or Tensor) over the axes broadcasting added (leading) or
    stretched (size 1 in `shape`): the one place broadcasting is undone."""
    lead = len(g.shape) - len(shape)
    if lead < 0:
        return g  # cannot be summed to a larger shape; the caller's shape check reports it
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    if not axes:
        return g
    summed = g.sum(axis=axes, keepdims=True) if isinstance(g, Tensor) else widened_sum(g, axes, keepdims=True)
    return summed.reshape(shape)


def _run_hooks(hooks, g: Any, backend) -> Any:
    """A hook sees the gradient as a Tensor and may return a replacement (None keeps it)."""
    raw = not isinstance(g, Tensor)
    g = Tensor._from_op(g, backend) if raw else g
    for hook in hooks:
        replaced = hook(g)
        g = g if replaced is None else replaced
    return g.data if raw else g


class _Sink:
    """Where gradients end up: leaves' `.grad`, or, for `tx.grad`, the requested tensors.

    A leaf's contributions are summed while the walk runs and delivered once,
    so its hooks see the whole gradient, as with intermediate tensors. Most leaves
    are delivered at the end; a leaf with a post-accumulate-grad hook is delivered
    as soon as the walk has run every node that uses it, so that its hook (say, an
    all-reduce of the gradient) starts while backward still works on earlier layers.
    """

    def __init__(self, inputs, backend):
        self.inputs, self.backend = inputs, backend
        self.nodes = {t.grad_fn: id(t) for t in inputs or () if t.grad_fn is not None}
        self.captured: dict[int, Any] = {}
        self.leaves: dict[int, list] = {}  # id -> [leaf, summed gradient]
        self.waiting: list[tuple[int, "Tensor"]] = []  # (seq of its last use, leaf), last-used first
        self.owned: set[int] = set()
        self.callbacks: list = []  # see queue_callback

    def watch(self, order: list[Function]) -> None:
        """Note, for each leaf with a post-accumulate-grad hook, the last node (in walk order)
        that uses it. Costs nothing unless such a hook was ever registered."""
        if not _ready_hooks_registered or self.inputs is not None:
            return
        last_use = {}
        for fn in order:  # descending seq: the final write per leaf is its last use in the walk
            for t in fn.inputs:
                if t._ready_hooks and t.grad_fn is None:
                    last_use[id(t)] = (fn.seq, t)
        self.waiting = sorted(last_use.values(), key=lambda item: item[0])  # pop() gives the highest

    def deliver_finished(self, seq: int, create_graph: bool) -> None:
        """Deliver the waiting leaves whose last use has a sequence number above `seq`
        (the walk is past them)."""
        while self.waiting and self.waiting[-1][0] > seq:
            _, leaf = self.waiting.pop()
            entry = self.leaves.pop(id(leaf), None)
            if entry is not None:  # None: every use sent no gradient back
                self._deliver(leaf, entry[1], create_graph)

    def capture(self, fn: Function, g: Any) -> None:
        """Keep the gradient of a requested intermediate tensor (`tx.grad`)."""
        if fn in self.nodes:
            self.captured[self.nodes[fn]] = g

    def add(self, leaf: "Tensor", g: Any) -> None:
        entry = self.leaves.get(id(leaf))
        if entry is None:
            self.leaves[id(leaf)] = [leaf, g]
        else:
            entry[1] = entry[1] + g  # out of place: another node may still read either array

    def finish(self, create_graph: bool):
        for leaf, g in self.leaves.values():
            self._deliver(leaf, g, create_graph)
        if self.inputs is not None:
            return [self._tensor(self.captured.get(id(t))) for t in self.inputs]
        for callback in self.callbacks:
            callback()

    def _deliver(self, leaf: "Tensor", g: Any, create_graph: bool) -> None:
        if leaf._hooks:
            g = _run_hooks(leaf._hooks, g, leaf.backend)
        if self.inputs is not None:
            self.captured[id(leaf)] = g
            return
        g = g if create_graph else self._tensor(_own(g, self.owned, self.backend))
        leaf.grad = g if leaf.grad is None else leaf.grad + g
        for hook in leaf._ready_hooks:
            hook(leaf)

    def _tensor(self, g: Any) -> "Tensor | None":
        return g if g is None or isinstance(g, Tensor) else Tensor._from_op(g, self.backend)


_walks: list[_Sink] = []  # the backward walks running now (a hook may start another)
_ready_hooks_registered = False  # set by the first Tensor.register_post_accumulate_grad_hook


def queue_callback(callback) -> None:
    """Call `callback()` once the backward now running has delivered every gradient (once
    per walk, however often it is queued). DataParallel waits for its all-reduces there,
    so that `loss.backward()` returns with the averaged gradients in place."""
    if not _walks:
        raise RuntimeError("queue_callback outside backward: call it from a gradient hook")
    callbacks = _walks[-1].callbacks
    if callback not in callbacks:
        callbacks.append(callback)


def _own(g: Any, owned: set, backend) -> Any:
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


def grad(output: "Tensor", inputs: Sequence["Tensor"], grad_output: "Tensor | None" = None,
         retain_graph: bool = False, create_graph: bool = False) -> list:
    """d output / d inputs without touching any `.grad` (PyTorch's `autograd.grad`)."""
    return output._backward(grad_output, retain_graph or create_graph, create_graph, inputs)


from .tensor import Tensor  # noqa: E402  (Tensor uses this module; import after it is defined)
