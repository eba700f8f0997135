"""A strict CPU array library for tests: NumPy underneath, CuPy's manners on top.

CuPy arrays refuse to become NumPy arrays implicitly and refuse NumPy operands, so
a stray `np.` call on device data works on a laptop and crashes on a GPU. This
module reproduces those refusals on the CPU, so the op test suite catches such
bugs on a machine with no GPU:

- `np.asarray(a)`, `np.exp(a)`, `np.sum(a)` on a `StrictArray` raise TypeError;
- `a + numpy_array` raises TypeError (NumPy *scalars* and Python numbers are fine,
  as in CuPy);
- the array module `xp` (this module's stand-in for `cupy`) accepts NumPy arrays
  only in `asarray`/`array`, the host-to-device transfers;
- `a.get()` is the explicit copy to the host, as in CuPy;
- `xp.add.at` adds in a random order at every call, as CuPy's atomic adds do on a GPU
  (`scatter.py` says why that matters and how the backend avoids it);
- results are arrays, 0-d ones included, where NumPy gives scalars (np.float32), and
  a strict tensor refuses a NumPy scalar as its data (`StrictBackend.as_array`): the
  CPU backend makes its 0-d results arrays, so this catches values made on the host;
- a CUDA graph (`capture`): while one is captured, reading a value on the host, moving
  one to the device, a result whose size depends on values and a matrix product (CuPy
  refuses cuBLAS calls while a stream captures) raise, as CuPy does, and every operation is
  written down rather than trusted to happen again; `Graph.launch` runs exactly those
  operations again on the same arrays, with the numbers they were given then. So what a
  graph cannot replay (a number computed on the host at each call, a `.grad` set by
  Python, a generator replaced) goes as stale on the CPU as it would on a GPU.
"""
from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

_TRANSFERS = {"asarray", "array", "ascontiguousarray"}


class StrictArray:
    """A NumPy array in a wrapper that only the strict `xp` may open."""

    __slots__ = ("_a",)
    __array_priority__ = 1000

    def __init__(self, array: np.ndarray):
        self._a = array

    # -- the refusals ----------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (strict backend): "
                        "use the backend's to_host()")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and any(isinstance(i, np.generic) for i in inputs):
            # `np.float32(2) * a` arrives here; CuPy computes it, so do we
            return wrap_function(ufunc, ufunc.__name__)(*inputs, **kwargs)
        raise TypeError(f"numpy.{ufunc.__name__} called on a strict-backend array: "
                        "use the backend's array module (xp), not numpy")

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} called on a strict-backend array: "
                        "use the backend's array module (xp), not numpy")

    # -- explicit exits, as in CuPy ----------------------------------------------------
    def get(self) -> np.ndarray:
        _refuse_while_capturing("a copy to the host")
        return self._a.copy()

    def item(self):
        _refuse_while_capturing("item()")
        return self._a.item()

    def __float__(self):
        _refuse_while_capturing("float()")
        return float(self._a)

    def __int__(self):
        _refuse_while_capturing("int()")
        return int(self._a)

    def __bool__(self):
        _refuse_while_capturing("bool()")
        return bool(self._a)

    def __index__(self):
        _refuse_while_capturing("an index")
        return operator.index(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(a) for a in self._a)

    def __repr__(self):
        return "strict." + repr(self._a)

    # -- everything else is NumPy's, with arguments checked and results wrapped -------
    @property
    def T(self):
        return _wrap(_kernel(np.transpose, (self._a,), {}))

    @property
    def flags(self):
        return self._a.flags

    def __getattr__(self, name):
        if name.startswith("__"):  # hides __array_interface__ & co., NumPy's back doors
            raise AttributeError(name)
        attr = getattr(self._a, name)
        return wrap_function(attr, name) if callable(attr) else attr

    def __getitem__(self, index):
        return _wrap(_kernel(operator.getitem, (self._a, _unwrap(index, "indexing")), {}))

    def __setitem__(self, index, value):
        _kernel(operator.setitem, (self._a, _unwrap(index, "indexing"), _unwrap(value, "assignment")), {})


