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
import ctypes
import functools
import os
import traceback
from typing import Any, Callable

import numpy as np

from . import blas, host_kernels
from ..observers import replayable
from .graphs import ArrayModule, CapturedGraph, CudaGraph, DeferredCheck, any_failed
from .scatter import cuda_segment_add, host_segment_add, scatter_add_in_order

INSTALL_HINT = 'pip install -e ".[cuda]" (from a clone of tinygrad_tx; the package is not on PyPI yet)'


class DeviceError(RuntimeError):
    """Raised when a device is unknown, unavailable, or mixed within one op."""


class Backend:
    """One device: its array module `xp` and the few helpers that differ per library."""

    graphs = False  # whether this device can capture a CUDA graph (`capture`)

    def __init__(self, name: str, xp: Any, array_type: type):
        self.name = name
        self.xp = xp
        self.array_type = array_type
        self.rng = self._generator(_seed)
        self._deferred: list[DeferredCheck] | None = None  # while a CUDA graph is captured: its checks

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

    # -- checks of values ------------------------------------------------------------
    def check(self, bad: Any, error: Callable[[], Exception]) -> None:
        """Raise `error()` if any element of the boolean array `bad` is True (ids out of range: checked
        where values are). While a CUDA graph is captured no value can be read: the check is then
        the graph's, read after each launch (graphs.py)."""
        if self._deferred is not None:
            self._deferred.append(DeferredCheck(bad, error, traceback.extract_stack()))
        elif bad.any():
            raise error()

    # -- CUDA graphs ---------------------------------------------------------------
    def check_capture(self) -> None:
        """Raise DeviceError unless this device can capture a CUDA graph."""
        if not self.graphs:
            raise DeviceError(f"a CUDA graph needs the step on a CUDA device, not {self.name}: move the model "
                              "and the batches with .to('cuda'), or leave cuda_graph off")

    def capture(self, fn: Callable[[], Any]) -> tuple[CapturedGraph, Any]:
        """Run `fn()` captured as a CUDA graph: (the graph, what `fn` returned). The capture
        itself computes nothing on a GPU; `graph.launch()` runs the captured kernels, on the
        same arrays, with the numbers they were given (`tx.jit(..., cuda_graph=True)`). Meanwhile
        the ops' BLAS functions are ones a graph can hold, and their checks wait for the launches."""
        self.check_capture()
        self._deferred = checks = []
        try:
            graph, (result, flag) = self._capture(lambda: (fn(), any_failed(self.xp, checks)))
        finally:
            self._deferred = None
        return CapturedGraph(graph, checks, flag), result

    def _capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """The device's own capture of `fn()`: (its graph, what `fn` returned)."""
        raise NotImplementedError


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

    graphs = True

    def __init__(self):
        from . import strict

        super().__init__("strict", ArrayModule(strict.xp), strict.StrictArray)
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

    def _capture(self, fn):
        """The strict device's model of a CUDA graph (`strict.py`). Its capture computes
        (a GPU's computes nothing), so the generator is put back where it was: on a GPU the
        graph's first draw is made by its first launch."""
        state = self.rng.bit_generator.state
        try:
            with self.xp.swapped(matmul=self._strict.wrap_function(self._strict.graph_matmul, "graph_matmul"),
                                 einsum=blas.einsum_by_sums):
                return self._strict.capture(fn)
        finally:
            self.rng.bit_generator.state = state


class CupyBackend(Backend):
    graphs = True

    def __init__(self, cupy: Any):
        super().__init__("cuda", ArrayModule(cupy), cupy.ndarray)
        self.cupy = cupy
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

    def _capture(self, fn):
        cupy = self.cupy
        if self._cublas is None:  # made once, outside any capture: a handle and its workspace
            self._cublas = blas.DirectCublas(cupy)
        pool = cupy.cuda.MemoryPool()  # the graph's own: no array made later may take its memory
        stream = cupy.cuda.Stream(non_blocking=True)  # the legacy default stream cannot capture
        with cupy.cuda.using_allocator(pool.malloc), stream, \
                self.xp.swapped(matmul=self._cublas, einsum=blas.einsum_by_sums):
            stream.begin_capture()
            try:
                result = fn()
            except BaseException:
                with contextlib.suppress(Exception):  # ending a broken capture fails as well: the
                    stream.end_capture()  # first error is the one that says what broke it
                raise
            graph = stream.end_capture()
        return CudaGraph(cupy, graph, pool), result


def _load_cupy() -> Backend:
    try:
        import cupy
    except ImportError as e:
        if not gpu_count():  # CuPy would not help: say so first
            raise DeviceError(f'device "cuda": this machine has no NVIDIA GPU (no CUDA driver sees one); use --device '
                              f'cpu. On a machine with a GPU, install CuPy ({e}) with {INSTALL_HINT}') from None
        raise DeviceError(
            f'device "cuda" needs CuPy, which is not installed ({e}); install it with {INSTALL_HINT}'
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceError('device "cuda": CuPy is installed but sees no GPU; use --device cpu')
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise DeviceError(f'device "cuda": CuPy is installed but no GPU is usable ({e}); use --device cpu') from None
    return CupyBackend(cupy)


def gpu_count() -> int:
    """The NVIDIA GPUs the CUDA driver sees, asked without CuPy: 0 where no driver is installed."""
    for name in ("libcuda.so.1", "nvcuda.dll"):  # Linux's, Windows'
        try:
            driver = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        found = driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0
        return count.value if found else 0
    return 0


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
