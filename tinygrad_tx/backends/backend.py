"""Backends: the one module that knows which array library holds a tensor's data.

"cpu" runs on NumPy, "cuda" on CuPy (imported only when asked for), and "strict"
is a test-only CPU backend whose arrays behave like CuPy's where it bites: they
refuse implicit conversion to NumPy and refuse NumPy operands. Ops never import
an array library themselves; they ask the backend of their inputs for `xp`.

Every host <-> device transfer, scatter-add, random draw and dtype cast goes
through a `Backend`, so the rest of the engine is device-agnostic.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Callable

import numpy as np

from . import blas, host_kernels
from ..observers import replayable
from .scatter import cuda_segment_add, host_segment_add, scatter_add_in_order

INSTALL_HINT = 'pip install -e ".[cuda]" (from a clone of tinygrad_tx; the package is not on PyPI yet)'


class DeviceError(RuntimeError):
    """Raised when a device is unknown, unavailable, or mixed within one op."""


class Backend:
    """One device: its array module `xp` and the few helpers that differ per library."""

    def __init__(self, name: str, xp: Any, array_type: type):
        self.name = name
        self.xp = xp
        self.array_type = array_type
        self.rng = self._generator(_seed)

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    # -- transfers -------------------------------------------------------------
    def from_host(self, array: np.ndarray, dtype: Any = None) -> Any:
        """Copy a NumPy array (or Python data) onto this device."""
        return self.xp.asarray(array, dtype=dtype)

    def to_host(self, array: Any) -> np.ndarray:
        """Copy device data to a NumPy array (synchronises on a GPU)."""
        raise NotImplementedError

    def cast(self, array: Any, dtype: Any) -> Any:
        """`array` in `dtype`, without a copy when it already has that dtype."""
        return array.astype(dtype, copy=False)

    # -- what a tensor holds ---------------------------------------------------------
    def as_array(self, data: Any) -> Any:
        """`data`, which is not of this device's array type, as a tensor's data (`Tensor._from_op`).

        NumPy gives a scalar (np.float32) for a 0-d result where CuPy gives a 0-d array; a
        scalar cannot be written in place (`dist.all_reduce`) and is shared (`np.True_`), so
        the NumPy backend makes it a 0-d array. CuPy's results are always arrays: what else
        arrives here is a lifted number (`constant`), kept as it is.
        """
        return data

    def memory(self, array: Any) -> Any:
        """The array that owns `array`'s memory: `array` itself, or the array it is a view of
        (NumPy and CuPy name it `base`). In-place changes are recorded by it (`in_place`), so a
        view and its base share them."""
        base = array.base
        return base if isinstance(base, self.array_type) else array

    def constant(self, value: np.generic) -> Any:
        """A Python number lifted into an operand (the 2 of `x * 2`), already in its NumPy dtype.
        CuPy passes a NumPy scalar to its kernels as an argument; a 0-d array would be a copy to
        the GPU at every such product."""
        return value

    # -- scatter-add: a[idx] += v with repeated indices accumulated ----------------
    def scatter_add(self, target: Any, index: Any, values: Any) -> None:
        """In-place `target[index] += values`, where repeated indices accumulate, each position's
        values added in the order they come, on every device (`scatter.py`: a GPU's
        atomic adds would make a gradient's last bits change from run to run).

        Plain `target[index] += values` keeps only one of the repeated updates
        (and is undefined on CuPy), which silently drops gradient.
        """
        self._scatter_add(target, index, values)

    # -- random numbers ------------------------------------------------------------
    @replayable  # timed by the profiler; `tx.jit` reseeds again at each replay
    def seed(self, seed: int) -> None:
        """Reseed this device's generator (dropout's masks)."""
        self.rng = self._generator(seed)

    def _generator(self, seed: int) -> Any:
        return np.random.default_rng(seed)

    def bernoulli_keep(self, shape: tuple, p: float) -> Any:
        """A boolean array on this device, each element False with probability `p` (dropout)."""
        return self.from_host(host_kernels.bernoulli_keep(self.rng, shape, p))

    def erf(self, x: Any) -> Any:
        """The error function, elementwise (exact GELU needs it; NumPy lacks it)."""
        return self._erf(x)

    # -- CUDA graphs ---------------------------------------------------------------
    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """Run `fn()` captured as a CUDA graph: (the graph, what `fn` returned). The capture
        itself computes nothing on a GPU; `graph.launch()` runs the captured kernels, on the
        same arrays, with the numbers they were given (`tx.jit(..., cuda_graph=True)`)."""
        raise DeviceError(f"a CUDA graph needs the step on a CUDA device, not {self.name}: move the model "
                          "and the batches with .to('cuda'), or leave cuda_graph off")


def widened_sum(array: Any, axis: tuple, keepdims: bool) -> Any:
    """`array.sum(axis, keepdims)`, with float16 added in float32 and rounded once, as PyTorch
    adds it: NumPy adds float16 along a strided axis in float16, where 10,000 ones make 2048."""
    if array.dtype != np.float16:
        return array.sum(axis=axis, keepdims=keepdims)
    return array.sum(axis=axis, keepdims=keepdims, dtype=np.float32).astype(np.float16)


class NumpyBackend(Backend):
    def __init__(self):
        super().__init__("cpu", np, np.ndarray)
        host_kernels.keep_freed_memory()
        self._scatter_add = host_kernels.scatter_add
        self._erf = host_kernels.erf  # NumPy has none; SciPy's is not used where installed (see erf)

    def from_host(self, array, dtype=None):
        return np.asarray(array, dtype=dtype)

    def to_host(self, array):
        return np.asarray(array)

    def as_array(self, data):
        return np.asarray(data)  # a NumPy scalar (a 0-d result) as a 0-d array


class StrictBackend(Backend):
    """NumPy underneath, CuPy's manners on top; see `strict.py`."""

    def __init__(self):
        from . import strict

        super().__init__("strict", strict.xp, strict.StrictArray)
        self._strict = strict
        self._scatter_add = functools.partial(scatter_add_in_order, strict.xp,
                                              segment_add=strict.wrap_function(host_segment_add, "segment_add"))
        self._erf = strict.wrap_function(host_kernels.erf, "erf")
        # one "kernel" of the device, so that a graph's launch draws again (CuPy's generator
        # keeps its state on the GPU, and its kernels advance it)
        self._bernoulli_keep = strict.wrap_function(host_kernels.bernoulli_keep, "bernoulli_keep")

    def to_host(self, array):
        return array.get()

    def memory(self, array):
        """The NumPy array that owns the memory (StrictArrays are made afresh around every result)."""
        inner = array._a
        return inner.base if isinstance(inner.base, np.ndarray) else inner

    def as_array(self, data):
        """Refused: CuPy would have made an array; a NumPy scalar or a number here is the CPU's
        0-d result, or a value computed on the host, which a GPU tensor cannot hold."""
        raise TypeError(f"a {type(data).__module__}.{type(data).__name__} as the data of a strict tensor: "
                        "a tensor holds a device array (CuPy gives a 0-d array where NumPy gives a "
                        "scalar); compute it with the backend's xp, or move it with from_host()")

    def constant(self, value):
        return self.xp.asarray(value)  # a 0-d strict array (a NumPy scalar would be refused above)

    def bernoulli_keep(self, shape, p):
        return self._bernoulli_keep(self.rng, shape, p)

    def capture(self, fn):
        """The strict device's model of a CUDA graph (`strict.py`). Its capture computes
        (a GPU's computes nothing), so the generator is put back where it was: on a GPU the
        graph's first draw is made by its first launch."""
        state = self.rng.bit_generator.state
        try:
            with blas.capturing(self._strict.wrap_function(self._strict.graph_matmul, "graph_matmul")):
                return self._strict.capture(fn)
        finally:
            self.rng.bit_generator.state = state


