"""Running a job of two processes: `mpiexec -n 2` (the tests that need it skip, saying why,
where mpiexec or mpi4py is missing), worker.py's cases, and the files the ranks write."""
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest


HERE = Path(__file__).parent
REPO = HERE.parents[1]
RANKS = 2


# pip puts the mpich wheel's mpiexec next to this Python's scripts, which need not be on PATH
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")]))


def _skip_reason() -> str | None:
    if MPIEXEC is None:
        return 'mpiexec is not installed: pip install "tinygrad-tx[dist]" (the mpich wheel provides it)'
    if importlib.util.find_spec("mpi4py") is None:
        return 'mpi4py is not installed: pip install "tinygrad-tx[dist]"'
    return None


needs_mpi = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def one_gpu_per_rank(device: str) -> None:
    """Skip a cuda case on a machine with fewer GPUs than RANKS: NCCL needs one per rank."""
    if device == "cuda":
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if count < RANKS:
            pytest.skip(f"data parallelism on cuda needs {RANKS} GPUs (one per rank); this machine has {count}")


def mpiexec(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """`mpiexec -n 2 python ARGS` from the repository root, one BLAS thread per rank."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([MPIEXEC, "-n", str(RANKS), sys.executable, *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def run_worker(case: str, device: str, out: Path, **kwargs) -> subprocess.CompletedProcess:
    return mpiexec(str(HERE / "worker.py"), case, device, str(out), **kwargs)


def results(out: Path) -> list[dict]:
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(RANKS)]


def replayed_as_eager(case: str, device: str, out: Path) -> list[dict]:
    """Run a worker case that trains eagerly and under tx.jit on every rank; check each rank made
    5 replays and that every array it saved after the jitted run ("jit.x") equals eager's ("eager.x")
    bit for bit; the ranks' results."""
    one_gpu_per_rank(device)
    done = run_worker(case, device, out)
    assert done.returncode == 0, done.stderr
    ranks = results(out)
    for got in ranks:
        assert got["replays"] == 5
        for name in (k[len("eager."):] for k in got if k.startswith("eager.")):
            np.testing.assert_array_equal(got[f"jit.{name}"], got[f"eager.{name}"], err_msg=name)
    return ranks


def load_worker():
    spec = importlib.util.spec_from_file_location("dist_worker", HERE / "worker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
