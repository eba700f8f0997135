"""Reverse-mode autograd: the op pattern (`Function`), grad mode, and the graph walk.

An op is a small `Function` subclass. `forward` works on raw backend arrays and
keeps what backward needs; `backward` receives the gradient of the op's output
(a Tensor) and returns one gradient per input. Because backward is written with
Tensor operations, running it with grad mode on records a graph of the
gradient itself: that is all `create_graph=True` needs for second derivatives.

The engine, not each op, undoes broadcasting (summing a gradient back to its
input's shape) and checks every gradient's shape and dtype, so an op's backward
stays as short as its math.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

from .backend import DeviceError

REGISTRY: dict[str, type["Function"]] = {}
"""Every differentiable op by name; the test suite checks each has a gradcheck case."""

_grad_enabled = True


class no_grad(contextlib.ContextDecorator):
    """Context manager and decorator: ops inside record no graph (inference, optimizer updates)."""

    def __enter__(self):
        global _grad_enabled
        self._previous, _grad_enabled = _grad_enabled, False

    def __exit__(self, *exc):
        global _grad_enabled
        _grad_enabled = self._previous


class enable_grad(no_grad):
    """The opposite of `no_grad`; the engine uses it for `create_graph=True`."""

    def __enter__(self):
        global _grad_enabled
        self._previous, _grad_enabled = _grad_enabled, True


def is_grad_enabled() -> bool:
    return _grad_enabled


class Function:
    """One differentiable op. Subclasses are registered by name when defined.

    `inputs` holds the input Tensors (only while a graph is kept), `needs_grad`
    says which of them want a gradient, so backward can skip the others.
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

    def backward(self, g: "Tensor") -> tuple:
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: "Tensor", **params: Any) -> "Tensor":
        """Run forward on the inputs' arrays and, if any input wants a gradient, record the node."""
        backend = inputs[0].backend
        for t in inputs[1:]:
            if t.backend is not backend:
                raise DeviceError(f"{cls.__name__}: inputs are on different devices "
                                  f"({backend.name} and {t.backend.name}); move one with .to()")
        fn = cls()
        fn.backend = backend
        try:
            data = fn.forward(*[t.data for t in inputs], **params)
        except (ValueError, IndexError) as e:  # name the op and the shapes, not just NumPy's words
            shapes = ", ".join(str(t.shape) for t in inputs)
            raise type(e)(f"{cls.__name__} on inputs of shape {shapes}: {e}") from None
        out = Tensor._from_op(data, backend)
        if _grad_enabled:
            needs_grad = tuple(t.requires_grad for t in inputs)
            if any(needs_grad):
                fn.inputs, fn.needs_grad = inputs, needs_grad
                fn.versions = tuple(t._version for t in inputs)
                out.requires_grad, out.grad_fn = True, fn
        return out

    def release(self) -> None:
        """Drop the inputs and saved arrays so their memory can be freed."""
        self.__dict__.clear()
        self.released = True

    def __repr__(self) -> str:
        if getattr(self, "released", False):
            return f"<{self.name} (graph released)>"
        args = ", ".join(f"{t.name or type(t).__name__}{tuple(t.shape)}" for t in self.inputs)
        return f"<{self.name}({args})>"


class OnceDifferentiable(Function, register=False):
    """Base of fused ops whose backward works on raw arrays (fast, but no second derivative)."""

    differentiable_twice = False


# -- the graph walk --------------------------------------------------------------------

def topological_order(root: "Tensor") -> list[Function]:
    """The nodes behind `root`, each before the nodes that produced its inputs.

    An explicit stack rather than recursion, so a 10,000-op chain does not hit
    Python's recursion limit; a node reached twice (fan-out) is listed once.
    """
    order, seen, stack = [], set(), [(root.grad_fn, False)]
    while stack:
        fn, inputs_done = stack.pop()
        if inputs_done:
            order.append(fn)
            continue
        if fn in seen:
            continue
        seen.add(fn)
        if getattr(fn, "released", False):
            raise RuntimeError(
                f"backward through {fn.name} a second time: its saved values were freed after "
                "the first backward; pass retain_graph=True to the first call")
        stack.append((fn, True))
        stack.extend((t.grad_fn, False) for t in fn.inputs if t.grad_fn is not None and t.grad_fn not in seen)
    order.reverse()
    return order


