"""The backend's floor: everything that knows which device holds an array, and nothing above it.

`backend.py` is the one module the rest of the engine asks for a device (`get_backend`, `xp`,
transfers, random numbers, casts, scatter-add, a CUDA graph's capture). The others are what it
stands on, each one idea: `strict.py` the CPU test device with CuPy's manners, `host_kernels.py`
the CPU's speed helpers, `scatter.py` scatter-add in a fixed order, `graphs.py` what a CUDA
graph's capture swaps and defers, `blas.py` the products a graph can hold, `fused_adam.py`
Adam's update as one GPU kernel, `threads.py` the engine's BLAS thread policy. Above this
folder no file imports an array library's device machinery: ops see `xp` and Python's
operators (as Chainer's `backends/` keeps CuPy and iDeep behind `chainer.backend`).
"""
from .backend import (Backend, DeviceError, backend_of, default_device, get_backend, host_rng, manual_seed,
                      set_device)
from .threads import get_num_threads, set_num_threads

__all__ = ["Backend", "DeviceError", "backend_of", "default_device", "get_backend", "host_rng", "manual_seed",
           "set_device", "get_num_threads", "set_num_threads"]
