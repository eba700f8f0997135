"""Data parallelism across processes: each case starts `mpiexec -n 2` (skipped, saying why,
where mpiexec or mpi4py is missing) and checks what the ranks computed against one process
computing the same thing without MPI."""
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
from tinygrad_tx import optim

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


def load_worker():
    spec = importlib.util.spec_from_file_location("dist_worker", HERE / "worker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- without mpiexec: a job of one ---------------------------------------------------------

def test_more_ranks_than_gpus_is_refused_in_words():
    """Seen on a one-GPU H200: two ranks took GPU 0 both (local rank % GPUs) and NCCL failed
    with NCCL_ERROR_INVALID_USAGE and a traceback on each rank. Each rank has its own GPU."""
    assert [dist.group.gpu_of(r, 2, 2) for r in range(2)] == [0, 1]
    assert dist.group.gpu_of(1, 2, 8) == 1
    with pytest.raises(dist.DistributedError, match=r"2 ranks on this host but 1 GPU\(s\).*one GPU per rank"):
        dist.group.gpu_of(0, 2, 1)


def test_single_process_is_the_identity(device):
    assert not dist.launched_by_mpi()
    assert (dist.rank(), dist.world_size()) == (0, 1)
    t = tx.Tensor([1.0, 2.0], device=device)
    assert dist.all_reduce(t) is t and dist.broadcast(t) is t
    assert t.numpy().tolist() == [1.0, 2.0]
    assert dist.all_reduce(3, op="sum") == 3
    dist.barrier()
    model = tx.nn.Linear(2, 2).to(device)
    wrapped = dist.DataParallel(model)
    assert wrapped.buckets == [] and all(p._ready_hooks == () for p in model.parameters())
    assert wrapped.parameters() == model.parameters()  # the wrapper passes on to its module
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(t, op="max")


# -- with mpiexec ---------------------------------------------------------------------------

@needs_mpi
def test_collectives(device, tmp_path):
    one_gpu_per_rank(device)
    done = run_worker("collectives", device, tmp_path)
    assert done.returncode == 0, done.stderr
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)
    for r, got in enumerate(results(tmp_path)):
        np.testing.assert_array_equal(got["sum"], base * 1 + base * 2)  # ranks hold base·(rank+1)
        np.testing.assert_array_equal(got["mean"], np.full(5, 1.5))  # (1 + 2) / 2
        assert got["mean"].dtype == np.float64
        np.testing.assert_array_equal(got["host"], 2 * np.arange(4) + 10)  # (0..3) + (10..13)
        expected = strided * (r + 1)
        expected[:, ::2] = strided[:, ::2] * 3  # only the strided view was reduced
        np.testing.assert_array_equal(got["strided"], expected)
        np.testing.assert_array_equal(got["broadcast"], np.full(3, 7.0))  # root 1's values
        assert got["loss"].shape == () and got["loss"] == 4.5  # the mean of 0+1+2 and 0+2+4
        assert got["zero_d_broadcast"] == 2.0  # rank 1's 2·1
        assert got["count"] == 3 and got["float_mean"] == 0.5


@needs_mpi
def test_data_parallel_equals_one_process_with_the_whole_batch(device, tmp_path):
    """Buckets of mixed sizes, a parameter no rank uses, one used on rank 0 only, a batch
    of 7 rows split 4 + 3: three SGD steps give one process's parameters."""
    one_gpu_per_rank(device)
    done = run_worker("data_parallel", device, tmp_path)
    assert done.returncode == 0, done.stderr
    ranks = results(tmp_path)
    buckets = ranks[0]["buckets"]
    assert len(buckets) > 1 and len(set(buckets.tolist())) > 1
    assert ranks[0]["calls"][1:].tolist() == [len(buckets)] * 2  # one call per bucket, not per parameter
    # the first step finds the order gradients finish in; then buckets start while backward runs
    assert ranks[0]["early_calls"][0] == 0 and (ranks[0]["early_calls"][1:] > 0).all()
    assert ranks[0]["profiled_steps"] == 1  # the profiler's "all_reduce" row

    worker = load_worker()
    tx.manual_seed(0)  # rank 0's weights, which DataParallel broadcast
    model = worker.Net().to(device)
    opt = optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = worker.data(step, 7)
        opt.zero_grad()
        for shard in range(RANKS):  # the same rows per forward, the whole batch's loss
            out = model(tx.Tensor(x[shard::2], device=device), use_extra=shard == 0)
            loss = ((out - tx.Tensor(y[shard::2], device=device)) ** 2).sum() * (1 / 7)
            loss.backward()
        if step == 0:
            for name, p in model.named_parameters():
                for got in ranks:
                    if p.grad is None:
                        assert np.isnan(got[f"grad.{name}"]), f"{name} got a gradient no rank computed"
                    else:
                        np.testing.assert_allclose(got[f"grad.{name}"], p.grad.numpy(), rtol=1e-5, atol=1e-6,
                                                   err_msg=name)
        opt.step()
    for name, p in model.named_parameters():
        for got in ranks:
            np.testing.assert_allclose(got[f"param.{name}"], p.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


@needs_mpi
def test_data_parallel_under_jit_equals_eager_and_still_overlaps(device, tmp_path):
    """Replayed steps deliver each parameter's gradient to DataParallel's hook as eager
    backward does: the same parameters bit for bit, all-reduces started during backward."""
    one_gpu_per_rank(device)
    done = run_worker("data_parallel_jit", device, tmp_path)
    assert done.returncode == 0, done.stderr
    ranks = results(tmp_path)
    for got in ranks:
        assert got["replays"] == 5
        for name in (k[len("eager."):] for k in got if k.startswith("eager.") and k != "eager.early"):
            np.testing.assert_array_equal(got[f"jit.{name}"], got[f"eager.{name}"], err_msg=name)
        np.testing.assert_array_equal(got["jit.early"], got["eager.early"])  # buckets started before the end
    assert (ranks[0]["jit.early"][1:] > 0).all()  # (rank 1's first bucket waits for rank0_only, which it never uses)


@needs_mpi
def test_collectives_inside_a_jitted_step_are_made_at_every_replay(device, tmp_path):
    """dist.broadcast / all_reduce called in the step itself (issue 22, item 1): replays make them
    again, so the ranks' weights stay equal and equal eager's bit for bit."""
    one_gpu_per_rank(device)
    done = run_worker("collectives_jit", device, tmp_path)
    assert done.returncode == 0, done.stderr
    ranks = results(tmp_path)
    for got in ranks:
        assert got["replays"] == 5
        for name in (k[len("eager."):] for k in got if k.startswith("eager.")):
            np.testing.assert_array_equal(got[f"jit.{name}"], got[f"eager.{name}"], err_msg=name)
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)  # the ranks agree


