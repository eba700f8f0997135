"""The op pattern: `Function`, one differentiable op, and grad mode (whether ops record).

How to add an op
================
Everything an op needs is in this section; `ops/unary.py` is the shortest worked example.

1. **Write a `Function` subclass** in the `tinygrad_tx/ops/` file of its kind (arith,
   unary, reduce, shape, select, nn, fused, loss, attention). Defining the class
   registers it in `REGISTRY` under its class name; re-export it from
   `tinygrad_tx/ops/__init__.py`. Its docstring says its forward math and each input's
   gradient, in a line or two (`y = exp(x);  dx = g·y`: a clause `y = ...` and one
   `d<input> = ...` for each input of backward, clauses split by lines or `;`): the
   explorer shows that text beside the node, and a test fails on an op without it.

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
   shape (`sum_to`, in backward.py) and checks shape and dtype, naming the op when they are wrong.
   An op whose backward always returns each input's own shape (a reduction, a
   reshape, an op that sums its own broadcast) says `broadcasts = False`, so that
   the backward plan (`tx.backward_plan`) shows no sum back where none happens.

   To be *twice* differentiable, write backward only with what works on both raw
   arrays and Tensors: the operators `+ - * / ** @`, unary `-`, comparisons,
   indexing `g[i]`; methods `.sum(axis=, keepdims=)`, `.reshape`, `.transpose`,
   `.swapaxes`, `.astype`, `.shape`/`.ndim`/`.dtype`; and from `self.xp` only
   the functions `TensorMath` (tensor.py) provides (`exp log sqrt tanh sign where
   broadcast_to ones_like matmul`; a product of arrays is `self.xp.matmul(a, b)`, which a
   CUDA graph's capture swaps, where CuPy's own `a @ b` could not be). Under
   `backward(create_graph=True)` the engine calls the same backward with Tensors and
   `self.xp` set to those functions (`self.creating_graph` is then True), so every step of
   the gradient is itself recorded. Write the gradient once. What forward saved is a
   constant on Tensors: take it again from the inputs, as a node (`Softmax.apply(x)` when
   `self.creating_graph`, ops/fused.py). A gradient that is an op of its own (a scatter-add)
   runs as one through `grad_op`, and a fused op whose gradient is fast only in place names
   that version with `@fast_backward` (both in ops/twice.py). Every op of the registry is
   differentiable twice, and a test checks it; `OnceDifferentiable` is left for `tx.jit`'s
   whole-replay node, through which a second derivative raises a clear error.

5. **Give users a way in**: a Tensor method (`tensor.py`) or a function
   (`functional.py`) that checks arguments, lifts numbers with `x._pair`, and calls
   `YourOp.apply(*tensors, **params)`.

6. **Test it** (the suite fails until you do). In `tests/ops/test_gradients.py`
   add `"YourOp": {"basic": Case(lambda x: x.your_op(), lambda d: [d.n(3, 4)])}` to
   `CASES` (`d.n`, `d.pos`, `d.away`, `d.distinct` draw float64 inputs; each float
   array becomes a Tensor that requires grad; the case must really run your op),
   and the suite runs finite differences with a random upstream gradient on every device,
   a second-order check (`twice=False` skips it for a case where finite differences cannot
   see the second derivative, such as a tie of max), a check that the create_graph
   gradient equals the fast one, and checks that forward stored nothing undeclared. Where PyTorch
   has the op, add a row to `tests/ops/test_torch_parity.py` (`UNARY`, `ARITH`,
   ... or a test calling `compare(torch, device, dtype, ours, theirs, *arrays)`).

What the engine does with it
============================
`Function.apply` runs forward on the inputs' arrays and, when an input wants a gradient,
keeps the op object as the output's `grad_fn`: a node of the graph, holding its inputs.
`backward.py` walks those nodes from the loss back to the leaves. This module imports
nothing above the backend: an op's output is a tensor of its inputs' own class
(`Tensor._from_op`), so the op pattern needs no Tensor import.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref
from time import perf_counter
from typing import Any, Sequence

from . import observers
from .backends import DeviceError

REGISTRY: dict[str, type["Function"]] = {}
"""Every differentiable op by name; the test suite checks each has a gradcheck case and a docstring."""

_grad_enabled = True

clock = itertools.count(1)
"""The engine's one clock: each recorded op takes its `seq` from it and each in-place change
(`Tensor.bump_version`) its time in `in_place`, so "changed after the op used it" is a later time."""


class InPlaceChanges:
    """When memory was last changed in place, by the array that owns it (`Backend.memory`).

    A version belongs to memory, not to a tensor: every tensor that holds the same array or a
    view of it (`detach()`, `Tensor(t)`, `Tensor(t.data)`, a reshape or a slice) sees a change
    made through any of them, as PyTorch's views and detached tensors share a version counter.
    `last` is the latest change of all, so a backward plan looks up only the ops older than it.
    """

    def __init__(self):
        self.last = 0
        self._at: dict[int, int] = {}  # id(memory) -> the clock's time of its last change

    def bump(self, memory: Any) -> int:
        key = id(memory)
        if key not in self._at:
            weakref.finalize(memory, self._at.pop, key, None)  # once freed, its id may be another's
        self.last = self._at[key] = next(clock)
        return self.last

    def time_of(self, memory: Any) -> int:
        """The clock's time of the last change of `memory` (0: never changed in place)."""
        return self._at.get(id(memory), 0)


in_place = InPlaceChanges()


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
    """The base of every op: subclasses register by name. (Its own subclasses say their math;
    see "How to add an op" above.)

    A recorded node holds `inputs` (the input Tensors), `arrays` (their arrays as
    forward saw them), `needs_grad` (which inputs want a gradient) and the values
    named in `saved`. `release()` drops all of them once backward is done with the
    node: a released node is `released`, and walking it again is a clear error.
    """

    saved: tuple[str, ...] = ()  # what forward stores on self for backward, declared per op
    differentiable_twice = True  # ops whose backward works on raw arrays only set this False
    broadcasts = True  # may return an input's gradient in the output's (broadcast) shape; see step 4
    hooks = ()  # filled in by Tensor.register_hook on an intermediate tensor
    retains = None  # a weak reference to the output tensor that keeps its gradient (Tensor.retain_grad)
    released = False

    def __init_subclass__(cls, register: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        if register:
            REGISTRY[cls.__name__] = cls

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def creating_graph(self) -> bool:
        """True while backward runs on Tensors (`create_graph=True`): its formulas are recorded."""
        return self.xp is not self.backend.xp

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
    def apply(cls, *inputs: Any, **params: Any) -> Any:
        """Run forward on the inputs' arrays and, if any input wants a gradient, record the node.
        The output is a tensor of the first input's class."""
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
        out = inputs[0]._from_op(data, backend)
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


class OnceDifferentiable(Function, register=False):
    """The base of ops whose backward works on raw arrays only (fast, but no second derivative)."""

    differentiable_twice = False


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


def _watch_forward(fn: Function, inputs: Sequence[Any], arrays: list, params: dict) -> Any:
    """`fn.forward`, timed and shown to the observers: the path ops take while an instrument is on."""
    start = perf_counter()
    data = fn.forward(*arrays, **params)
    seconds = perf_counter() - start
    if type(data) is not fn.backend.array_type:  # shown as the tensor will hold it (Tensor._from_op)
        data = fn.backend.as_array(data)
    observers.show_forward(fn, inputs, params, data, seconds, _grad_enabled and any(t.requires_grad for t in inputs))
    return data
