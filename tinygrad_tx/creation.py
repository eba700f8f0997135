"""Making tensors: zeros, ones, random normals, ranges.

Random numbers come from the host generator and are then moved to the device,
so one seed gives the same numbers (and the same initial model) on CPU and GPU.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .backends import get_backend, host_rng
from .tensor import DEFAULT_DTYPE, Tensor


def _shape(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def _full(shape, value, dtype, device, requires_grad) -> Tensor:
    backend = get_backend(device)
    data = backend.xp.full(_shape(shape), value, dtype=dtype or DEFAULT_DTYPE)
    return Tensor._from_op(data, backend).requires_grad_(requires_grad)  # refuses integer dtypes


def zeros(*shape, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    return _full(shape, 0, dtype, device, requires_grad)


def ones(*shape, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    return _full(shape, 1, dtype, device, requires_grad)


def randn(*shape, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers drawn on the host (see the module docstring), then moved."""
    host = host_rng().standard_normal(_shape(shape)).astype(dtype or DEFAULT_DTYPE)
    return Tensor(host, requires_grad=requires_grad, device=device)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: Any = None,
           device: str | None = None) -> Tensor:
    """NumPy's arange: integers stay integer (positions), floats become float32."""
    if stop is None:
        start, stop = 0, start
    host = np.arange(start, stop, step)
    if dtype is None and host.dtype.kind == "f":
        dtype = DEFAULT_DTYPE
    return Tensor(host.astype(dtype) if dtype else host, device=device)
