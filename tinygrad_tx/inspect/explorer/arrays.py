"""Arrays as the page sees them: a few statistics and a small heat-map, as plain JSON.

The statistics are over the finite values, with the NaNs and Infs counted apart;
the heat-map keeps every value as it is (NaN and ±inf included: `strict_json` spells
them so that JSON can carry them, and the page colours them apart).

Both are exact and cheap on a big array (an M model's (32, 64, 8000) logits, 16M values):
min and max in the array's own type (exact for any type), sums in float64 a block at a
time (no float64 copy of the whole array, which took a second), and the heat-map picks
its cells before converting them.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

HEAT_SIDE = 48
"""A heat-map shows at most HEAT_SIDE × HEAT_SIDE cells: every k-th row and column beyond that."""
BLOCK = 1 << 16
"""Values converted to float64 at a time by `summary` (a block stays in the processor's cache)."""


def summary(a: np.ndarray) -> dict:
    """shape, dtype, min, max, mean, std and L2 norm over the finite values, and how many are not."""
    a = np.asarray(a)
    values = a.reshape(-1) if a.dtype.kind in "biuf" else np.zeros(a.size)  # (n,) a view where it can be
    stats = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size), "nan": 0, "inf": 0}
    if not values.size:
        return stats
    low, high = values.min(), values.max()  # a NaN anywhere makes one of them NaN, an inf ±inf
    if values.dtype.kind == "f" and not (np.isfinite(low) and np.isfinite(high)):
        stats.update(nan=int(np.isnan(values).sum()), inf=int(np.isinf(values).sum()))
        values = values[np.isfinite(values)]
        if not values.size:
            return stats
        low, high = values.min(), values.max()
    mean = values.sum(dtype=np.float64) / values.size
    squares, centred = _squares(values, mean)  # a second pass about the mean, so that std keeps its digits
    stats.update(min=float(low), max=float(high), mean=float(mean), std=float(np.sqrt(centred / values.size)),
                 norm=float(np.sqrt(squares)))
    return stats


def norm(a: np.ndarray) -> float:
    """The L2 norm of `a` (summed in float64, as `summary`'s)."""
    return float(np.sqrt(_squares(np.asarray(a).reshape(-1), 0.0)[0]))


def _squares(values: np.ndarray, mean: float) -> tuple[float, float]:
    """The sums of x² and of (x − mean)² over `values` (n,), in float64 a block at a time."""
    squares = centred = 0.0
    for start in range(0, values.size, BLOCK):
        block = values[start:start + BLOCK].astype(np.float64)
        squares += block @ block
        block -= mean
        centred += block @ block
    return squares, centred


def heat(a: np.ndarray, row_labels: list[str] | None = None, col_labels: list[str] | None = None) -> dict:
    """A 2-D view of `a` for a heat-map: the last two axes of its first slice
    (`[0, 0, :, :]` of a (B, h, T, T) array), every k-th row and column when larger
    than HEAT_SIDE; `where` says which slice, `stride` which step was taken and
    `axes` which axes of `a` the rows and columns are. Labels (one per row or column
    of that plane, such as the tokens at each position) are thinned the same way."""
    a = np.asarray(a) if np.asarray(a).dtype.kind in "biuf" else np.zeros(np.shape(a))
    lead = (0,) * max(a.ndim - 2, 0)
    plane = a[lead].reshape((1, -1) if a.ndim < 2 else a[lead].shape)  # (rows, cols)
    stride = [max(1, math.ceil(n / HEAT_SIDE)) for n in plane.shape]
    plane = plane[::stride[0], ::stride[1]].astype(np.float64)  # the cells shown, and only they, become float64
    where = "[" + ", ".join(["0"] * len(lead) + [":"] * min(a.ndim, 2)) + "]" if a.ndim > 2 else ""
    axes = [a.ndim - 2, a.ndim - 1] if a.ndim >= 2 else [None, 0 if a.ndim == 1 else None]
    answer = {"rows": plane.tolist(), "where": where, "stride": stride, "axes": axes}
    if row_labels is not None and len(row_labels) == a.shape[-2]:
        answer["row_labels"] = row_labels[::stride[0]]
    if col_labels is not None and a.ndim >= 1 and len(col_labels) == a.shape[-1]:
        answer["col_labels"] = col_labels[::stride[1]]
    return answer


def describe_value(v: Any, to_host: Callable[[Any], np.ndarray]) -> dict:
    """A value an op saved for backward: an array's summary, or the repr of anything else."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return summary(to_host(v))
    if isinstance(v, tuple) and any(hasattr(item, "shape") for item in v):
        return {"items": [describe_value(item, to_host) for item in v]}
    text = repr(v)
    return {"repr": text if len(text) <= 200 else text[:200] + "…"}
