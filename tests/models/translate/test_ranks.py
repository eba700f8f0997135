"""Training on several ranks (`mpiexec -n 2 python -m models train`, models/translate/ranks.py):
two ranks train as one process does and resume with either, Ctrl-C stops every rank at one
step, and the ranks agree on everything or all stop with one line.

The ranks must agree on the corpus, the settings and the vocabularies, or
every rank stops with one line (rank 0's), exit status 2, no MPI abort, and nothing written.
They agree before the first collective that depends on it (a rank told
--resume alone read last.npz, and both hung ten minutes): the jobs here get a 30 s collective
deadline, and none may reach it. Each rank is given its own arguments or working directory
with mpiexec's `A : B` form."""
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import tinygrad_tx as tx

from ...distributed.helpers import MPIEXEC, RANKS, REPO, mpiexec, needs_mpi


# -- two ranks train as one process does -------------------------------------------------------

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


# -- the ranks agree, or all stop with one line ---------------------------------------------------

TRAIN = ["-m", "models", "train", "--steps", "4", "--eval-every", "2", "--d-model", "8", "--num-heads", "2",
         "--num-encoder-layers", "1", "--num-decoder-layers", "1", "--d-ff", "8", "--batch-size", "8"]


def two_ranks(first: list[str], second: list[str], wdirs: tuple[Path, Path] = (REPO, REPO)):
    """Rank 0 runs `python FIRST` in wdirs[0], rank 1 `python SECOND` in wdirs[1]."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "TINYGRAD_TX_DIST_TIMEOUT": "30"}
    command = [MPIEXEC, "-n", "1", "-wdir", str(wdirs[0]), sys.executable, *first,
               ":", "-n", "1", "-wdir", str(wdirs[1]), sys.executable, *second]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def assert_refused(done: subprocess.CompletedProcess, *words: str, disagree: bool = True) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert ("do not agree on" in lines[0]) == disagree and "Abort" not in done.stdout + done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@needs_mpi
def test_ranks_given_another_setting_all_stop_with_one_line(tmp_path):
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    done = two_ranks([*task, "--lr", "0.001"], [*task, "--lr", "0.002"])
    assert_refused(done, "--lr")
    assert not (tmp_path / "run").exists()


@needs_mpi
def test_ranks_reading_another_corpus_all_stop_with_one_line(tmp_path):
    """The same file name holds the pairs in another order on rank 1's host (its working directory):
    rank 0's test pairs would be in rank 1's training pairs."""
    pairs = [f"w{i} x{i % 7} y\tv{i} z{i % 5}\n" for i in range(120)]
    hosts = tmp_path / "host0", tmp_path / "host1"
    for host in hosts:
        host.mkdir()
        (host / "pairs.tsv").write_text("".join(pairs))
        random.Random(1).shuffle(pairs)
    corpus = [*TRAIN, "--data", "pairs.tsv", "--out", str(tmp_path / "run")]
    assert_refused(two_ranks(corpus, corpus, hosts), "the corpus", "vocabulary")
    assert not (tmp_path / "run").exists()
    same = two_ranks(corpus, corpus, (hosts[0], hosts[0]))
    assert same.returncode == 0 and "held-out test" in same.stdout, same.stderr


@needs_mpi
def test_ranks_resuming_from_different_checkpoints_all_stop_with_one_line(tmp_path):
    """A run directory copied to each host instead of shared: rank 1's copy is a stale one."""
    hosts = tmp_path / "host0", tmp_path / "host1"
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", "run"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    hosts[0].mkdir()
    subprocess.run([sys.executable, *task], cwd=hosts[0], env=env, check=True, capture_output=True, timeout=120)
    shutil.copytree(hosts[0], hosts[1])
    subprocess.run([sys.executable, *task, "--resume", "--steps", "6"], cwd=hosts[0], env=env, check=True,
                   capture_output=True, timeout=120)
    resume = [*task, "--resume", "--steps", "8"]
    assert_refused(two_ranks(resume, resume, hosts), "the checkpoint last.npz")


@needs_mpi
def test_an_error_every_rank_meets_is_printed_once_without_an_mpi_abort(tmp_path):
    """The README's order: the set-up already trained into the run directory, so `mpiexec -n 2
    ... train` into it again is refused; so are a missing corpus and a bad argument. Each rank
    meets the error alike: one line, by one rank, exit 2, and no MPI abort banner."""
    run = tmp_path / "run"
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10"]
    first = subprocess.run([sys.executable, *task, "--out", str(run)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, timeout=120)
    assert first.returncode == 0, first.stderr
    for args, words in (([*task, "--out", str(run)], "already holds a run"),
                        ([*TRAIN, "--data", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "b")], "not found"),
                        ([*task, "--steps", "-4", "--out", str(tmp_path / "c")], "--steps")):
        done = two_ranks(args, args)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr
        assert "Abort" not in done.stdout + done.stderr


@needs_mpi
def test_ranks_given_different_resume_all_stop_with_one_line_before_reading_anything(tmp_path):
    """--resume decides whether a rank reads last.npz (a collective of its own): compared first,
    in either order, and nothing is written to the run."""
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run([sys.executable, *task], env=env, check=True, capture_output=True, timeout=120)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "run").iterdir())
    for first, second in ((["--resume"], []), ([], ["--resume"])):
        assert_refused(two_ranks([*task, "--steps", "6", *first], [*task, "--steps", "6", *second]), "--resume")
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "run").iterdir()) == before


@needs_mpi
def test_ranks_on_different_devices_all_stop_with_one_line(tmp_path):
    """The device decides how a rank joins the job (its GPU, NCCL): compared with the command."""
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    assert_refused(two_ranks([*task, "--device", "cuda"], task), "--device")
    assert not (tmp_path / "run").exists()


@needs_mpi
def test_a_command_line_refused_on_one_rank_stops_every_rank_with_its_reason(tmp_path):
    """argparse ends a rank before it joins the job; the others used to wait in MPI_Init for ever."""
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    assert_refused(two_ranks(task, [*task, "--steps", "abc"]), "--steps", "'abc'", "rank 1", disagree=False)
    assert_refused(two_ranks([*task, "--no-such-flag"], task), "--no-such-flag", "rank 0", disagree=False)
    # `--resume` needs only --out now: refused on the rank that resumes a run that is not there
    assert_refused(two_ranks(["-m", "models", "train", "--out", str(tmp_path / "run"), "--resume"], task),
                   "run.json is missing", disagree=False)
    assert not (tmp_path / "run").exists()


@needs_mpi
def test_ranks_running_different_commands_all_stop_with_one_line(tmp_path):
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    assert_refused(two_ranks(task, ["-m", "models", "tasks"]), "the command")
    assert not (tmp_path / "run").exists()
