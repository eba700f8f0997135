"""The engine's BLAS thread policy (`tx.set_num_threads`, `tx.get_num_threads`): what it sets, in
fresh processes where the default is at stake. Its speed is measured by benchmarks/threads.py, never
here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info

import tinygrad_tx as tx
from tinygrad_tx.backends.threads import USER_VARIABLES

REPO = Path(__file__).resolve().parents[2]


def numpy_blas_threads() -> int:
    """What the BLAS library NumPy loaded (a wheel's, under numpy.libs/) says of itself."""
    libs = [lib for lib in threadpool_info() if lib["user_api"] == "blas" and "numpy" in lib["filepath"]]
    return libs[0]["num_threads"] if libs else pytest.skip("NumPy's BLAS is not a wheel's own here")


def fresh(code: str, **variables: str) -> str:
    """Run `code` in a new process with none of the BLAS variables set but `variables`; the last line
    it printed."""
    env = {k: v for k, v in os.environ.items() if k not in USER_VARIABLES}
    env.update(variables, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_set_and_get_reach_numpys_blas():
    before = tx.get_num_threads()
    try:
        for n in (2, 1):
            tx.set_num_threads(n)
            assert tx.get_num_threads() == n == numpy_blas_threads()
    finally:
        tx.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_a_bad_number_of_threads_is_refused(bad):
    with pytest.raises(ValueError, match="whole number >= 1"):
        tx.set_num_threads(bad)


NUMPY_BLAS = "[l['num_threads'] for l in threadpoolctl.threadpool_info() if 'numpy' in l['filepath']]"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: NumPy's own default is one thread too")
def test_one_thread_by_default_with_no_variable_set():
    assert int(fresh(f"import numpy, threadpoolctl\nprint({NUMPY_BLAS})").strip("[]")) > 1  # NumPy alone: a core each
    assert fresh(f"import threadpoolctl, tinygrad_tx as tx\nprint(tx.get_num_threads(), {NUMPY_BLAS})") == "1 [1]"
    # NumPy imported, and its BLAS used, before the engine: limited all the same
    assert fresh("import numpy as np, threadpoolctl\nnp.ones((300, 300)) @ np.ones((300, 300))\n"
                 f"import tinygrad_tx as tx\nprint({NUMPY_BLAS})") == "[1]"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: OpenBLAS caps any setting at one thread")
def test_a_variable_the_user_set_is_left_alone():
    assert fresh("import tinygrad_tx as tx\nprint(tx.get_num_threads())", OPENBLAS_NUM_THREADS="2") == "2"
