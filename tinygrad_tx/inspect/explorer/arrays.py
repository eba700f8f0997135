"""Arrays as the page sees them: a few statistics and a small heat-map, as plain JSON.

The statistics are over the finite values, with the NaNs and Infs counted apart;
the heat-map keeps every value as it is (NaN and ±inf included: `strict_json` spells
them so that JSON can carry them, and the page colours them apart).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

HEAT_SIDE = 48
"""A heat-map shows at most HEAT_SIDE × HEAT_SIDE cells: every k-th row and column beyond that."""


def summary(a: np.ndarray) -> dict:
    """shape, dtype, min, max, mean, std and L2 norm over the finite values, and how many are not."""
    a = np.asarray(a)
    values = a.astype(np.float64) if a.dtype.kind in "biuf" else np.zeros(a.shape)
    finite = values[np.isfinite(values)]
    stats = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size),
             "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum())}
    if finite.size:
        stats.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()),
                     std=float(finite.std()), norm=float(np.sqrt((finite * finite).sum())))
    return stats


def heat(a: np.ndarray, row_labels: list[str] | None = None, col_labels: list[str] | None = None) -> dict:
    """A 2-D view of `a` for a heat-map: the last two axes of its first slice
    (`[0, 0, :, :]` of a (B, h, T, T) array), every k-th row and column when larger
    than HEAT_SIDE; `where` says which slice, `stride` which step was taken and
    `axes` which axes of `a` the rows and columns are. Labels (one per row or column
    of that plane, such as the tokens at each position) are thinned the same way."""
    a = np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind in "biuf" else np.zeros(np.shape(a))
    lead = (0,) * max(a.ndim - 2, 0)
    plane = a[lead].reshape((1, -1) if a.ndim < 2 else a[lead].shape)  # (rows, cols)
    stride = [max(1, math.ceil(n / HEAT_SIDE)) for n in plane.shape]
    plane = plane[::stride[0], ::stride[1]]
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
