"""How many threads NumPy's BLAS (the matrix products) may use: the engine's policy, as in PyTorch.

    tx.get_num_threads()      # 1 unless the environment or a call said otherwise
    tx.set_num_threads(2)     # e.g. a large model on a machine with nothing else running

The default is one thread. OpenBLAS, NumPy's BLAS, starts one thread per core, and a
thread waiting for work spins on its core instead of sleeping. Beside one other busy
process, on a 2-core machine, such a spinning thread takes turns with that process, and
`examples/copy_task.py` took 210 s instead of 6 s (30 times slower). One thread never
waits for another: beside a busy process a step is about as fast as alone, and alone it
loses little at this library's sizes, where a step is many small products
(`python benchmarks/threads.py` measures both; docs/benchmarks.md has this machine's table).

A variable the user set for the BLAS library itself (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS,
MKL_NUM_THREADS, BLIS_NUM_THREADS) is the user's choice: the library was started with it,
and the engine leaves it so. No variable is needed otherwise.

threadpoolctl (scikit-learn's) finds the BLAS libraries loaded in a process and sets their
thread count, which no NumPy function does; the engine depends on it for that. The engine's
BLAS is the one NumPy loaded (with any other loaded before `import tinygrad_tx`); one that
comes later with another package (SciPy's own OpenBLAS) is that package's, and keeps its setting.
"""
from __future__ import annotations

import os

import numpy  # noqa: F401 - loads NumPy's BLAS before the snapshot below
from threadpoolctl import ThreadpoolController

DEFAULT = 1
USER_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
ENGINE_BLAS = ThreadpoolController().select(user_api="blas")  # the BLAS libraries loaded now: NumPy's


def set_num_threads(n: int) -> None:
    """Let the engine's BLAS (NumPy's matrix products) use `n` threads (n >= 1)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: the number of threads must be a whole number >= 1, not {n!r}")
    ENGINE_BLAS.limit(limits=n)


def get_num_threads() -> int:
    """The threads the engine's BLAS may use now."""
    return max((lib["num_threads"] for lib in ENGINE_BLAS.info()), default=1)


def user_chose() -> str | None:
    """The BLAS variable the user set in the environment, if any."""
    return next((name for name in USER_VARIABLES if os.environ.get(name)), None)


if user_chose() is None:  # on `import tinygrad_tx`, before the first product
    set_num_threads(DEFAULT)
