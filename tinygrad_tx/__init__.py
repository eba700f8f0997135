"""tinygrad_tx: a small reverse-mode autograd engine on NumPy (CPU) or CuPy (GPU),
written to be read. Start with `tensor.py`, `autograd.py` and `plan.py`, then `ops/`."""
from .autograd import REGISTRY, enable_grad, grad, is_grad_enabled, no_grad
from .backend import DeviceError, default_device, get_backend, manual_seed, set_device
from .creation import arange, ones, randn, zeros
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .jit import JitError, jit
from .ops import cat, stack, where
from .plan import BackwardPlan, backward_plan
from .serialization import load, save
from .tensor import Tensor
from .threads import get_num_threads, set_num_threads
from . import functional, inspect, nn, optim

__all__ = ["Tensor", "REGISTRY", "no_grad", "enable_grad", "is_grad_enabled", "grad", "DeviceError",
           "default_device", "get_backend", "manual_seed", "set_device", "zeros", "ones", "randn",
           "arange", "cat", "stack", "where", "gradcheck", "gradgradcheck", "GradcheckError", "functional", "nn",
           "optim", "inspect", "save", "load", "jit", "JitError", "backward_plan", "BackwardPlan",
           "set_num_threads", "get_num_threads"]
