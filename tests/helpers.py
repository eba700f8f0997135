"""Small helpers the engine's, the ops' and the instruments' tests share (imported as
`from ..helpers import leaf`; the `device`, `torch` and `rng` fixtures are in conftest.py)."""
import numpy as np

from tinygrad_tx import Tensor, nn, observers

TIGHT = dict(atol=1e-7, rtol=1e-6)  # gradcheck's tolerances in float64, where nothing looser is needed


def leaf(values, device="cpu", dtype=np.float64, name=None) -> Tensor:
    """A tensor that requires grad: float64 on the cpu unless told otherwise."""
    return Tensor(np.array(values, dtype=dtype), requires_grad=True, device=device, name=name)


def t(*shape, dtype=np.float64, device="cpu", requires_grad=False) -> Tensor:
    """A tensor of ones of this shape."""
    return Tensor(np.ones(shape, dtype=dtype), device=device, requires_grad=requires_grad)


def param(values, dtype=np.float64) -> Tensor:
    """A parameter on the default device (the one `on_each_device` chooses)."""
    return Tensor(np.array(values, dtype=dtype), requires_grad=True)


def no_observer_left() -> bool:
    """No instrument and no global module hook is left installed."""
    return observers.active == [] and not nn.hooks.GLOBAL_HOOKS
