"""CUDA graphs as the backend sees them: what a capture swaps, and what it defers.

While a stream is captured (`Backend.capture`, for `tx.jit(step, cuda_graph=True)`) two things
an eager step does cannot happen, and the backend, not the ops, takes care of both:

- CuPy refuses its own BLAS calls (`matmul`, `einsum`): the capture swaps them, in the array
  module the ops use (`ArrayModule`, the device's `xp`), for ones a graph can hold (blas.py).
  An op writes `xp.matmul(a, b)` and never knows. (Not `a @ b` on raw arrays: CuPy's `@` is
  compiled and calls its own cuBLAS, which nothing outside CuPy can swap.)
- No value can be read on the host, so a check of values (an id out of range) cannot raise
  when it is made: the capture keeps each check (`DeferredCheck`) with its graph, and they are
  read after each launch (`CapturedGraph.failed`). An op calls `backend.check` and never knows.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple


class ArrayModule:
    """An array library's namespace as the ops see it (a device's `xp`): the library's own
    functions, but for those a capture swaps for the time it lasts (`swapped`)."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)  # the library's own, looked up once
        setattr(self, name, attr)
        return attr

    @contextlib.contextmanager
    def swapped(self, **functions: Callable[..., Any]) -> Iterator[None]:
        """Inside: `functions` in place of the library's functions of those names."""
        vars(self).update(functions)
        try:
            yield
        finally:
            for name in functions:
                vars(self).pop(name, None)  # the library's own again, at the next lookup


class DeferredCheck(NamedTuple):
    """A check of values made while a graph was captured: `bad` (a device array) is True where
    a value is wrong; `error()` says which, once the values can be read; `stack`: where it was made."""

    bad: Any
    error: Callable[[], Exception]
    stack: Any


class CudaGraph:
    """A graph CuPy captured, with the memory pool its arrays live in (kept as long as it is)."""

    def __init__(self, cupy: Any, graph: Any, pool: Any):
        self.cupy, self.graph, self.pool = cupy, graph, pool

    def launch(self) -> None:
        self.graph.launch(self.cupy.cuda.get_current_stream())  # in order with the eager kernels


class CapturedGraph:
    """A captured graph (the device's own: a CuPy graph and its memory pool, or the strict device's
    model of one), the checks its ops made, and the one flag that says whether any failed."""

    def __init__(self, graph: Any, checks: list[DeferredCheck], flag: Any):
        self.graph, self.checks, self.flag = graph, checks, flag

    def launch(self) -> None:
        self.graph.launch()

    def failed(self) -> DeferredCheck | None:
        """The first check whose values were wrong at the last launch: one flag is read back, the
        checks themselves only when it is set."""
        if self.flag is None or not bool(self.flag):
            return None
        return next(check for check in self.checks if bool(check.bad.any()))

    def nbytes(self) -> int:
        """Device memory the graph holds in its own pool (its arrays live there between launches)."""
        pool = getattr(self.graph, "pool", None)
        return 0 if pool is None else pool.total_bytes()


def any_failed(xp: Any, checks: list[DeferredCheck]) -> Any:
    """One device flag, True if any check's values are wrong: computed inside the graph, so that
    each launch computes it again (None without checks)."""
    return xp.stack([check.bad.any() for check in checks]).any() if checks else None
