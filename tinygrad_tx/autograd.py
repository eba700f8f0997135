"""Reverse-mode autograd: the op pattern (`Function`), grad mode, and the graph walk.

An op is a small `Function` subclass. `forward(self, *arrays)` works on raw
backend arrays; `backward(self, g, *inputs)` gets the gradient of the op's
output and the op's inputs, and returns one gradient per input.

One backward, two readings. Backward formulas are written with operators and
`self.xp` functions only (`g * (1 - xp.tanh(x) ** 2)`), so the same lines run

- on raw arrays, with `self.xp` the backend's NumPy/CuPy: the ordinary, fast
  backward, with no graph and no per-op Tensor overhead; or
- on Tensors, with `self.xp` = `TENSOR_MATH`: under `create_graph=True`, where
  every step of the gradient is itself recorded, giving second derivatives.

Fused ops (softmax, layer norm, cross-entropy, attention) derive their backward
by hand on raw arrays and are once-differentiable: asking them for a second
derivative raises a clear error.

The engine, not each op, undoes broadcasting (summing a gradient back to its
input's shape) and checks every gradient's shape and dtype, so an op's backward
stays as short as its math.
"""
from __future__ import annotations

import contextlib
import itertools
import operator
from time import perf_counter
from typing import Any, Sequence

from .backend import DeviceError

REGISTRY: dict[str, type["Function"]] = {}
"""Every differentiable op by name; the test suite checks each has a gradcheck case."""

_grad_enabled = True

_observers: list = []
"""Instruments watching every op (see `tinygrad_tx.inspect`); empty unless one is active,
so an ordinary run pays one truthiness check per op and one per backward node."""


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
    """One differentiable op. Subclasses are registered by name when defined.

    While a graph is kept, `inputs` holds the input Tensors, `arrays` their arrays
    as forward saw them, and `needs_grad` which inputs want a gradient, so that
    backward can skip the others (the 2 in `x * 2` costs nothing).
    """

    differentiable_twice = True  # fused ops with a raw-array backward set this False
    hooks = ()  # filled in by Tensor.register_hook on an intermediate tensor

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
        except (ValueError, IndexError) as e:  # name the op and the shapes, not just NumPy's words
            shapes = ", ".join(str(t.shape) for t in inputs)
            raise type(e)(f"{cls.__name__} on inputs of shape {shapes}: {e}") from None
        out = Tensor._from_op(data, backend)
        if _grad_enabled:
            needs_grad = [t.requires_grad for t in inputs]
            if True in needs_grad:
                fn.inputs, fn.arrays, fn.needs_grad = inputs, arrays, needs_grad
                fn.seq = next(clock)
                out.requires_grad, out.grad_fn = True, fn
        return out

    def __repr__(self) -> str:
        if "inputs" not in self.__dict__:
            return f"<{self.name}, graph released>"
        args = ", ".join(t.name or str(t.shape) for t in self.inputs)
        return f"<{self.name}({args})>"


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

    @staticmethod
    def where(cond, a, b):
        from .ops import where

        return where(cond, a, b)


TENSOR_MATH = TensorMath()


# -- the graph walk --------------------------------------------------------------------

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
        try:
            inputs = fn.inputs
        except AttributeError:
            raise RuntimeError(
                f"backward through {fn.name} a second time: its saved values were freed after "
                "the first backward; pass retain_graph=True to the first call") from None
        for t in inputs:
            producer = t.grad_fn
            if producer is not None and producer not in seen:
                seen.add(producer)
                stack.append(producer)
    return sorted(seen, key=_sequence_number, reverse=True)


_sequence_number = operator.attrgetter("seq")
clock = itertools.count(1)
"""The engine's one clock: each recorded op takes its `seq` from it and each in-place change
(`Tensor.bump_version`) its `_version`, so "changed after the op used it" is `_version > seq`."""


