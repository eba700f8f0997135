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
   An op whose backward always returns each input's own shape (a reduction, a
   reshape, an op that sums its own broadcast) says `broadcasts = False`, so that
   the backward plan (`tx.backward_plan`) shows no sum back where none happens.

   To be *twice* differentiable, write backward only with what works on both raw
   arrays and Tensors: the operators `+ - * / ** @`, unary `-`, comparisons,
   indexing `g[i]`; methods `.sum(axis=, keepdims=)`, `.reshape`, `.transpose`,
   `.swapaxes`, `.astype`, `.shape`/`.ndim`/`.dtype`; and from `self.xp` only
   the functions `TensorMath` (tensor.py) provides (`exp log sqrt tanh sign where
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
walk itself is decided first, as data (`tinygrad_tx/plan.py`, `tx.backward_plan`):
the nodes in topological order, where each gradient goes, where fan-out adds and
broadcasting is undone, when each node is released and each leaf delivered.
`run_plan` below then runs it, checking every gradient's count, shape and dtype
(the plan has already refused inputs changed since forward).

`tensor.py` and this module need each other (an op makes a Tensor; a Tensor's
methods apply ops), and `ops/` needs both: this module is imported first, and
binds `Tensor` (and `TENSOR_MATH`) at its end, once `tensor.py` (which imports `ops` at its own
end) has been defined. That is the one import cycle of the engine.
"""
from __future__ import annotations

import contextlib
import itertools
from time import perf_counter
from typing import Any, Sequence

from . import observers
from .backend import DeviceError, widened_sum
from .plan import BackwardPlan, backward_plan

REGISTRY: dict[str, type["Function"]] = {}
"""Every differentiable op by name; the test suite checks each has a gradcheck case."""

_grad_enabled = True

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


def set_grad_enabled(mode: bool) -> None:
    """Turn graph recording on or off for good (PyTorch's function of the same name); prefer
    `no_grad` and `enable_grad`, which restore the mode they found."""
    global _grad_enabled
    _grad_enabled = bool(mode)


class Function:
    """One differentiable op (see "How to add an op" above). Subclasses register by name.

    A recorded node holds `inputs` (the input Tensors), `arrays` (their arrays as
    forward saw them), `needs_grad` (which inputs want a gradient) and the values
    named in `saved`. `release()` drops all of them once backward is done with the
    node: a released node is `released`, and walking it again is a clear error.
    """

    saved: tuple[str, ...] = ()  # what forward stores on self for backward, declared per op
    differentiable_twice = True  # fused ops with a raw-array backward set this False
    broadcasts = True  # may return an input's gradient in the output's (broadcast) shape; see step 4
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
        held = self.__dict__
        held.pop("inputs", None), held.pop("arrays", None)
        for name in self.saved:
            held.pop(name, None)
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
            data = fn.forward(*arrays, **params) if not observers.active else _watch_forward(fn, inputs, arrays, params)
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
    op inside this one (a replayed program runs many) already named itself. Its traceback still
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


# -- running the plan ----------------------------------------------------------------

def run_backward(root: "Tensor", grad: "Tensor", retain_graph: bool = False,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None):
    """Propagate `grad` (d loss / d root) to every leaf behind `root`: make the plan of the
    walk (`tinygrad_tx.plan`), then run it. Leaves accumulate into `.grad`. With `inputs`,
    nothing is accumulated and the gradients of those tensors are returned instead (that
    is `tx.grad`)."""
    plan = backward_plan(root, retain_graph)
    plan.check_runnable()
    if create_graph:
        _check_twice_differentiable(plan)
    seed = grad if create_graph else grad.data
    if not observers.active:
        return run_plan(plan, seed, root.backend, create_graph, inputs)
    observers.show_backward_begin(root, grad, plan, create_graph, inputs)
    try:
        return run_plan(plan, seed, root.backend, create_graph, inputs)
    finally:
        observers.show_backward_end()


def run_plan(plan: BackwardPlan, seed: Any, backend, create_graph: bool = False,
             inputs: Sequence["Tensor"] | None = None):
    """Run the steps of `plan` in order, from `seed` (the root's gradient).

    A step takes the gradient pending at its node, lets the node's tensor hooks
    replace it, runs the node's backward, checks what it returns and sends it
    along the step's routes: stored where it is the first to arrive, added where
    it is not. A node that nothing sent a gradient to sends nothing on.
    """
    nodes, routes, delivers, release = plan.nodes, plan.routes, plan.delivers, not plan.retain_graph
    pending = [None] * len(nodes)  # step -> the gradient of its node's output, summed so far
    watching = observers.active  # the list itself: an instrument turned on by a hook is seen
    with LeafSink(plan.leaves, backend, create_graph, inputs) as sink, \
            enable_grad() if create_graph else no_grad():
        arrived = sink.grads  # leaf -> its gradient, summed so far
        if nodes:
            pending[0] = seed
        else:
            sink.add(0, seed)  # backward from a leaf
        for i, fn in enumerate(nodes):
            g, pending[i] = pending[i], None
            if g is not None:
                if fn.hooks:
                    g = _run_hooks(fn.hooks, g, fn.backend)
                if inputs is not None:
                    sink.capture(fn, g)
                start = perf_counter() if watching else None
                arrays = fn.arrays
                grads = fn.backward(g, *arrays) if not create_graph else _tensor_backward(fn, g)
                if len(grads) != len(arrays):
                    _refuse_count(fn, grads)
                sent = [None] * len(grads) if start is not None else None
                for k, to, leaf, shape in routes[i]:
                    gt, array = grads[k], arrays[k]
                    if gt is None:
                        continue
                    if gt.shape != array.shape or gt.dtype is not array.dtype:
                        gt = _fit(fn, gt, array, shape)
                    sums = arrived if leaf else pending
                    sums[to] = gt if sums[to] is None else sums[to] + gt  # fan-out: the uses add up
                    if sent is not None:
                        sent[k] = gt
                if start is not None:
                    observers.show_backward(fn, g, sent, perf_counter() - start)
            if release:
                fn.release()
            if delivers and i in delivers and inputs is None:
                for k in delivers[i]:
                    sink.deliver(k)
        return sink.finish()


def _refuse_count(fn: Function, grads: tuple) -> None:
    """Refuse a backward that did not return one gradient per input."""
    raise RuntimeError(f"{fn.name}.backward returned {len(grads)} gradients for "
                       f"{len(fn.inputs)} inputs (one per input, None where none is needed)")


def _fit(fn: Function, gt: Any, array: Any, shape: tuple | None) -> Any:
    """The gradient summed back to `shape` where the plan says a broadcast may need undoing,
    and checked against the input's shape and dtype."""
    if gt.shape != array.shape:
        if shape is not None:
            gt = sum_to(gt, shape)
        if gt.shape != array.shape:
            raise RuntimeError(f"{fn.name}.backward returned a gradient of shape {gt.shape} "
                               f"for an input of shape {array.shape}")
    if gt.dtype is not array.dtype and gt.dtype != array.dtype:
        raise RuntimeError(f"{fn.name}.backward returned a {gt.dtype} gradient for a {array.dtype} input")
    return gt


def _check_twice_differentiable(plan: BackwardPlan) -> None:
    blocking = next((fn for fn in plan.nodes if not fn.differentiable_twice), None)
    if blocking is not None:
        raise RuntimeError(f"{blocking.name} is once-differentiable: its backward works on raw "
                           "arrays, so create_graph=True cannot give second derivatives through it")


def _watch_forward(fn: Function, inputs: Sequence["Tensor"], arrays: list, params: dict) -> Any:
    """`fn.forward`, timed and shown to the observers: the path ops take while an instrument is on."""
    start = perf_counter()
    data = fn.forward(*arrays, **params)
    seconds = perf_counter() - start
    if type(data) is not fn.backend.array_type:  # shown as the tensor will hold it (Tensor._from_op)
        data = fn.backend.as_array(data)
    observers.show_forward(fn, inputs, params, data, seconds, _grad_enabled and any(t.requires_grad for t in inputs))
    return data


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


class LeafSink:
    """Where a backward's gradients end up: the leaves' `.grad`, or, for `tx.grad`, the
    tensors asked for. `tx.jit`'s replay of a backward delivers through one as well.

    A leaf's gradients are summed in `grads` while the walk runs and delivered once
    (`deliver`: its hooks, then `.grad`, then its post-accumulate-grad hooks), so its
    hooks see the whole gradient. `finish` delivers the leaves not delivered yet, in the
    plan's order, then runs the callbacks queued during the walk (`queue_callback`).
    While it is entered (`with`), it is the backward now running.
    """

    def __init__(self, leaves: Sequence["Tensor"], backend, create_graph: bool = False,
                 inputs: Sequence["Tensor"] | None = None):
        self.leaves, self.backend, self.create_graph, self.inputs = leaves, backend, create_graph, inputs
        self.grads: list = [None] * len(leaves)  # leaf number -> its summed gradient, until delivered
        self.nodes = {t.grad_fn: id(t) for t in inputs or () if t.grad_fn is not None}
        self.captured: dict[int, Any] = {}
        self.owned: set[int] = set()
        self.callbacks: list = []  # see queue_callback

    def __enter__(self) -> "LeafSink":
        _walks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _walks.pop()

    def add(self, k: int, g: Any) -> None:
        """One more gradient for leaf `k`: stored, or added out of place (another node may still read either)."""
        self.grads[k] = g if self.grads[k] is None else self.grads[k] + g

    def capture(self, fn: Function, g: Any) -> None:
        """Keep the gradient of a requested intermediate tensor (`tx.grad`)."""
        if fn in self.nodes:
            self.captured[self.nodes[fn]] = g

    def deliver(self, k: int) -> None:
        """Give leaf `k` its summed gradient, if it got one (none: every use sent None)."""
        g, leaf = self.grads[k], self.leaves[k]
        if g is None:
            return
        self.grads[k] = None
        if leaf._hooks:
            g = _run_hooks(leaf._hooks, g, leaf.backend)
        if self.inputs is not None:
            self.captured[id(leaf)] = g
            return
        g = g if self.create_graph else self._tensor(_own(g, self.owned, self.backend))
        leaf.grad = g if leaf.grad is None else leaf.grad + g
        for hook in leaf._ready_hooks:
            hook(leaf)

    def finish(self) -> list | None:
        """Deliver the rest; the gradients asked for (`tx.grad`), or None after the callbacks ran."""
        for k in range(len(self.leaves)):
            self.deliver(k)
        if self.inputs is not None:
            return [self._tensor(self.captured.get(id(t))) for t in self.inputs]
        for callback in self.callbacks:
            callback()
        return None

    def _tensor(self, g: Any) -> "Tensor | None":
        return g if g is None or isinstance(g, Tensor) else Tensor._from_op(g, self.backend)


_walks: list[LeafSink] = []  # the backward walks running now (a hook may start another)


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


from .tensor import TENSOR_MATH, Tensor  # noqa: E402  (tensor.py uses this module; import after it is defined)
