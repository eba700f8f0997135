"""`train --data` on every idle core: counting idle cores, how many processes to start, and the
run that starts them itself under mpiexec and owns: a signal to it reaches every rank, and none
outlives it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tinygrad_tx as tx
from models.translate import cli, launch
from models.translate.run import claim
from models.translate.settings import settings_for

from ...distributed.helpers import REPO, needs_mpi
from .test_cli import run_cli
from .test_corpus_cli import write_anki
from .test_ranks import TINY

# user nice system idle iowait irq softirq steal (guest columns ignored)
STAT = "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 {} 0 {} {} {} 0 0 {} 0 0\ncpu1 {} 0 0 {} 0 0 0 0 0 0\nintr 5 5\n"


def test_idle_cores_counts_the_allowed_cores_idle_three_quarters_of_the_time():
    """cpu0: 100 ticks, 80 idle or iowait (idle); cpu1: 100 ticks, 70 idle (busy); cpu0 again with
    20 of its 100 ticks stolen by the hypervisor, so 60 idle (busy)."""
    before = launch.core_ticks(STAT.format(0, 0, 0, 0, 0, 0, 0))
    assert before == {"cpu0": (0, 0), "cpu1": (0, 0)}
    after = launch.core_ticks(STAT.format(10, 10, 50, 30, 0, 30, 70))
    assert after == {"cpu0": (80, 100), "cpu1": (70, 100)}
    assert launch.count_idle(before, after, {"cpu0", "cpu1"}) == 1
    assert launch.count_idle(before, after, {"cpu1"}) == 0  # cpu0 is not this process's to use
    stolen = launch.core_ticks(STAT.format(10, 10, 30, 30, 20, 30, 70))
    assert launch.count_idle(before, stolen, {"cpu0", "cpu1"}) == 0
    assert 1 <= launch.idle_cores(0.05) <= len(__import__("os").sched_getaffinity(0))


def test_only_a_corpus_model_wide_enough_runs_on_every_idle_core(monkeypatch):
    monkeypatch.setattr(launch, "idle_cores", lambda: 8)
    assert launch.auto_processes(True, 128, 96) == 3  # at least 32 pairs of each batch a process
    assert launch.auto_processes(True, 128, 256) == 8
    assert launch.auto_processes(True, 64, 96) == 1  # a small corpus's model: per-op costs, no gain
    assert launch.auto_processes(False, 128, 96) == 1  # a task
    monkeypatch.setattr(launch, "idle_cores", lambda: 1)
    assert launch.auto_processes(True, 128, 96) == 1  # a busy machine


def test_processes_asked_for_without_mpi_is_one_clear_error(monkeypatch, tmp_path):
    settings = settings_for({"data": str(write_anki(tmp_path / "fra.txt", n_sources=40))})
    monkeypatch.setattr(cli, "can_launch", lambda: "mpi4py is not installed")
    with pytest.raises(ValueError, match=r"--processes 2: mpi4py is not installed: pip install"):
        cli.train_processes(2, settings)
    assert cli.train_processes(1, settings) == 1
    monkeypatch.setattr(cli, "auto_processes", lambda *args: 2)
    assert cli.train_processes(None, settings) == 1  # idle cores, but no mpi: one process, and a note


def test_open_mpi_run_as_root_is_a_reason_not_to_launch(monkeypatch, tmp_path):
    """Open MPI's mpiexec, run as root, refuses to start anything unless two variables allow it: a
    `train --data` that chose to start processes then failed with Open MPI's page of warning
    (seen on a GPU machine). mpich's mpiexec runs as root, and so does Open MPI's when allowed."""
    pytest.importorskip("mpi4py")
    fake = tmp_path / "mpiexec"
    monkeypatch.setattr(launch, "mpiexec", lambda: str(fake))
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0, raising=False)
    for name in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        monkeypatch.delenv(name, raising=False)
    fake.write_text("#!/bin/sh\necho 'mpiexec (OpenRTE) 4.1.6'\necho 'Report bugs to https://www.open-mpi.org'\n")
    fake.chmod(0o755)
    assert launch.can_launch() == ("Open MPI's mpiexec refuses to run as root (unless OMPI_ALLOW_RUN_AS_ROOT=1 "
                                   "and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set)")
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
    assert launch.can_launch() is not None  # one of the two is not enough
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    assert launch.can_launch() is None
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT")
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000, raising=False)
    assert launch.can_launch() is None  # not root
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0, raising=False)
    fake.write_text("#!/bin/sh\necho 'HYDRA build details:'\necho '    Version: 4.3.0'\n")  # mpich's
    assert launch.can_launch() is None
    settings = settings_for({"data": str(write_anki(tmp_path / "fra.txt", n_sources=40))})
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.3'\n")
    with pytest.raises(ValueError, match=r"--processes 2: Open MPI's mpiexec refuses to run as root .*: pip install"):
        cli.train_processes(2, settings)


@needs_mpi
def test_train_starts_its_own_processes(tmp_path):
    """`train --processes 2`, started without mpiexec, trains on 2 processes it started itself, which
    time themselves and choose their steps together."""
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    out = tmp_path / "run"
    done = run_cli("train", "--data", str(data), "--out", str(out), "--processes", "2", "--time", "90s",
                   "--eval-every", "10", "--d-model", "16", "--num-heads", "2", "--num-encoder-layers", "1",
                   "--num-decoder-layers", "1", "--d-ff", "32", "--batch-size", "16", "--vocab-size", "100")
    assert done.returncode == 0, done.stderr
    assert "1 BLAS thread each, 2 processes" in done.stdout and "held-out test" in done.stdout
    planned = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "planned_steps" in r]
    assert planned and f"of {planned[-1]['planned_steps']} in" in done.stdout  # chosen, perhaps again


# -- the process a user started owns its ranks --------------------------------------------------

def processes_of(out: Path) -> list[int]:
    """The processes (mpiexec, its ranks) whose command line names the run directory `out`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(out) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return found


