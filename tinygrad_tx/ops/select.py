"""Choosing elements: indexing, `where` and `masked_fill`.

Indexing's gradient is a scatter: each picked element sends its gradient back to
where it came from, and an element picked twice (`x[[1, 1]]`) must receive both,
so integer-array indexing scatters with add (the backend's `scatter_add`), never
with plain assignment, which would keep only one.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import Backend, DeviceError
from ..function import Function
from .twice import grad_op


class Getitem(Function):
    """y = x[index] (ints, slices, None, Ellipsis, integer and boolean arrays);
    dx = g sent back to where each element came from, added where one was picked twice (a scatter-add)

    `ranges` lists (position in `index`, axis) of each integer array, checked here, in
    forward, because ids are values: whatever runs forward checks each call's ids."""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("index", "advanced")

    def forward(self, x, index, advanced, ranges):
        for i, axis in ranges:
            check_range(self.backend, index[i], x.shape[axis], "index", f"axis {axis} of size", negative=True)
        self.index, self.advanced = index, advanced
        return x[index]

    def backward(self, g, x):
        return (grad_op(self, ScatterAdd, g, shape=x.shape, index=self.index, advanced=self.advanced),)


class ScatterAdd(Function):
    """y = zeros(shape) with g added at `index`, where each picked element came from (Getitem's and
    Embedding's gradient, an op of its own);  dg = gg[index]: its own gradient is indexing again"""

    broadcasts = False  # returns each gradient in its input's shape: nothing to sum back
    saved = ("index",)

    def forward(self, g, shape, index, advanced):
        self.index = index
        out = self.xp.zeros(shape, dtype=g.dtype)
        if advanced:
            self.backend.scatter_add(out, index, g)  # repeated indices accumulate
        else:
            out[index] = g  # slices and ints never repeat an element
        return out

    def backward(self, gg, g):
        return (gg[self.index],)


def normalize_index(index: Any, backend: Backend, shape: tuple) -> tuple[tuple, bool, tuple]:
    """Index arrays moved to the tensor's device; whether any is an array (advanced indexing);
    and (position, axis) of each integer array, whose ids `Getitem` checks against that axis:
    CuPy would wrap a bad one around silently.
    """
    items = index if isinstance(index, tuple) else (index,)
    items = tuple(as_array(item, backend, "index arrays", "iub", IndexError)
                  if is_tensor(item) or isinstance(item, (list, tuple, np.ndarray)) else item  # inside, a tuple is a sequence
                  for item in items)
    consumed = sum(item.ndim if is_bool_array(item) else 1 for item in items
                   if item is not None and item is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(f"too many indices ({consumed}) for a tensor of shape {shape}")
    axis, advanced, ranges = 0, False, []
    for position, item in enumerate(items):
        if item is Ellipsis:
            axis += len(shape) - consumed
        elif item is None:
            continue
        elif is_bool_array(item):
            axis, advanced = axis + item.ndim, True
        else:
            if hasattr(item, "dtype") and getattr(item, "ndim", 0) > 0:
                ranges.append((position, axis))
                advanced = True
            axis += 1
    return items, advanced, tuple(ranges)


def is_tensor(value: Any) -> bool:
    """Whether `value` is a Tensor (arrays and numbers have no `grad_fn`): ops work on arrays
    and are defined below the Tensor class, so they tell it by what it has."""
    return hasattr(value, "grad_fn")


def is_bool_array(item: Any) -> bool:
    return getattr(item, "dtype", None) == np.bool_ and getattr(item, "ndim", 0) > 0


def check_range(backend: Backend, ids: Any, size: int, what: str, where: str = "size", negative: bool = False) -> None:
    """Every id in [0, size) (or [-size, size) with `negative`, as indexing allows), checked
    here because CuPy would wrap a bad id around silently (by the backend, which knows when no value
    can be read yet: inside a CUDA graph)."""
    if ids.size == 0:
        return
    bad = (ids < (-size if negative else 0)) | (ids >= size)
    backend.check(bad, lambda: IndexError(f"{what} {int(ids[bad].reshape(-1)[0])} is out of range for {where} {size}"))


def as_array(value: Any, backend: Backend, what: str, kinds: str, error: type = TypeError) -> Any:
    """`value` (a Tensor, list, NumPy array or scalar) as an array on `backend`, of a dtype kind
    in `kinds` ("b" boolean, "i"/"u" integer): the one place masks and index arrays arrive.
    A wrong dtype raises `error` (indexing raises IndexError, as NumPy does)."""
    if is_tensor(value):
        if value.backend is not backend:
            raise DeviceError(f"{what} is on {value.device}, the tensor on {backend.name}")
        value = value.data
    elif isinstance(value, (list, tuple, np.ndarray, np.generic, bool, int)):
        host = np.asarray(value)
        value = backend.from_host(host.astype(np.intp) if host.size == 0 and "i" in kinds else host)  # `[]` picks nothing
    if value.dtype.kind not in kinds:
        expected = " or ".join(dict.fromkeys({"b": "boolean", "i": "integer", "u": "integer"}[k] for k in kinds))
        raise error(f"{what} must be {expected}, not {value.dtype}")
    return value


# -- masks --------------------------------------------------------------------------------

def as_mask(mask: Any, backend: Backend, op: str) -> Any:
    """A boolean array on `backend`; float and integer masks are refused.

    Libraries disagree on whether 1 means "keep" or "block"; only a boolean,
    read with this project's convention, cannot be misread.
    """
    try:
        return as_array(mask, backend, f"{op}: the mask", "b")
    except TypeError as e:
        raise TypeError(f"{e}; float and integer masks are rejected because their meaning "
                        "(keep or block) differs between libraries") from None


class Compare(Function, register=False):
    """`a < b`, `a != b`, `a & b`, `~a`, ...: a boolean result with no gradient, so Tensor
    applies it to detached inputs and no node is recorded. It is an op all the same, so that
    instruments see masks being made from inputs (a recording replays them with new ids)."""

    def forward(self, *arrays, operator):
        return operator(*arrays)


class MaskedFill(Function):
    """y = `value` where the mask is True, x elsewhere;  dx = g where the mask is False, 0 where filled"""

    saved = ("mask",)

    def forward(self, x, mask, value):
        self.mask = mask
        return self.xp.where(mask, x.dtype.type(value), x)

    def backward(self, g, x):
        return (self.xp.where(self.mask, 0, g),)


class Where(Function):
    """y = a where cond is True, b elsewhere;  da = g where cond, 0 elsewhere;  db = g where not cond, 0 elsewhere

    Both branches are computed everywhere, so `where(x > 0, x.sqrt(), 0)` still
    differentiates sqrt at x < 0 and the NaN (times 0) poisons the gradient. The
    fix is the "double where": `where(x > 0, where(x > 0, x, 1).sqrt(), 0)`.
    """

    saved = ("cond",)

    def forward(self, a, b, cond):
        self.cond = cond
        return self.xp.where(cond, a, b)

    def backward(self, g, a, b):
        ga = self.xp.where(self.cond, g, 0) if self.needs_grad[0] else None
        gb = self.xp.where(self.cond, 0, g) if self.needs_grad[1] else None
        return ga, gb