def _unwrap(value: Any, where: str) -> Any:
    """Open StrictArrays (also inside lists, tuples and dicts); reject NumPy arrays."""
    if isinstance(value, StrictArray):
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError(f"a NumPy array was mixed with strict-backend arrays in {where}: "
                        "move it with the backend's from_host() first")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, where) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, where) for k, v in value.items()}
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return StrictArray(value)
    if isinstance(value, np.generic):  # CuPy gives 0-d device arrays where NumPy gives scalars
        return StrictArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def wrap_function(func, name: str):
    def call(*args, **kwargs):
        return _wrap(_kernel(func, _unwrap(args, name), _unwrap(kwargs, name)))

    return call


def _binary(op):
    return lambda self, other: _wrap(_kernel(op, (self._a, _unwrap(other, op.__name__)), {}))


def _reflected(op):
    return lambda self, other: _wrap(_kernel(op, (_unwrap(other, op.__name__), self._a), {}))


def _inplace(op):
    def update(self, other):
        _kernel(op, (self._a, _unwrap(other, op.__name__)), {})  # NumPy's in-place operator mutates self._a
        return self

    return update


_ARITHMETIC = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor"]
for _name in _ARITHMETIC:
    _dunder = _name.rstrip("_")
    setattr(StrictArray, f"__{_dunder}__", _binary(getattr(operator, _name)))
    setattr(StrictArray, f"__r{_dunder}__", _reflected(getattr(operator, _name)))
    setattr(StrictArray, f"__i{_dunder}__", _inplace(getattr(operator, "i" + _dunder)))
for _name in ["lt", "le", "gt", "ge", "eq", "ne"]:
    setattr(StrictArray, f"__{_name}__", _binary(getattr(operator, _name)))
for _name in ["neg", "pos", "abs", "invert"]:
    setattr(StrictArray, f"__{_name}__", lambda self, op=getattr(operator, _name): _wrap(_kernel(op, (self._a,), {})))


class _StrictUfunc:
    """A NumPy ufunc (and its .at/.reduce methods) that speaks StrictArray."""

    def __init__(self, ufunc):
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args, **kwargs):
        return wrap_function(self._ufunc, self.__name__)(*args, **kwargs)

    def __getattr__(self, name):
        if name == "at":
            return wrap_function(functools.partial(_at_in_any_order, self._ufunc), f"{self.__name__}.at")
        return wrap_function(getattr(self._ufunc, name), f"{self.__name__}.{name}")


_atomics = np.random.default_rng()


def _at_in_any_order(ufunc: np.ufunc, a: np.ndarray, index: Any, b: Any = None) -> None:
    """`ufunc.at` with its updates made in a fresh random order at every call, as CuPy's atomic
    adds are on a GPU: floating-point results then change in their last bits from call to call,
    which the suite's bit-for-bit tests catch (the backend's `scatter_add` keeps a fixed order)."""
    position = np.arange(a.size).reshape(a.shape)[index]
    shuffle = _atomics.permutation(position.size)
    flat = a.reshape(-1)  # a view: `at` writes in place
    if b is None:
        ufunc.at(flat, position.reshape(-1)[shuffle])
    else:
        ufunc.at(flat, position.reshape(-1)[shuffle], np.broadcast_to(b, position.shape).reshape(-1)[shuffle])