@needs_mpi
@pytest.mark.parametrize("stop, how", [(signal.SIGINT, "--members"), (signal.SIGTERM, "--processes"),
                                       (signal.SIGKILL, "--members")])
def test_a_signal_to_train_stops_the_ranks_it_started(tmp_path, stop, how):
    """`train --members 2` (or `--processes 2`) started as a user would, in the background, then
    SIGINT or SIGTERM to that one process: every rank stops at one step, saved, and it exits 130,
    saying how to resume; SIGKILL to it: the ranks still stop, saved, within seconds. Before,
    SIGINT did nothing and after SIGTERM the ranks trained on, holding the run directory."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    with open(tmp_path / "log", "w") as log:
        user = subprocess.Popen([sys.executable, "-m", "models", "train", *TINY, how, "2", "--steps", "100000",
                                 "--out", str(out)], cwd=REPO, env=env, stdout=log, stderr=log,
                                start_new_session=True)  # as `&` leaves it: not in the terminal's foreground
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text():  # 10 steps done
            assert time.monotonic() < deadline and user.poll() is None, (tmp_path / "log").read_text()
            time.sleep(0.1)
        assert len(processes_of(out)) >= 3  # this one, mpiexec, its ranks
        user.send_signal(stop)
        code = user.wait(timeout=60)
        while processes_of(out):  # no rank outlives it by more than the step it saves
            assert time.monotonic() < deadline + 60, f"still running: {processes_of(out)}"
            time.sleep(0.1)
    finally:  # a failure leaves nothing running
        for pid in processes_of(out):
            os.kill(pid, signal.SIGKILL)
    said = (tmp_path / "log").read_text()
    assert code == (-signal.SIGKILL if stop == signal.SIGKILL else 130), said
    assert "Traceback" not in said
    step = int(tx.load(out / "last.npz")["step"])
    assert f"interrupted at step {step}: saved {out / 'last.npz'}" in said and step >= 10
    if how == "--members":
        assert int(tx.load(out / "members" / "2" / "last.npz")["step"]) == step
    claim(out).close()  # nothing holds the run directory: --resume may take it


# -- the number of processes is bounded before any is started --------------------------------------

@pytest.mark.parametrize("members", [1000, "cores + 1"])
def test_a_run_asking_for_more_processes_than_cores_starts_none(tmp_path, members):
    """Real processes: a run's run.json said `members: 1000`, and `train --out D --resume` ran
    `mpiexec -n 1000` before checking anything, loading a 2-core machine to ~300. Now the settings
    read back are checked as the flags are (1000 is out of range) and the processes are bounded by
    the cores this process may use (cores + 1 is in range, but more than the machine has): one
    line, exit status 2, no mpiexec started, the run directory untouched."""
    cores = len(os.sched_getaffinity(0))
    wanted = 1000 if members == 1000 else cores + 1
    if members != 1000 and wanted > 64:
        pytest.skip("more than 64 cores: cores + 1 is refused by the range alone")
    out = tmp_path / "run"
    done = run_cli("train", "--out", str(out), *TINY, "--steps", "2")
    assert done.returncode == 0, done.stderr
    run_json = json.loads((out / "run.json").read_text())
    run_json["settings"]["members"] = wanted
    (out / "run.json").write_text(json.dumps(run_json))
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    fake = tmp_path / "bin"  # an mpiexec first on PATH that leaves a mark if it is ever started
    fake.mkdir()
    (fake / "mpiexec").write_text(f"#!/bin/sh\ntouch {tmp_path / 'started'}\n")
    (fake / "mpiexec").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    resumed = subprocess.run([sys.executable, "-m", "models", "train", "--out", str(out), "--resume"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert resumed.returncode == 2 and len(resumed.stderr.strip().splitlines()) == 1, resumed.stderr
    assert "members" in resumed.stderr and str(wanted) in resumed.stderr and "Traceback" not in resumed.stderr
    assert not (tmp_path / "started").exists()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
