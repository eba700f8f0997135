"""The Tensor: an array on some device, plus the node (`grad_fn`) that made it.

Every method that computes something checks its arguments and hands over to an op in
`tinygrad_tx.ops`, where the math and its gradient live side by side; `backward()` hands
over to `backward.py`, which walks the graph. The Tensor sits above both: they work on
nodes and raw arrays, and make tensors of their inputs' class (`Tensor._from_op`).
"""
from __future__ import annotations

import operator
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from . import observers, ops
from .backends import Backend, backend_of, get_backend
from .backward import backward as run_backward, sum_to
from .function import in_place

DEFAULT_DTYPE = np.float32


_OPERANDS = (int, float, bool, np.ndarray, np.generic, list, tuple)  # what `==` compares with, besides Tensors


def _is_float(dtype: Any) -> bool:
    return np.dtype(dtype).kind == "f"


class Tensor:
    """An n-dimensional array that remembers how it was computed.

    `Tensor(data, requires_grad=False, dtype=None, device=None, name=None)`:
    Python lists and numbers become float32 (lists of bools stay bool);
    arrays keep their dtype (float64 stays float64, integer ids stay integer).
    """

    # class-level defaults: a tensor made by an op sets only `data` and `backend` (it is made often)
    requires_grad, grad, grad_fn, name, _hooks = False, None, None, None, ()
    _ready_hooks = ()  # see register_post_accumulate_grad_hook
    __array_ufunc__ = None  # `numpy_array * tensor` defers to Tensor.__rmul__

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None,
                 device: str | None = None, name: str | None = None):
        copied_from = data if isinstance(data, Tensor) else None
        if copied_from is not None:
            data = data.data
        if isinstance(data, (np.ndarray, np.generic, list, tuple, int, float, bool)):
            array = _host_array(data, dtype)
            backend = get_backend(device)
            array = backend.from_host(array)
        else:  # already a device array: stays where it is unless `device` says otherwise
            source = backend_of(data)
            backend = source if device is None else get_backend(device)
            array = data if backend is source else backend.from_host(source.to_host(data))
            if dtype is not None:
                array = backend.cast(array, dtype)
        if requires_grad and not _is_float(array.dtype):
            raise TypeError(f"only floating tensors can require grad; this one is {array.dtype}")
        if copied_from is not None and array is not copied_from.data:
            observers.show_read(copied_from, "copied by Tensor(...)")
        self.data, self.backend = array, backend
        self.requires_grad, self.name = requires_grad, name

    @classmethod
    def _from_op(cls, data: Any, backend: Backend) -> "Tensor":
        """The fast path ops use: wrap an array that is already on `backend`. A 0-d result is a
        NumPy scalar on the CPU: it becomes a 0-d array here (`Backend.as_array`), so that a
        0-d tensor holds an array on every device."""
        t = cls.__new__(cls)
        t.data = data if type(data) is backend.array_type else backend.as_array(data)
        t.backend = backend
        return t

    # -- the array and what describes it ---------------------------------------------
    def bump_version(self) -> None:
        """Record an in-place change of `.data` (optimizers call this after updating), so a
        graph that saved the old values refuses to backpropagate instead of being wrong: also
        through every tensor that shares this memory (`detach()`, `Tensor(t)`, `Tensor(t.data)`,
        a view such as a reshape), since the change is recorded by the memory (`in_place`).
        (Replacing `.data` with another array is noticed without this.)"""
        in_place.bump(self.backend.memory(self.data))

    @property
    def _version(self) -> int:
        """The clock's time of the last in-place change of this tensor's memory (0: none)."""
        return in_place.time_of(self.backend.memory(self.data))

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Make this leaf require grad (in place) and return it."""
        if requires_grad and not _is_float(self.dtype):
            raise TypeError(f"only floating tensors can require grad; this one is {self.dtype}")
        self.requires_grad = requires_grad
        return self

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self.backend.name)
    is_leaf = property(lambda self: self.grad_fn is None)

    def _host(self, how: str) -> np.ndarray:
        """The values on the host (no copy where they already are): the one way they leave the
        device for Python, so it is shown to observers as a read (`how`): the profiler counts
        them (on CUDA each waits for the device), `tx.jit` refuses them."""
        observers.show_read(self, how)
        return self.backend.to_host(self.data)

    def numpy(self) -> np.ndarray:
        """A host (NumPy) copy of the data."""
        return np.array(self._host("read on the host (numpy() or print)"), copy=True)

    def item(self) -> float | int:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, not shape {self.shape}")
        return self._host("read on the host (item())").item()

    def __float__(self) -> float:  # float(loss), as with NumPy and PyTorch: one element only
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def detach(self) -> "Tensor":
        """The same data, cut off from the graph."""
        return Tensor._from_op(self.data, self.backend)

    def to(self, device: str) -> "Tensor":
        """A copy on `device` (a leaf; the same tensor if it is already there)."""
        backend = get_backend(device)
        if backend is self.backend:
            return self
        moved = Tensor._from_op(backend.from_host(self._host(f"copied to {device} (to())")), backend)
        moved.requires_grad, moved.name = self.requires_grad, self.name
        return moved

    def __repr__(self) -> str:
        extra = f", grad_fn={self.grad_fn!r}" if self.grad_fn is not None else (
            ", requires_grad=True" if self.requires_grad else "")
        name = f", name={self.name!r}" if self.name else ""
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}, device={self.device}{name}{extra})"

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        """`if t:` as in NumPy and PyTorch: only a one-element tensor has a truth value."""
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .any() or .all() on its .numpy(), or compare one element")
        return bool(self._host("read on the host (if t: or bool(t))").reshape(()).item())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """`np.asarray(t)` gives the data for a CPU tensor; other devices refuse, as CuPy does,
        because the copy to the host would be silent."""
        if self.backend.name != "cpu":
            raise TypeError(f"a {self.device} tensor is not converted to a NumPy array implicitly; "
                            "use .numpy()")
        array = self._host("read on the host (np.asarray(t))")
        return np.array(array, dtype=dtype, copy=True) if copy else np.asarray(array, dtype=dtype)

    # -- autograd --------------------------------------------------------------------
    def backward(self, grad: Any = None, retain_graph: bool = False, create_graph: bool = False) -> None:
        """Accumulate d self / d leaf into every leaf's `.grad` (the walk: `backward.py`). With
        create_graph=True the graph is kept as well (as in PyTorch): the new `.grad` tensors are
        computed from it, so differentiating them walks it again."""
        run_backward(self, self._seed(grad), retain_graph or create_graph, create_graph, TENSOR_MATH)

    def _seed(self, grad: Any) -> "Tensor":
        """The gradient backward starts from (d root / d root: ones when `grad` is None), checked."""
        if not self.requires_grad:
            raise RuntimeError(f"backward() on a tensor of shape {self.shape} that does not require grad: "
                               "no input of its graph has requires_grad=True (or it was made under no_grad)")
        if grad is None:
            if self.size != 1:
                raise RuntimeError(f"backward() on a non-scalar tensor of shape {self.shape} needs a "
                                   "gradient argument of the same shape")
            grad = Tensor._from_op(self.backend.xp.ones(self.shape, dtype=self.dtype), self.backend)
        grad = grad if isinstance(grad, Tensor) else Tensor(grad, dtype=self.dtype, device=self.device)
        if grad.dtype != self.dtype:
            raise TypeError(f"backward(): a {grad.dtype} gradient for a {self.dtype} tensor; cast it with .astype()")
        if grad.shape != self.shape:
            raise RuntimeError(f"backward(): gradient of shape {grad.shape} for a tensor of shape {self.shape}")
        return grad

    def register_hook(self, hook: Callable[["Tensor"], "Tensor | None"]) -> None:
        """Call `hook(grad)` when this tensor's gradient is ready; a returned tensor replaces it."""
        if not self.requires_grad:
            raise RuntimeError("register_hook on a tensor that does not require grad")
        if self.grad_fn is None:
            observers.show_changed(f"a hook registered on a tensor of shape {self.shape}")  # outside the graph
            self._hooks = (*self._hooks, hook)
        else:
            self.grad_fn.hooks = (*self.grad_fn.hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[["Tensor"], None]) -> None:
        """On a leaf: call `hook(self)` once `.grad` holds this backward's whole contribution.

        It runs as soon as the walk has passed every node that uses this tensor, while
        backward goes on through the layers before it; that is where data parallelism
        starts averaging a layer's gradients (PyTorch's method of the same name). The hook
        may read `.grad` but must not change it in place: backward may still read that array.
        """
        if self.grad_fn is not None or not self.requires_grad:
            raise RuntimeError("register_post_accumulate_grad_hook needs a leaf that requires grad")
        observers.show_changed(f"a post-accumulate-grad hook registered on a tensor of shape {self.shape}")
        self._ready_hooks = (*self._ready_hooks, hook)

    def retain_grad(self) -> None:
        """Keep this intermediate tensor's gradient in `.grad` (leaves always keep theirs): the
        gradient that flows on, after every hook registered on it, whenever they were registered."""
        if self.grad_fn is not None:
            self.grad_fn.retains = weakref.ref(self)  # weak: a strong one would be a cycle tensor -> node -> tensor

    # -- lifting Python numbers and arrays into tensors ------------------------------
    def _lift(self, value: Any) -> "Tensor":
        """`value` as a constant Tensor on this device; Python numbers take this tensor's dtype."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, (int, float, bool)):
            if _is_float(self.dtype) or (isinstance(value, int) and self.dtype.kind in "iu"):
                scalar = self.dtype.type(value)  # float32 stays float32, ids stay ids
            else:
                scalar = np.asarray(value)[()]  # NumPy's rules: ids / 2 is a float
            return Tensor._from_op(self.backend.constant(scalar), self.backend)
        return Tensor(value, device=self.device)

    def _pair(self, other: Any, op: str) -> tuple["Tensor", "Tensor"]:
        """Both operands of a binary op as tensors of one floating dtype (or both non-float)."""
        if type(other) is Tensor and other.data.dtype is self.data.dtype:
            return self, other  # the common case, kept fast: this runs for every + - * /
        other = self._lift(other)
        a, b = self.dtype, other.dtype
        if a != b:
            if _is_float(a) and _is_float(b):
                raise TypeError(f"{op}: dtype mismatch {a} and {b}; cast one with .astype()")
            if _is_float(a):
                other = other.astype(a)
            elif _is_float(b):
                return self.astype(b), other
        return self, other

    def astype(self, dtype: Any) -> "Tensor":
        """A copy in `dtype`: differentiable to a floating dtype; to an integer or boolean
        dtype it is outside the graph, as in PyTorch (rounding has no useful gradient)."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        if not _is_float(dtype):
            observers.show_read(self, f"cast to {dtype} (astype), outside the graph")
            return Tensor._from_op(self.backend.cast(self.data, dtype), self.backend)
        return ops.Cast.apply(self, dtype=dtype)

    # -- arithmetic -------------------------------------------------------------------
    def __add__(self, o): return ops.Add.apply(*self._pair(o, "add"))
    def __radd__(self, o): return ops.Add.apply(*reversed(self._pair(o, "add")))
    def __sub__(self, o): return ops.Sub.apply(*self._pair(o, "sub"))
    def __rsub__(self, o): return ops.Sub.apply(*reversed(self._pair(o, "sub")))
    def __mul__(self, o): return ops.Mul.apply(*self._pair(o, "mul"))
    def __rmul__(self, o): return ops.Mul.apply(*reversed(self._pair(o, "mul")))
    def __truediv__(self, o): return ops.Div.apply(*self._pair(o, "div"))
    def __rtruediv__(self, o): return ops.Div.apply(*reversed(self._pair(o, "div")))
    def __neg__(self): return ops.Neg.apply(self)
    def __matmul__(self, o): return _matmul(*self._pair(o, "matmul"))
    def __rmatmul__(self, o): return _matmul(*reversed(self._pair(o, "matmul")))

    def __pow__(self, exponent):
        if isinstance(exponent, (int, float)):
            return ops.PowScalar.apply(self, exponent=exponent)
        return ops.Pow.apply(*self._pair(exponent, "pow"))

    def __rpow__(self, base): return ops.Pow.apply(*reversed(self._pair(base, "pow")))

    # comparisons and boolean logic give boolean tensors, outside the graph
    def _compare(self, other, compare):
        return ops.Compare.apply(self.detach(), self._lift(other).detach(), operator=compare)

    def __lt__(self, o): return self._compare(o, operator.lt)
    def __le__(self, o): return self._compare(o, operator.le)
    def __gt__(self, o): return self._compare(o, operator.gt)
    def __ge__(self, o): return self._compare(o, operator.ge)
    def eq(self, o): return self._compare(o, operator.eq)
    def ne(self, o): return self._compare(o, operator.ne)

    # `==` is elementwise, as in NumPy and PyTorch; hashing stays by identity, so tensors can
    # still be dict keys and set members. Other objects (None, strings) compare unequal.
    def __eq__(self, o): return self.eq(o) if isinstance(o, (Tensor, *_OPERANDS)) else NotImplemented
    def __ne__(self, o): return self.ne(o) if isinstance(o, (Tensor, *_OPERANDS)) else NotImplemented
    __hash__ = object.__hash__

    def __invert__(self):
        if self.dtype != np.bool_:
            raise TypeError(f"~ needs a boolean tensor, not {self.dtype}")
        return ops.Compare.apply(self.detach(), operator=operator.invert)

    def __and__(self, o): return self._compare(o, operator.and_)
    def __or__(self, o): return self._compare(o, operator.or_)

    # -- elementwise functions ------------------------------------------------------------
    def exp(self): return ops.Exp.apply(self)
    def log(self): return ops.Log.apply(self)
    def sqrt(self): return ops.Sqrt.apply(self)
    def tanh(self): return ops.Tanh.apply(self)
    def sigmoid(self): return ops.Sigmoid.apply(self)
    def relu(self): return ops.Relu.apply(self)
    def abs(self): return ops.Abs.apply(self)

    def gelu(self, approximate: str = "none") -> "Tensor":
        """GELU, exact (x·Φ(x)) or its tanh approximation, both as in PyTorch."""
        return ops.Gelu.apply(self, approximate=approximate)

    # -- reductions --------------------------------------------------------------------
    def sum(self, axis: int | tuple | None = None, keepdims: bool = False) -> "Tensor":
        return ops.Sum.apply(self, axis=ops.normalize_axis(axis, self.ndim), keepdims=keepdims)

    def mean(self, axis: int | tuple | None = None, keepdims: bool = False) -> "Tensor":
        """The sum times 1/count; float16 in float32, rounded once, as PyTorch: the float16
        sum of 10,000 tens is inf (past 65504), their mean 10."""
        if self.dtype == np.float16:
            return self.astype(np.float32).mean(axis, keepdims).astype(np.float16)
        axes = ops.normalize_axis(axis, self.ndim)
        count = int(np.prod([self.shape[a] for a in axes])) if axes else 1
        return self.sum(axes, keepdims) * (1.0 / count if count else float("nan"))  # empty: NaN, as in PyTorch

    def var(self, axis: int | tuple | None = None, keepdims: bool = False) -> "Tensor":
        """Population variance (NumPy's ddof=0), computed in two passes for accuracy; float16
        in float32, as `mean` (its squares overflow above 256). Composed of ops, so a row that
        holds ±inf gets NaN gradients (PyTorch's own formula gives ±inf on the finite ones)."""
        if self.dtype == np.float16:
            return self.astype(np.float32).var(axis, keepdims).astype(np.float16)
        centred = self - self.mean(axis, keepdims=True)
        return (centred * centred).mean(axis, keepdims)

    def max(self, axis: int | tuple | None = None, keepdims: bool = False) -> "Tensor":
        return ops.Max.apply(self, axis=ops.normalize_axis(axis, self.ndim), keepdims=keepdims)

    def sum_to(self, shape: tuple) -> "Tensor":
        """Sum over the axes that broadcasting added or stretched, giving `shape`."""
        return sum_to(self, tuple(shape))

    # -- shape --------------------------------------------------------------------------
    def reshape(self, *shape) -> "Tensor":
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ops.Reshape.apply(self, shape=tuple(shape))

    def transpose(self, *axes) -> "Tensor":
        """NumPy semantics: no axes reverses them all."""
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return ops.Transpose.apply(self, axes=tuple(axes) or tuple(reversed(range(self.ndim))))

    @property
    def T(self) -> "Tensor":
        return self.transpose()

    def swapaxes(self, a: int, b: int) -> "Tensor":
        ops.normalize_axis((a, b), self.ndim)  # a clear error for an axis out of range
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return ops.Transpose.apply(self, axes=tuple(axes))

    def expand(self, *shape) -> "Tensor":
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ops.Expand.apply(self, shape=tuple(shape))

    def __getitem__(self, index) -> "Tensor":
        """`x[index]` for ints, slices, Ellipsis, None, integer arrays (lists, NumPy, Tensors) and boolean masks."""
        index, advanced, ranges = ops.normalize_index(index, self.backend, self.shape)
        return ops.Getitem.apply(self, index=index, advanced=advanced, ranges=ranges)

    # -- fused ----------------------------------------------------------------------------
    def softmax(self, axis: int = -1) -> "Tensor":
        return ops.Softmax.apply(self, axis=axis)

    def log_softmax(self, axis: int = -1) -> "Tensor":
        return ops.LogSoftmax.apply(self, axis=axis)

    def masked_fill(self, mask: Any, value: float) -> "Tensor":
        """Put `value` where `mask` (boolean, broadcastable) is True, as in PyTorch."""
        return ops.MaskedFill.apply(self, mask=ops.as_mask(mask, self.backend, "masked_fill"), value=value)