class CupyBackend(Backend):
    def __init__(self, cupy: Any):
        super().__init__("cuda", cupy, cupy.ndarray)
        self._cublas = None  # cuBLAS called directly, for CUDA graphs (`blas.py`)
        self._scatter_add = functools.partial(scatter_add_in_order, cupy, segment_add=cuda_segment_add(cupy))
        from cupyx.scipy.special import erf

        self._erf = erf

    def _generator(self, seed):
        return self.xp.random.default_rng(seed)

    def bernoulli_keep(self, shape, p):
        # Drawn on the GPU: shipping a mask from the host every step would cost more.
        return self.rng.random(shape, dtype=self.xp.float32) >= p

    def to_host(self, array):
        return self.xp.asnumpy(array)

    def capture(self, fn):
        cupy = self.xp
        if self._cublas is None:  # made once, outside any capture: a handle and its workspace
            self._cublas = blas.DirectCublas(cupy)
        pool = cupy.cuda.MemoryPool()  # the graph's own: no array made later may take its memory
        stream = cupy.cuda.Stream(non_blocking=True)  # the legacy default stream cannot capture
        with cupy.cuda.using_allocator(pool.malloc), stream, blas.capturing(self._cublas):
            stream.begin_capture()
            try:
                result = fn()
            except BaseException:
                with contextlib.suppress(Exception):  # ending a broken capture fails as well: the
                    stream.end_capture()  # first error is the one that says what broke it
                raise
            graph = stream.end_capture()
        return _CudaGraph(cupy, graph, pool), result


