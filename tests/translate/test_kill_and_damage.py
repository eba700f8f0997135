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