def _host_array(data: Any, dtype: Any) -> np.ndarray:
    """Host data as a NumPy array following the dtype rules in the class docstring."""
    if dtype is not None:
        return np.asarray(data, dtype=dtype)
    if isinstance(data, (np.ndarray, np.generic)):
        return np.asarray(data)
    array = np.asarray(data)
    return array if array.dtype == np.bool_ else array.astype(DEFAULT_DTYPE)


class TensorMath:
    """The array-module functions backward formulas use, on Tensors: an op's `self.xp` while
    `backward(create_graph=True)` runs its formulas on Tensors (see function.py's "How to add an op")."""

    exp = staticmethod(lambda x: x.exp())
    log = staticmethod(lambda x: x.log())
    sqrt = staticmethod(lambda x: x.sqrt())
    tanh = staticmethod(lambda x: x.tanh())
    broadcast_to = staticmethod(lambda x, shape: x.expand(shape))
    matmul = staticmethod(lambda a, b: a @ b)
    sign = staticmethod(lambda x: Tensor._from_op(x.backend.xp.sign(x.data), x.backend))  # a constant
    ones_like = staticmethod(lambda x: Tensor._from_op(x.backend.xp.ones_like(x.data), x.backend))  # a constant
    where = staticmethod(lambda cond, a, b: where(cond, a, b))


