"""Faults, as a hostile user (or a power cut) would cause them: training killed with SIGKILL at
random moments and resumed must compute the same losses as a run never interrupted, and every
file of a run directory, damaged in turn, must give every command that reads it one line naming
the file and exit status 2 (and leave the commands that do not read it working).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx

from models.translate import cli

REPO = Path(__file__).resolve().parents[2]
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


def interrupted_after(line: str, command: list[str], env: dict) -> str:
    """Standard output of `command`, sent SIGINT as soon as it prints a line starting with `line`."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for said in process.stdout:
        if said.startswith(line):
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    return stdout


def test_ctrl_c_while_the_decoding_is_chosen_or_reported_is_one_line_saying_what_is_kept(tmp_path):
    """After training, the run tries beam widths and length penalties on its validation set
    (tuning.py), then reports on its test set: Ctrl-C there was a KeyboardInterrupt traceback. It is
    one line saying what is kept and what to run: `--resume` to choose, or `evaluate`."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    settings = ["--task", "reverse", *TINY, "--steps", "2", "--n-held-out", "100"]  # untrained: long outputs, slow
    train = [sys.executable, "-m", "models", "train", "--out", str(out)]
    stdout = interrupted_after("trained to step 2 of 2", [*train, *settings], env)
    assert stdout.splitlines()[-1] == (f"interrupted while choosing the decoding: the trained model is kept in {out}; "
                                       f"python -m models train --out {out} --resume chooses it (until then evaluate "
                                       f"and translate use beam 6)")
    assert "decoding" not in json.loads((out / "run.json").read_text())
    stdout = interrupted_after("decoding chosen on validation", [*train, "--resume"], env)
    assert stdout.splitlines()[-1] == (f"interrupted during the test report: the run is complete; python -m models "
                                       f"evaluate --run {out}")
    assert "decoding" in json.loads((out / "run.json").read_text())


# -- damage each file in turn ------------------------------------------------------------------

READS = {  # which command reads which file (train = train --resume)
    "run.json": {"evaluate", "translate", "train"},
    "vocab.json": {"evaluate", "translate", "train"},
    "valid.tsv": {"train"},
    "test.tsv": {"evaluate", "train"},
    "best.npz": {"evaluate", "translate", "train"},  # train reports on it at the end
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
        if command in READS[name]:
            assert code == 2 and len(lines) == 1 and name in lines[0], (command, err)
        else:
            assert code == 0, (command, err)