class _CudaGraph:
    """A captured graph with the memory pool its arrays live in (kept as long as it is)."""

    def __init__(self, cupy: Any, graph: Any, pool: Any):
        self.cupy, self.graph, self.pool = cupy, graph, pool

    def launch(self) -> None:
        self.graph.launch(self.cupy.cuda.get_current_stream())  # in order with the eager kernels


def _load_cupy() -> Backend:
    try:
        import cupy
    except ImportError as e:
        raise DeviceError(
            f'device "cuda" needs CuPy, which is not installed ({e}); install it with {INSTALL_HINT}'
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceError('device "cuda": CuPy is installed but sees no GPU; use --device cpu')
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise DeviceError(f'device "cuda": CuPy is installed but no GPU is usable ({e}); use --device cpu') from None
    return CupyBackend(cupy)


_FACTORIES = {"cpu": NumpyBackend, "strict": StrictBackend, "cuda": _load_cupy}
_backends: dict[str, Backend] = {}
_default: str | None = None
_seed = 0
_host_rng = np.random.default_rng(_seed)


def get_backend(device: str | Backend | None = None) -> Backend:
    """The backend for `device` ("cpu", "cuda", "strict"); None means the default device."""
    if isinstance(device, Backend):
        return device
    name = default_device() if device is None else device
    backend = _backends.get(name)
    if backend is None:
        if name not in _FACTORIES:
            raise DeviceError(f"unknown device {name!r}; choose one of {sorted(_FACTORIES)}")
        backend = _backends[name] = _FACTORIES[name]()
    return backend


def default_device() -> str:
    """The device new tensors go to: `set_device`, else $TINYGRAD_TX_DEVICE, else "cpu"."""
    return _default or os.environ.get("TINYGRAD_TX_DEVICE", "cpu")


def set_device(device: str) -> None:
    """Make `device` the default for new tensors; fails at once if it is unavailable."""
    global _default
    get_backend(device)
    _default = device


def backend_of(array: Any) -> Backend:
    """The backend whose array type `array` is (NumPy arrays and scalars are "cpu")."""
    for backend in _backends.values():
        if isinstance(array, backend.array_type):
            return backend
    if isinstance(array, (np.ndarray, np.generic)):
        return get_backend("cpu")
    raise TypeError(f"not an array of any loaded backend: {type(array).__name__}")


def host_rng() -> np.random.Generator:
    """The host generator parameters are drawn from, so one seed gives one model on every device."""
    return _host_rng


@replayable
def manual_seed(seed: int) -> None:
    """Seed the host generator and every backend's generator (also those loaded later)."""
    global _seed, _host_rng
    _seed = seed
    _host_rng = np.random.default_rng(seed)
    for backend in _backends.values():
        backend.rng = backend._generator(seed)
