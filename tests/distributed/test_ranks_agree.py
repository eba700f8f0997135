"""Issue 22, item 10: the ranks of `mpiexec ... python -m models train` must agree on the corpus,
the settings and the vocabularies, or every rank stops with one line (rank 0's), exit status 2,
no MPI abort, and nothing written. Issue 32, item 11: they agree before the first collective
that depends on it (a rank told --resume alone read last.npz, and both hung ten minutes): the
jobs here get a 30 s collective deadline, and none may reach it. Each rank is given its own
arguments or working directory with mpiexec's `A : B` form."""
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from .test_distributed import MPIEXEC, REPO, needs_mpi

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
    assert_refused(two_ranks(["-m", "models", "train", "--out", str(tmp_path / "run"), "--resume"], task),
                   "--task --data is required", "rank 0", disagree=False)
    assert not (tmp_path / "run").exists()


@needs_mpi
def test_ranks_running_different_commands_all_stop_with_one_line(tmp_path):
    task = [*TRAIN, "--task", "copy", "--n-train", "60", "--n-held-out", "10", "--out", str(tmp_path / "run")]
    assert_refused(two_ranks(task, ["-m", "models", "tasks"]), "the command")
    assert not (tmp_path / "run").exists()