@needs_mpi
@pytest.mark.parametrize("case, message", [
    ("fails", "ValueError: rank 1 fails on purpose"),
    ("hangs", "did not complete within 2 s"),
])
def test_one_failing_rank_ends_the_job(case, message, tmp_path):
    started = time.monotonic()
    done = run_worker(case, "cpu", tmp_path, timeout=60, env={"TINYGRAD_TX_DIST_TIMEOUT": "2"})
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert message in done.stderr and "ending all 2 ranks" in done.stderr, done.stderr


# -- the trainer ---------------------------------------------------------------------------

TINY = ["--task", "reverse", "--batch-size", "8", "--d-model", "16", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "32", "--n-train", "17", "--eval-every", "100"]  # 17 pairs: batches of 8, 8 and 1


def train(ranks: int, *args: str) -> None:
    command = ["-m", "models", "train", *TINY, *args]
    if ranks == 1:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=REPO, env=env,
                              timeout=120)
    else:
        done = mpiexec(*command)
        assert done.stdout.count("training on") == 1 and "2 processes" in done.stdout  # rank 0 alone prints
    assert done.returncode == 0, done.stderr


def assert_same_weights(a: Path, b: Path) -> None:
    """Equal to float32 rounding, except the attention key biases: their true gradient is zero
    (softmax ignores a constant added to every score), so Adam turns rounding noise into
    full-size steps and they differ between any two summation orders."""
    a, b = tx.load(a / "last.npz"), tx.load(b / "last.npz")
    assert a.keys() == b.keys() and int(a["step"]) == int(b["step"])
    for name in a["weights"]:
        if not name.endswith("w_k.bias"):
            np.testing.assert_allclose(b["weights"][name], a["weights"][name], rtol=1e-4, atol=2e-6, err_msg=name)


@needs_mpi
def test_training_on_two_ranks_matches_one_process_and_resumes_with_either(tmp_path):
    """Three steps reach the short last batch (1 pair: one rank gets none). A run trained by
    2 ranks and resumed by 1, and one trained by 1 and resumed by 2, both end where a run
    trained and resumed by one process ends."""
    one, two, mixed = tmp_path / "one", tmp_path / "two", tmp_path / "mixed"
    train(1, "--steps", "3", "--out", str(one))
    shutil.copytree(one, mixed)
    train(2, "--steps", "3", "--out", str(two))
    assert_same_weights(one, two)

    train(1, "--resume", "--steps", "6", "--out", str(one))
    train(1, "--resume", "--steps", "6", "--out", str(two))
    train(2, "--resume", "--steps", "6", "--out", str(mixed))
    assert_same_weights(one, two)
    assert_same_weights(one, mixed)


@needs_mpi
def test_ctrl_c_on_mpiexec_stops_every_rank_at_one_step_and_saves(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    args = [MPIEXEC, "-n", str(RANKS), sys.executable, "-m", "models", "train", *TINY, "--steps", "100000",
            "--out", str(out)]
    process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():  # 10 steps done
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal does: mpiexec passes it on
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stdout.count("interrupted at step") == 1  # rank 0 alone says so
    step = int(tx.load(out / "last.npz")["step"])
    assert f"interrupted at step {step}:" in stdout and step >= 10


@needs_mpi
def test_a_user_error_on_two_ranks_exits_2(tmp_path):
    done = mpiexec("-m", "models", "train", "--task", "nonsense", "--out", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 2 and "error: unknown task" in done.stderr, done.stderr
    assert not (tmp_path / "x").exists()
