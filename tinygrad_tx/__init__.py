"""tinygrad_tx: a small reverse-mode autograd engine on NumPy (CPU) or CuPy (GPU), written to be
read. The layers, bottom up: `backends/` (arrays on a device), `function.py` (the op pattern),
`backward.py` (the walk back, planned then run), `ops/` (each op's math next to its gradient),
`tensor.py` (the Tensor, whose methods hand over to ops), then `functional`, `nn`, `optim`."""
from .backends import (DeviceError, default_device, get_backend, get_num_threads, manual_seed, set_device,
                       set_num_threads)
from .creation import arange, ones, randn, zeros
from .function import REGISTRY, enable_grad, is_grad_enabled, no_grad
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .jit import JitError, jit
from .plan import BackwardPlan, backward_plan
from .serialization import load, save
from .functional import cat, stack
from .tensor import Tensor, grad, where
from . import functional, inspect, nn, optim, schedules

__all__ = ["Tensor", "REGISTRY", "no_grad", "enable_grad", "is_grad_enabled", "grad", "DeviceError",
           "default_device", "get_backend", "manual_seed", "set_device", "zeros", "ones", "randn",
           "arange", "cat", "stack", "where", "gradcheck", "gradgradcheck", "GradcheckError", "functional", "nn",
           "optim", "schedules", "inspect", "save", "load", "jit", "JitError", "backward_plan", "BackwardPlan",
           "set_num_threads", "get_num_threads"]