def run_backward(root: "Tensor", grad: "Tensor", retain_graph: bool = False,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None):
    """Propagate `grad` (d loss / d root) to every leaf behind `root`.

    Leaves accumulate into `.grad`. With `inputs`, nothing is accumulated and the
    gradients of those tensors are returned instead (that is `tx.grad`).
    """
    captured = {id(t): None for t in inputs} if inputs is not None else None
    capture_nodes = {t.grad_fn: id(t) for t in inputs or () if t.grad_fn is not None}
    if root.grad_fn is None:
        _deliver(root, grad, captured)
        return _captured_list(inputs, captured)

    order = topological_order(root)
    if create_graph:
        blocking = next((fn for fn in order if not fn.differentiable_twice), None)
        if blocking is not None:
            raise RuntimeError(f"{blocking.name} is once-differentiable: its backward works on raw "
                               "arrays, so create_graph=True cannot give second derivatives through it")
    pending: dict[Function, Tensor] = {root.grad_fn: grad}
    with enable_grad() if create_graph else no_grad():
        for fn in order:
            g = _run_hooks(fn.hooks, pending.pop(fn))
            _check_versions(fn)
            for t, gt in zip(fn.inputs, fn.backward(g)):
                if gt is None or not t.requires_grad:
                    continue
                gt = _fit_to_input(gt, t, fn)
                if t.grad_fn is None:
                    _deliver(t, gt, captured)
                elif t.grad_fn in pending:
                    pending[t.grad_fn] = pending[t.grad_fn] + gt  # fan-out: the uses add up
                else:
                    pending[t.grad_fn] = gt
            if fn in capture_nodes:
                captured[capture_nodes[fn]] = g
            if not retain_graph:
                fn.release()
    return _captured_list(inputs, captured)


def _fit_to_input(g: "Tensor", t: "Tensor", fn: Function) -> "Tensor":
    """Sum a broadcast gradient back to `t`'s shape, then insist shape and dtype match."""
    if g.shape != t.shape:
        g = g.sum_to(t.shape)
    if g.shape != t.shape or g.dtype != t.dtype:
        raise RuntimeError(f"{fn.name}.backward returned a gradient of shape {g.shape} and dtype "
                           f"{g.dtype} for an input of shape {t.shape} and dtype {t.dtype}")
    return g


def _run_hooks(hooks, g: "Tensor") -> "Tensor":
    """A hook sees the gradient and may return a replacement (None keeps it)."""
    for hook in hooks:
        replaced = hook(g)
        g = g if replaced is None else replaced
    return g


def _deliver(leaf: "Tensor", g: "Tensor", captured: dict | None) -> None:
    g = _run_hooks(leaf._hooks, g)
    if captured is not None:
        if id(leaf) in captured:
            previous = captured[id(leaf)]
            captured[id(leaf)] = g if previous is None else previous + g
        return
    leaf.grad = g if leaf.grad is None else leaf.grad + g


def _captured_list(inputs, captured):
    return None if inputs is None else [captured[id(t)] for t in inputs]


def _check_versions(fn: Function) -> None:
    for t, version in zip(fn.inputs, fn.versions):
        if t._version != version:
            raise RuntimeError(
                f"an input of {fn.name} (shape {t.shape}) was modified in place after the op used it; "
                "its gradient would be wrong. Change it only after backward, or on a copy")


def grad(output: "Tensor", inputs: Sequence["Tensor"], grad_output: "Tensor | None" = None,
         retain_graph: bool = False, create_graph: bool = False) -> list:
    """d output / d inputs without touching any `.grad` (PyTorch's `autograd.grad`)."""
    return output._backward(grad_output, retain_graph or create_graph, create_graph, inputs)


from .tensor import Tensor  # noqa: E402  (Tensor uses this module; import after it is defined)
