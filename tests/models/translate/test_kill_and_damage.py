"""Faults, as a hostile user (or a power cut) would cause them: training killed with SIGKILL at
random moments and resumed must compute the same losses as a run never interrupted, and every
file of a run directory, damaged in turn, must give every command that reads it one line naming
the file and exit status 2 (and leave the commands that do not read it working).

A disk that fills up, or a file system remounted read-only, at any write of `train` (a real
tmpfs as root, else the stand-in of tests/faults.py at the same calls) costs one line naming
the file and the reason, exit status 1, and no file: the run resumes (or, before its first
checkpoint, starts again) and ends with the same losses and the same best.npz as a run that
never met the fault.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import tinygrad_tx as tx
from models.translate import cli

from ...faults import StandInDisk, fill, remount, tmpfs

REPO = Path(__file__).resolve().parents[3]
TINY = ["--d-model", "8", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1", "--d-ff", "8", "--batch-size", "8"]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def corpus(tmp_path: Path) -> Path:
    """A small word-level corpus (held-out splits of a few pairs: validation is quick)."""
    path = tmp_path / "pairs.tsv"
    words = ["red", "blue", "green", "cat", "dog", "big", "small", "sees", "likes", "the"]
    rng = np.random.default_rng(0)
    lines = {" ".join(rng.choice(words, 4)) for _ in range(200)}
    path.write_text("".join(f"{line}\t{' '.join(reversed(line.split()))}\n" for line in sorted(lines)))
    return path


def test_kill_9_at_random_moments_then_resume_gives_the_same_losses(tmp_path):
    data = corpus(tmp_path)
    settings = ["--data", str(data), *TINY, "--steps", "40", "--eval-every", "5", "--log-every", "1",
                "--dropout", "0.2"]
    cli.main(["train", "--out", str(tmp_path / "whole"), *settings])

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    rng = np.random.default_rng(1)
    # Moments tied to progress, not to the clock, so that every kill lands mid-run on a fast
    # machine or a slow one: after the k-th logged step (k random, increasing), then a random
    # fraction of a step more, which may fall into a checkpoint or log write.
    moments = sorted(rng.choice(np.arange(2, 25), size=3, replace=False))  # at least 15 steps before the end
    for moment in moments:
        process = start(out, settings, env)
        deadline = time.time() + 300
        while logged_steps(out) < moment and process.poll() is None:
            assert time.time() < deadline, "the run made no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.01))
        assert process.poll() is None, f"the run ended before step {moment}: {process.communicate()[1]}"
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    process = start(out, settings, env)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert losses(out) == losses(tmp_path / "whole") and len(losses(out)) == 40


def start(out: Path, settings: list[str], env: dict) -> subprocess.Popen:
    """`train`, resuming if a checkpoint exists (a kill before the first one starts over)."""
    resume = ["--resume"] if (out / "last.npz").exists() else []
    return subprocess.Popen([sys.executable, "-m", "models", "train", "--out", str(out), *settings, *resume],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def logged_steps(run_dir: Path) -> int:
    """How far the log goes (a resumed run first cuts it back to its checkpoint)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum('"loss"' in line for line in lines)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_training_saves_a_checkpoint_that_resumes(tmp_path, stop):
    """SIGTERM (a `kill`, a job scheduler) stops a run as Ctrl-C does: at a step, saved, exit 130."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "models", "train", "--task", "reverse", *TINY, "--steps", "100000",
                                "--out", str(out)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.time() + 120
    while logged_steps(out) < 1:
        assert time.time() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=120)
    step = int(tx.load(out / "last.npz")["step"])
    assert process.returncode == 130 and step >= 10, stderr
    assert f"interrupted at step {step}: saved {out / 'last.npz'}; continue with python -m models train --out {out} " \
           f"--resume" in stdout


def interrupted_after(line: str, command: list[str], env: dict, stop: int = signal.SIGINT) -> str:
    """Standard output of `command`, sent `stop` as soon as it prints a line starting with `line`.
    It starts with SIGINT ignored, as a shell starts a background job (`train ... &` in a script;
    pytest-xdist's workers pass the same on)."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    for said in process.stdout:
        if said.startswith(line):
            break
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    return stdout


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_the_decoding_is_chosen_or_reported_is_one_line_saying_what_is_kept(tmp_path, stop):
    """After training, the run tries beam widths and length penalties on its validation set
    (tuning.py), then reports on its test set: Ctrl-C there was a KeyboardInterrupt traceback (and,
    in a job started with SIGINT ignored, nothing at all; SIGTERM ended it without a word). It is
    one line saying what is kept and what to run: `--resume` to choose, or `evaluate`."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # untrained, long outputs: choosing takes ~7 s and the report ~1.4 s on an idle machine, time
    # enough for the signal to land inside each (with 100 sentences they were done before it, at times)
    settings = ["--task", "reverse", *TINY, "--steps", "2", "--n-held-out", "3000"]
    train = [sys.executable, "-m", "models", "train", "--out", str(out)]
    stdout = interrupted_after("trained to step 2 of 2", [*train, *settings], env, stop)
    assert stdout.splitlines()[-1] == (f"interrupted while choosing the decoding: the trained model is kept in {out}; "
                                       f"python -m models train --out {out} --resume chooses it (until then evaluate "
                                       f"and translate use beam 6)")
    assert "decoding" not in json.loads((out / "run.json").read_text())
    stdout = interrupted_after("decoding chosen on validation", [*train, "--resume"], env, stop)
    assert stdout.splitlines()[-1] == (f"interrupted during the test report: the run is complete; python -m models "
                                       f"evaluate --run {out}")
    assert "decoding" in json.loads((out / "run.json").read_text())


# -- damage each file in turn ------------------------------------------------------------------

READS = {  # which command reads which file (train = train --resume)
    "run.json": {"evaluate", "translate", "train"},
    "vocab.json": {"evaluate", "translate", "train"},
    "valid.tsv": {"train"},
    "test.tsv": {"evaluate", "train"},
    "best.npz": {"evaluate", "translate", "train"},  # train reports on it at the end (deleted: validates again)
    "last.npz": {"train"},
    "metrics.jsonl": set(),  # a damaged log is repaired on resume, never a reason to stop
}


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    else:  # bytes in the middle overwritten
        middle = len(data) // 2
        path.write_bytes(data[:middle] + b"\x00\xff garbage \xfe" + data[middle + 13:])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("faults")
    settings = ["--data", str(corpus(tmp)), *TINY, "--steps", "6", "--eval-every", "3"]
    cli.main(["train", "--out", str(tmp / "run"), *settings])
    return tmp / "run", settings


@pytest.mark.parametrize("how", ["deleted", "truncated", "overwritten"])
@pytest.mark.parametrize("name", sorted(READS))
def test_every_damaged_file_is_named_by_every_command_that_reads_it(capsys, tmp_path, finished_run, name, how):
    source, settings = finished_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    damage(run_dir / name, how)
    commands = {
        "evaluate": ["evaluate", "--run", str(run_dir)],
        "translate": ["translate", "--run", str(run_dir), "red cat"],
        "train": ["train", "--out", str(run_dir), *settings, "--resume", "--steps", "7"],
    }
    for command, args in commands.items():
        try:
            cli.main(args)
            code = 0
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error") or "Traceback" in line]
        if command in READS[name] and (command, name, how) != ("train", "best.npz", "deleted"):
            assert code == 2 and len(lines) == 1 and name in lines[0], (command, err)
        else:
            assert code == 0, (command, err)


# -- a full disk, a read-only file system ------------------------------------------------------

FAULT_SETTINGS = [*TINY, "--steps", "20", "--eval-every", "5", "--log-every", "1", "--average", "3"]


def train_in_process(capsys, out: Path, settings: list[str], resume: bool) -> tuple[int, str]:
    try:
        cli.main(["train", "--out", str(out), *settings, *(["--resume"] if resume else [])])
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def assert_one_os_error(code: int, err: str, reason: str, path: Path | None = None) -> None:
    lines = [line for line in err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert code == 1 and len(lines) == 1 and lines[0].endswith(f": {reason}"), err
    assert path is None or lines[0] == f"error: {path}: {reason}", err


def assert_whole_or_absent(run_dir: Path) -> None:
    """No temporary left, every checkpoint loads, every line of the log is whole."""
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")]
    for path in run_dir.glob("*.npz"):
        tx.load(path)
    for line in (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []:
        json.loads(line)


def assert_same_run(run_dir: Path, whole: Path) -> None:
    assert losses(run_dir) == losses(whole) and len(losses(run_dir)) == 20
    best, expected = tx.load(run_dir / "best.npz"), tx.load(whole / "best.npz")
    assert best["best"] == expected["best"] and best["step"] == expected["step"]
    for name, weight in expected["weights"].items():
        np.testing.assert_array_equal(best["weights"][name], weight)
    assert decoding(run_dir) == decoding(whole)


def decoding(run_dir: Path) -> dict:
    """What run.json says the run chose and why (without the times it took)."""
    chosen = json.loads((run_dir / "run.json").read_text())["decoding"]
    return {**chosen, "tried": [{k: v for k, v in tried.items() if k != "seconds"} for tried in chosen["tried"]]}


def target(path: Path) -> str:
    """The name of the file written through `path` (itself, or the temporary file written first)."""
    temporary = re.fullmatch(r"\.(.+)\.[0-9a-f]{8}\.tmp", path.name)
    return temporary[1] if temporary else path.name


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory) -> tuple[Path, list[str], list[Path]]:
    """A run that met no fault, and the files it opened for writing, in order (none failed)."""
    tmp = tmp_path_factory.mktemp("whole")
    settings = ["--data", str(corpus(tmp)), *FAULT_SETTINGS]
    with pytest.MonkeyPatch.context() as monkeypatch:
        disk = StandInDisk(monkeypatch)
        cli.main(["train", "--out", str(tmp / "run"), *settings])
    return tmp / "run", settings, disk.opened


def test_a_full_disk_at_any_write_of_train_costs_only_the_steps_since_the_last_checkpoint(capsys, tmp_path,
                                                                                         monkeypatch, whole_run):
    """A full disk left best.npz written and last.npz not (no --resume), with a
    raw OSError 28. The stand-in disk fills at a write chosen in turn: the first of each file
    and a few at random, among them the first checkpoints (where the defect was found)."""
    whole, settings, opened = whole_run
    names = [target(path) for path in opened]
    rng = np.random.default_rng(3)
    firsts = {names.index(name) for name in set(names)}
    for index in sorted(firsts | set(rng.choice(len(names), size=4, replace=False).tolist())):
        out = tmp_path / f"full_at_{index}"
        disk = StandInDisk(monkeypatch, full_from=index + 1, room=int(rng.integers(0, 2000)))
        code, err = train_in_process(capsys, out, settings, resume=False)
        assert_one_os_error(code, err, "No space left on device")
        assert target(disk.opened[index]) == names[index]  # the same write as in the whole run
        assert_whole_or_absent(out)
        monkeypatch.undo()
        kept = (out / "last.npz").exists() or (out / "best.npz").exists()  # a run that kept any checkpoint resumes
        code, err = train_in_process(capsys, out, settings, resume=kept)
        assert code == 0, (index, names[index], err)
        assert_same_run(out, whole)


def test_a_read_only_file_system_at_resume_is_one_line_and_changes_nothing(capsys, tmp_path, monkeypatch,
                                                                          whole_run):
    whole, settings, _ = whole_run
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    StandInDisk(monkeypatch, full_from=1, read_only=True)
    code, err = train_in_process(capsys, out, [*settings, "--steps", "25"], resume=True)
    assert_one_os_error(code, err, "Read-only file system", out / "metrics.jsonl")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@contextmanager
def stopped(process: subprocess.Popen) -> Iterator[None]:
    """SIGSTOP `process` for the block, then SIGCONT."""
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_real_disk_that_fills_or_turns_read_only_while_train_runs(tmp_path, whole_run, fault):
    """The same with real processes on a real tmpfs (root only): `train` is stopped at a random
    step, the disk filled (a random room left) or remounted read-only, and `train` let go on."""
    whole, settings, _ = whole_run
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    rng = np.random.default_rng(4 if fault == "full" else 5)
    with tmpfs(tmp_path / "disk", "8m") as disk:
        out = disk / "run"
        for moment in sorted(rng.choice(np.arange(1, 14), size=2, replace=False)):
            process = start(out, settings, env)
            while logged_steps(out) < moment and process.poll() is None:
                time.sleep(0.005)
            with stopped(process):
                assert process.poll() is None, process.communicate()[1]
                filler = fill(disk, leave=int(rng.integers(0, 40_000))) if fault == "full" else None  # < a checkpoint
            if fault == "read-only":
                remount_while(process, disk, "ro")
            _, err = process.communicate(timeout=300)
            assert_one_os_error(process.returncode, err,
                                "No space left on device" if fault == "full" else "Read-only file system")
            if filler is not None:
                filler.unlink()
            remount(disk, "rw")
            assert_whole_or_absent(out)
        process = start(out, settings, env)
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert_same_run(out, whole)


def remount_while(process: subprocess.Popen, directory: Path, options: str) -> None:
    """Remount `directory` while `process` is stopped between two writes (a file open for writing makes
    a read-only remount busy: then let it run a moment and try again)."""
    for _ in range(1000):
        with stopped(process):
            done = subprocess.run(["mount", "-o", f"remount,{options}", str(directory)], capture_output=True)
        if done.returncode == 0:
            return
        time.sleep(0.001)
    raise AssertionError(f"could not remount {directory} {options}")


@pytest.mark.parametrize("disk", ["tmpfs", "stand-in"])
def test_a_picture_on_a_full_disk_is_one_line_and_no_file(capsys, tmp_path, monkeypatch, whole_run, disk):
    """`translate --attention` on a full disk is one line and no file; it printed the translation,
    then left a 0-byte PNG and a traceback."""
    whole, _, _ = whole_run
    if disk == "tmpfs":
        with tmpfs(tmp_path / "disk", "1m") as directory:
            fill(directory)
            check_picture_on_full_disk(capsys, whole, directory / "a.png")
    else:
        StandInDisk(monkeypatch, full_from=1, room=0)
        check_picture_on_full_disk(capsys, whole, tmp_path / "a.png")


def check_picture_on_full_disk(capsys, run_dir: Path, picture: Path) -> None:
    try:
        cli.main(["translate", "--run", str(run_dir), "red cat", "--attention", str(picture)])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert out.strip(), "the translation is printed first"
    assert_one_os_error(code, err, "No space left on device", picture)
    assert not picture.exists() and not [p for p in picture.parent.iterdir() if p.name.endswith(".tmp")]


def test_out_through_a_symbolic_link_loop_is_one_line(capsys, tmp_path, whole_run):
    """`--out` through a symlink loop is one line; it was a FileExistsError traceback."""
    _, settings, _ = whole_run
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, err = train_in_process(capsys, tmp_path / "loop", settings, resume=False)
    lines = [line for line in err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert code == 2 and len(lines) == 1 and "symbolic link" in lines[0], err
    code, err = train_in_process(capsys, tmp_path / "loop" / "run", settings, resume=False)
    assert_one_os_error(code, err, "Too many levels of symbolic links", tmp_path / "loop" / "run")