def run_backward(root: "Tensor", grad: "Tensor", retain_graph: bool = False,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None):
    """Propagate `grad` (d loss / d root) to every leaf behind `root`.

    Each node's output gradient is complete before the node runs (topological
    order), and a tensor used twice gets the sum of both uses (fan-out). Leaves
    accumulate into `.grad`. With `inputs`, nothing is accumulated and the
    gradients of those tensors are returned instead (that is `tx.grad`).
    """
    sink = _Sink(inputs, root.backend)
    if root.grad_fn is None:
        sink.add(root, grad if create_graph else grad.data)
        return sink.finish(create_graph)
    order = topological_order(root)
    if create_graph:
        blocking = next((fn for fn in order if not fn.differentiable_twice), None)
        if blocking is not None:
            raise RuntimeError(f"{blocking.name} is once-differentiable: its backward works on raw "
                               "arrays, so create_graph=True cannot give second derivatives through it")
    pending = {root.grad_fn: grad if create_graph else grad.data}
    with enable_grad() if create_graph else no_grad():
        for fn in order:
            g = pending.pop(fn, None)
            if g is None:  # the ops that use its output returned None for it: nothing flows back
                if not retain_graph:
                    fn.__dict__.clear()
                continue
            if fn.hooks:
                g = _run_hooks(fn.hooks, g, fn.backend)
            if sink.nodes:
                sink.capture(fn, g)
            if _observers:
                grads = _watch_backward(fn, g, create_graph)
            else:
                grads = fn.backward(g, *fn.arrays) if not create_graph else _tensor_backward(fn, g)
            if len(grads) != len(fn.inputs):
                raise RuntimeError(f"{fn.name}.backward returned {len(grads)} gradients for "
                                   f"{len(fn.inputs)} inputs (one per input, None where none is needed)")
            for t, gt, array in zip(fn.inputs, grads, fn.arrays):
                if t.data is not array or t._version > fn.seq:
                    raise RuntimeError(
                        f"an input of {fn.name} (shape {t.shape}) was modified after the op used it; its "
                        "gradient would be wrong. Change tensors only after backward, or work on a copy")
                if gt is None or not t.requires_grad:
                    continue
                if gt.shape != array.shape:
                    gt = sum_to(gt, array.shape)
                    if gt.shape != array.shape:
                        raise RuntimeError(f"{fn.name}.backward returned a gradient of shape {gt.shape} "
                                           f"for an input of shape {array.shape}")
                if gt.dtype is not array.dtype and gt.dtype != array.dtype:
                    raise RuntimeError(f"{fn.name}.backward returned a {gt.dtype} gradient for a "
                                       f"{array.dtype} input")
                producer = t.grad_fn
                if producer is None:
                    sink.add(t, gt)
                elif producer in pending:
                    pending[producer] = pending[producer] + gt  # fan-out: the uses add up
                else:
                    pending[producer] = gt
            if not retain_graph:
                fn.__dict__.clear()  # release inputs and saved arrays: their memory can be freed
        return sink.finish(create_graph)


def _watch_forward(fn: Function, inputs: Sequence["Tensor"], arrays: list, params: dict) -> Any:
    """`fn.forward`, timed and shown to every observer: the path ops take while an instrument is on.

    An observer gets `forward(fn, inputs, output_array, seconds, recorded)`, where
    `recorded` says whether the node will be kept for backward, and may raise.
    """
    start = perf_counter()
    data = fn.forward(*arrays, **params)
    seconds = perf_counter() - start
    recorded = _grad_enabled and any(t.requires_grad for t in inputs)
    for observer in tuple(_observers):
        observer.forward(fn, inputs, data, seconds, recorded)
    return data


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
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g


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

    A leaf's contributions are summed while the walk runs and delivered once at
    the end, so its hooks see the whole gradient, as with intermediate tensors.
    """

    def __init__(self, inputs, backend):
        self.inputs, self.backend = inputs, backend
        self.nodes = {t.grad_fn: id(t) for t in inputs or () if t.grad_fn is not None}
        self.captured: dict[int, Any] = {}
        self.leaves: dict[int, list] = {}  # id -> [leaf, summed gradient]

    def capture(self, fn: Function, g: Any) -> None:
        if fn in self.nodes:
            self.captured[self.nodes[fn]] = g

    def add(self, leaf: "Tensor", g: Any) -> None:
        entry = self.leaves.get(id(leaf))
        if entry is None:
            self.leaves[id(leaf)] = [leaf, g]
        else:
            entry[1] = entry[1] + g  # out of place: another node may still read either array

    def finish(self, create_graph: bool):
        owned: set[int] = set()
        for leaf, g in self.leaves.values():
            if leaf._hooks:
                g = _run_hooks(leaf._hooks, g, leaf.backend)
            if self.inputs is not None:
                self.captured[id(leaf)] = g
                continue
            g = g if create_graph else self._tensor(_own(g, owned, self.backend))
            leaf.grad = g if leaf.grad is None else leaf.grad + g
        if self.inputs is not None:
            return [self._tensor(self.captured.get(id(t))) for t in self.inputs]

    def _tensor(self, g: Any) -> "Tensor | None":
        return g if g is None or isinstance(g, Tensor) else Tensor._from_op(g, self.backend)


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