class _StrictModule:
    """Stand-in for the `cupy` module: NumPy's namespace, wrapped."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if isinstance(attr, np.ufunc):
            attr = _StrictUfunc(attr)
        elif name in _TRANSFERS:
            attr = _transfer(attr)
        elif callable(attr) and not isinstance(attr, type):
            attr = wrap_function(attr, name)
        elif type(attr).__name__ == "module":
            attr = _StrictModule(attr)
        setattr(self, name, attr)  # cache: later lookups skip __getattr__
        return attr


def _transfer(func):
    def call(obj, *args, **kwargs):
        if isinstance(obj, StrictArray):
            return _wrap(_kernel(func, (obj._a, *args), kwargs))  # on the device already: a copy kernel
        _refuse_while_capturing("a copy from the host")
        return StrictArray(func(obj, *args, **kwargs))

    return call


# -- CUDA graphs ---------------------------------------------------------------------------------
# CuPy's stream capture (`Stream.begin_capture`) runs nothing: it writes down each kernel with
# its arguments (array addresses, and numbers by value), and a launch runs that list again.
# Here `_kernel` runs every operation at once (the capture's call can then be checked against
# eager execution) and, while a graph is captured, also writes it down; `Graph.launch` runs
# the list again on the same arrays.

_captured: list | None = None  # the operations of the graph being captured, while one is


_SIZED_BY_VALUES = {"nonzero", "flatnonzero", "argwhere", "unique", "compress", "extract"}
_BLAS = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum"}  # CuPy runs these with cuBLAS


def _kernel(func, args: tuple, kwargs: dict) -> Any:
    if _captured is not None:
        name = getattr(func, "__name__", "")
        if name in _SIZED_BY_VALUES or func in (operator.getitem, operator.setitem) and any(
                getattr(i, "dtype", None) == np.bool_ for i in _items(args[1])):
            _refuse_while_capturing("a result whose size depends on values (CuPy reads the count on the host)")
        if name in _BLAS:  # CuPy 14's words (cupy_backends/cuda/libs/cublas.pyx, setStream)
            raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    result = func(*args, **kwargs)
    if _captured is not None:
        out = _wrap(result)
        _captured.append((func, args, kwargs, out))
        return out
    return result


def _items(index: Any) -> tuple:
    return index if type(index) is tuple else (index,)


def graph_matmul(a: np.ndarray, b: np.ndarray, out: Any = None) -> np.ndarray:
    """The matrix product a graph's capture uses (`blas.py`: cuBLAS called directly on a GPU)."""
    return np.matmul(a, b, out=out)


def _refuse_while_capturing(what: str) -> None:
    if _captured is not None:  # CuPy's words, as a capture on a GPU raises them
        raise RuntimeError(f"the current stream is capturing, so {what} is disallowed "
                           "(strict device: a CUDA graph could not be captured here)")


class Graph:
    """The operations written down while `fn` ran (`capture`); `launch` runs them again."""

    def __init__(self, operations: list):
        self.operations = operations

    def launch(self) -> None:
        for func, args, kwargs, out in self.operations:
            try:
                result = func(*args, **kwargs)
            except IndexError:  # an id out of range: CuPy's kernels wrap it around, silently
                if func is not operator.getitem:
                    raise
                result = func(args[0], _wrapped(args[0].shape, args[1]))
            for target, new in zip(*((out, result) if type(out) is tuple else ((out,), (result,)))):
                if isinstance(target, StrictArray) and not _same_memory(target._a, new):
                    np.copyto(target._a, new)  # into the array the later operations read


def _wrapped(shape: tuple, index: Any) -> Any:
    """`index` with its integer arrays taken modulo their axis's size, as CuPy indexes."""
    items = list(_items(index))
    for k, item in enumerate(items):
        if isinstance(item, np.ndarray) and item.dtype.kind in "iu":
            items[k] = np.mod(item, shape[k])
    return tuple(items) if type(index) is tuple else items[0]


def _same_memory(a: np.ndarray, b: Any) -> bool:
    """Whether `b` is `a` or a view of exactly its elements (a reshape or transpose made again)."""
    b = np.asarray(b)
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides)


def capture(fn) -> tuple[Graph, Any]:
    """Run `fn()` as a capture: its result, and the graph that makes it again at each launch."""
    global _captured
    if _captured is not None:
        raise RuntimeError("a CUDA graph is already being captured")
    _captured = []
    try:
        result = fn()
        return Graph(_captured), result
    finally:
        _captured = None


xp = _StrictModule(np)
ndarray = StrictArray
