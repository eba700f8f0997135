"""Arrays as the page sees them: a few statistics and a small heat-map, as plain JSON.

JSON has no NaN or Infinity, and a browser's `JSON.parse` refuses them, so every
number goes through `number()`, which turns a non-finite value into null; the
statistics count the NaNs and Infs instead.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

HEAT_SIDE = 48
"""A heat-map shows at most HEAT_SIDE × HEAT_SIDE cells: every k-th row and column beyond that."""


def number(x: Any) -> float | int | None:
    """A Python number for JSON: None for NaN and ±Inf."""
    x = float(x)
    return x if math.isfinite(x) else None


def summary(a: np.ndarray) -> dict:
    """shape, dtype, min, max, mean, std and L2 norm over the finite values, and how many are not."""
    a = np.asarray(a)
    values = a.astype(np.float64) if a.dtype.kind in "biuf" else np.zeros(a.shape)
    finite = values[np.isfinite(values)]
    stats = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size),
             "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum())}
    if finite.size:
        stats.update(min=number(finite.min()), max=number(finite.max()), mean=number(finite.mean()),
                     std=number(finite.std()), norm=number(np.sqrt((finite * finite).sum())))
    return stats


def heat(a: np.ndarray) -> dict:
    """A 2-D view of `a` for a heat-map: the last two axes of its first slice
    (`[0, 0, :, :]` of a (B, h, T, T) array), every k-th row and column when larger
    than HEAT_SIDE; `where` says which slice and `stride` which step was taken."""
    a = np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind in "biuf" else np.zeros(np.shape(a))
    lead = (0,) * max(a.ndim - 2, 0)
    plane = a[lead].reshape((1, -1) if a.ndim < 2 else a[lead].shape)  # (rows, cols)
    stride = [max(1, math.ceil(n / HEAT_SIDE)) for n in plane.shape]
    plane = plane[::stride[0], ::stride[1]]
    where = "[" + ", ".join(["0"] * len(lead) + [":"] * min(a.ndim, 2)) + "]" if a.ndim > 2 else ""
    return {"rows": [[number(v) for v in row] for row in plane], "where": where, "stride": stride}


def describe_value(v: Any, to_host: Callable[[Any], np.ndarray]) -> dict:
    """A value an op saved for backward: an array's summary, or the repr of anything else."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return summary(to_host(v))
    if isinstance(v, tuple) and any(hasattr(item, "shape") for item in v):
        return {"items": [describe_value(item, to_host) for item in v]}
    text = repr(v)
    return {"repr": text if len(text) <= 200 else text[:200] + "…"}
