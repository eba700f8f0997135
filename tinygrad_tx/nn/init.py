"""Parameter initialisers. Each draws on the host generator (`tx.manual_seed`) and
then moves the numbers to the tensor's device, so one seed gives one model on
CPU and GPU. They fill the tensor in place and return it."""
from __future__ import annotations

import math

import numpy as np

from ..backends import host_rng
from ..tensor import Tensor


def _fill(t: Tensor, host: np.ndarray) -> Tensor:
    t.data = t.backend.from_host(host.astype(t.dtype))
    return t


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0) -> Tensor:
    return _fill(t, host_rng().uniform(low, high, t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _fill(t, host_rng().normal(mean, std, t.shape))


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, np.zeros(t.shape))


def ones_(t: Tensor) -> Tensor:
    return _fill(t, np.ones(t.shape))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio (2010): U(-a, a), a = gain·√(6 / (fan_in + fan_out)), which keeps
    activation variance roughly constant through layers in both directions."""
    fan_in, fan_out = t.shape[0], t.shape[-1]  # weights here are (in, out)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    fan_in, fan_out = t.shape[0], t.shape[-1]
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
