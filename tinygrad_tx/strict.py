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
  (`tinygrad_tx/scatter.py` says why that matters and how the backend avoids it);
- results are arrays, 0-d ones included, where NumPy gives scalars (np.float32), and
  a strict tensor refuses a NumPy scalar as its data (`StrictBackend.as_array`): the
  CPU backend makes its 0-d results arrays, so this catches values made on the host.
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
        return self._a.copy()

    def item(self):
        return self._a.item()

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __bool__(self):
        return bool(self._a)

    def __index__(self):
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
        return StrictArray(self._a.T)

    @property
    def flags(self):
        return self._a.flags

    def __getattr__(self, name):
        if name.startswith("__"):  # hides __array_interface__ & co., NumPy's back doors
            raise AttributeError(name)
        attr = getattr(self._a, name)
        return wrap_function(attr, name) if callable(attr) else attr

    def __getitem__(self, index):
        return _wrap(self._a[_unwrap(index, "indexing")])

    def __setitem__(self, index, value):
        self._a[_unwrap(index, "indexing")] = _unwrap(value, "assignment")


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
        return _wrap(func(*_unwrap(args, name), **_unwrap(kwargs, name)))

    return call


def _binary(op):
    return lambda self, other: _wrap(op(self._a, _unwrap(other, op.__name__)))


def _reflected(op):
    return lambda self, other: _wrap(op(_unwrap(other, op.__name__), self._a))


def _inplace(op):
    def update(self, other):
        op(self._a, _unwrap(other, op.__name__))  # NumPy's in-place operator mutates self._a
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
    setattr(StrictArray, f"__{_name}__", lambda self, op=getattr(operator, _name): StrictArray(op(self._a)))


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
            obj = obj._a
        return StrictArray(func(obj, *args, **kwargs))

    return call


xp = _StrictModule(np)
ndarray = StrictArray
