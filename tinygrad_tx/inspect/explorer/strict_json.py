"""Every answer the explorer gives is strict JSON, NaN and infinity included.

JSON has no NaN or Infinity, and a browser's `JSON.parse` refuses Python's `NaN`
token, so a diverged run (NaN weights, a loss of inf) would otherwise break the
page, or, raised while the answer is written, the connection. Here a non-finite
number becomes the text "NaN", "Infinity" or "-Infinity", which the page shows as
such (draw.js, `fmt`). NumPy scalars and arrays become plain numbers and lists.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def plain(value: Any) -> Any:
    """`value` with every float finite or spelled as text, and NumPy values as Python ones."""
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE[repr(value)]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(type(v) is float and math.isfinite(v) for v in value):  # the common case, a row of numbers: as it is
            return value
        return [plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return plain(value.tolist())
    return value


def dumps(value: Any) -> str:
    """Strict JSON text of `value` (a value JSON cannot hold at all raises TypeError)."""
    return json.dumps(plain(value), allow_nan=False, ensure_ascii=False)
