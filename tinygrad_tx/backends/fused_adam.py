"""Adam's update as one CUDA kernel per parameter: a speed trick for the GPU, kept apart from
the rule a learner reads (`optim.Adam._update`).

Why: on a GPU a small model's step is launch-bound, and the readable update is thirteen
passes over each parameter (every `*=`, `+=` and `sqrt` is a kernel of its own). Measured on
an H200 (docs/devices.md): a toy training step started 2,265 kernels, Adam's 13 per parameter
among them. Here the same arithmetic is one kernel a parameter.

The kernel does the same float operations in the same order, each rounded as CuPy's own
kernels round it (compiled without fused multiply-adds, `--fmad=false`, so no two operations
are contracted into one rounding), so the update is bit for bit the readable one's; a test
checks that on a GPU (tests/engine/test_optim.py). On NumPy and the strict device the
readable code runs.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

_OPERATION = r"""
T tmp = g * one_minus_beta1;
m = m * beta1;
m = m + tmp;                      // m = β1·m + (1-β1)·g
tmp = g * one_minus_beta2;
tmp = tmp * g;
v = v * beta2;
v = v + tmp;                      // v = β2·v + (1-β2)·g²
T denom = sqrt(v);
denom = denom / sqrt_bias2;
denom = denom + eps;              // √v̂ + eps
T step = m / denom;
step = step * lr_over_bias1;
p = p - step;                     // p -= lr·m̂ / (√v̂ + eps)
"""


def adam_kernel(xp: Any, dtype: np.dtype) -> Callable[..., Any] | None:
    """The fused update for arrays of `xp` (CuPy) and `dtype` (float32, float64), else None.

    Called as kernel(grad, 1-β1, β1, 1-β2, β2, √(1-β2^t), eps, lr/(1-β1^t), param, m, v):
    param, m and v are changed in place."""
    if getattr(xp, "__name__", "") != "cupy" or np.dtype(dtype) not in (np.float32, np.float64):
        return None
    return _kernel(xp)


@functools.cache
def _kernel(cupy: Any) -> Any:
    return cupy.ElementwiseKernel(
        "T g, T one_minus_beta1, T beta1, T one_minus_beta2, T beta2, T sqrt_bias2, T eps, T lr_over_bias1",
        "T p, T m, T v", _OPERATION, "tinygrad_tx_adam", options=("--fmad=false",))