TENSOR_MATH = TensorMath()


# -- the ways in that are functions: matmul, where, and grad ------------------------------------

def _matmul(x: Tensor, y: Tensor) -> Tensor:
    """`x @ y` with NumPy's rules, arranged so BLAS sees the largest 2-D products.

    A stack of rows times one matrix, (B, T, k) @ (k, m), becomes one (B·T, k) @ (k, m)
    product, and its weight gradient one (k, B·T) @ (B·T, m) product, instead of B
    small ones whose results must then be summed. 1-D operands are treated as NumPy
    does (a row or a column, dropped from the result).
    """
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"matmul: scalar operands are not allowed (shapes {x.shape} and {y.shape}); use *")
    if x.shape[-1] != y.shape[-2 if y.ndim > 1 else 0]:
        raise ValueError(f"matmul: shapes {x.shape} and {y.shape} do not align "
                         f"({x.shape[-1]} != {y.shape[-2 if y.ndim > 1 else 0]})")
    if x.ndim == 1:
        return _matmul(x.reshape(1, -1), y).reshape(*y.shape[:-2], y.shape[-1]) if y.ndim > 1 \
            else (x * y).sum()
    if y.ndim == 1:
        return _matmul(x, y.reshape(-1, 1)).reshape(x.shape[:-1])
    if y.ndim == 2 and x.ndim > 2:
        flat = ops.MatMul.apply(ops.as_rows(x), y)  # (B·T, m)
        return flat.reshape(*x.shape[:-1], y.shape[-1])
    return ops.MatMul.apply(x, y)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """Elementwise `a if cond else b` (cond boolean; numbers take the tensor's dtype)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    a, b = (a._pair(b, "where") if isinstance(a, Tensor) else reversed(b._pair(a, "where")))
    return ops.Where.apply(a, b, cond=ops.as_mask(cond, a.backend, "where"))


def grad(output: Tensor, inputs: Sequence[Tensor], grad_output: Any = None,
         retain_graph: bool = False, create_graph: bool = False) -> list:
    """d output / d inputs without touching any `.grad` (PyTorch's `autograd.grad`)."""
    return run_backward(output, output._seed(grad_output), retain_graph or create_graph, create_graph,
                        TENSOR_MATH, targets=inputs)
