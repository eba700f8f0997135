"""`train --members N`: N models side by side, one process each, and their ensemble decodes.

Each model trains alone on whole batches (no gradient is averaged between the processes):
without dropout the first model ends exactly where a one-model run ends; the others start from
other weights; an interrupted ensemble resumes to where an uninterrupted one ends; a run opens
as the ensemble of its models, or (--model N) as one of them. That the ensemble decodes with the
mean of its models' probabilities: tests/models/test_ensemble.py."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
from models.ensemble import Ensemble
from models.translate import cli, launch
from models.translate.budget import FINAL_SHARE, Budget
from models.translate.corpus import read_corpus
from models.translate.run import RunError, open_run
from models.translate.settings import settings_for

from ...distributed.helpers import MPIEXEC, REPO, mpiexec, needs_mpi
from .test_cli import run_cli
from .test_corpus_cli import write_anki
from .test_ranks import TINY, assert_same_weights, train


def weights(path):
    return tx.load(path)["weights"]


@needs_mpi
def test_an_ensemble_trains_its_models_apart_and_opens_as_one_or_each(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    train(1, "--steps", "6", "--dropout", "0", "--out", str(one))
    train(2, "--steps", "6", "--dropout", "0", "--members", "2", "--out", str(two))
    assert_same_weights(one, two)  # the first model: whole batches, its own gradients only
    first, second = weights(two / "last.npz"), weights(two / "members" / "2" / "last.npz")
    assert first.keys() == second.keys()
    assert all(not np.allclose(first[k], second[k]) for k in first if k.endswith("weight"))

    run = open_run(two)
    assert len(run.models) == 2 and isinstance(run.model, Ensemble)
    np.testing.assert_array_equal(run.models[1].state_dict()["out.weight"],
                                  weights(two / "members" / "2" / "best.npz")["out.weight"])
    metrics = [json.loads(line) for line in (two / "members" / "2" / "metrics.jsonl").read_text().splitlines()]
    assert any("valid_exact_match" in r for r in metrics)  # the second model validated itself

    alone = open_run(two, model=2)  # evaluate --model 2, translate --model 2
    assert len(alone.models) == 1 and alone.model is alone.models[0]
    np.testing.assert_array_equal(alone.model.state_dict()["out.weight"], run.models[1].state_dict()["out.weight"])
    done = run_cli("evaluate", "--run", str(two), "--model", "3")
    assert done.returncode == 2 and done.stderr.strip() == f"error: --model 3: {two} holds 2 models, numbered 1 to 2"


@needs_mpi
def test_an_interrupted_ensemble_resumes_each_model_to_where_an_uninterrupted_one_ends(tmp_path):
    """Ctrl-C mid-run (both processes stop at one step and save), then `train --resume`, which
    starts the two processes itself: both models end with the very weights of a run never stopped.
    `translate --attention` draws the first model's attention, and says so."""
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    extra = ["--steps", "600", "--members", "2"]
    train(2, *extra, "--out", str(straight))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "models", "train", *TINY, *extra, "--out",
                                str(stopped)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 60
    while not (stopped / "metrics.jsonl").exists() or not (stopped / "metrics.jsonl").read_text():  # 10 steps done
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    assert process.communicate(timeout=60) and process.returncode == 130
    step = int(tx.load(stopped / "last.npz")["step"])
    assert 10 <= step < 600 and int(tx.load(stopped / "members" / "2" / "last.npz")["step"]) == step
    done = run_cli("train", "--out", str(stopped), "--resume")
    assert done.returncode == 0, done.stderr
    assert "2 processes, a model each" in done.stdout
    for member in (Path(), Path("members") / "2"):
        a, b = weights(straight / member / "last.npz"), weights(stopped / member / "last.npz")
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{member}: {name}")

    done = run_cli("translate", "--run", str(straight), "abcdef", "--attention", str(tmp_path / "attention.png"))
    assert done.returncode == 0, done.stderr
    assert "(the first of the ensemble's 2 models; --model N for another)" in done.stderr or "matplotlib" in done.stderr


@needs_mpi
def test_members_other_than_the_processes_of_the_job_stop_with_one_line(tmp_path):
    done = mpiexec("-m", "models", "train", *TINY, "--members", "3", "--out", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("error:") == 1
    assert "--members 3 trains each model on a process of its own, but this job has 2" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_run_missing_a_model_of_its_ensemble_is_one_clear_error(tmp_path):
    out = tmp_path / "run"
    done = cli_train(out)
    run = json.loads((out / "run.json").read_text())
    run["settings"]["members"] = 2
    (out / "run.json").write_text(json.dumps(run))
    with pytest.raises(RunError, match=r"members/2/best.npz does not exist"):
        open_run(out)
    run["settings"]["members"] = 0
    (out / "run.json").write_text(json.dumps(run))
    with pytest.raises(RunError, match="settings.members must be a whole number from 1 to 64, not 0"):
        open_run(out)
    assert done.returncode == 0


def cli_train(out):
    return run_cli("train", *TINY, "--steps", "2", "--out", str(out))


def test_idle_cores_train_an_ensemble_of_a_wide_corpus_model(monkeypatch, tmp_path, capsys):
    settings = settings_for({"data": str(write_anki(tmp_path / "fra.txt", n_sources=40)), "d_model": 128})
    monkeypatch.setattr(launch, "idle_cores", lambda: 8)
    assert launch.auto_members(True, 128) == launch.MAX_MEMBERS
    assert launch.auto_members(True, 64) == 1  # a small corpus's model: not measured to pay
    assert launch.auto_members(False, 128) == 1  # a task
    monkeypatch.setattr(cli, "can_launch", lambda: None)
    assert cli.choose_processes(settings) == (4, 4)  # ten minutes: hundreds of epochs of a few dozen pairs
    assert "4 cores are idle: training 4 models side by side" in capsys.readouterr().out
    settings.device = "cuda"
    assert cli.choose_processes(settings) == (1, 1)  # idle CPU cores say nothing of a GPU
    settings.device = "cpu"
    monkeypatch.setattr(cli, "can_launch", lambda: "mpi4py is not installed")
    assert cli.choose_processes(settings) == (1, 1)
    assert "but mpi4py is not installed, so training uses one" in capsys.readouterr().out


def test_the_epochs_a_model_of_an_ensemble_would_make():
    """By hand: the 18k-pair Tatoeba list in ten minutes, at most 11,300 steps of 96 but 5 steps a
    second for 540 s = 2,700: 2,700 · 96 / 18,066 = 14.3 epochs; a 76k-pair list 3.4; without a
    budget, the steps themselves."""
    assert launch.epochs_a_model(11_300, 96, 18_066, 600.0) == pytest.approx(14.35, abs=0.01)
    assert launch.epochs_a_model(47_500, 96, 76_038, 600.0) == pytest.approx(3.41, abs=0.01)
    assert launch.epochs_a_model(47_500, 96, 76_038, None) == pytest.approx(59.97, abs=0.01)
    assert launch.epochs_a_model(1_000, 96, 18_066, 3600.0) == pytest.approx(5.31, abs=0.01)  # --steps is the bound


def test_a_corpus_each_model_would_see_few_times_trains_one_model_on_the_idle_cores(monkeypatch, tmp_path, capsys):
    """Where a model of an ensemble would make fewer than ENSEMBLE_EPOCHS epochs, the idle cores
    train one model together instead: on the 38k- and 76k-pair lists that scored higher."""
    data = write_anki(tmp_path / "fra.txt", n_sources=40)
    pairs = len(read_corpus(str(data), 1, 2).pairs)
    steps = -(-launch.ENSEMBLE_EPOCHS * pairs // 96) - 1  # each model would make just under ENSEMBLE_EPOCHS epochs
    monkeypatch.setattr(launch, "idle_cores", lambda: 8)
    monkeypatch.setattr(cli, "can_launch", lambda: None)
    few = settings_for({"data": str(data), "d_model": 128, "steps": steps})
    assert cli.choose_processes(few) == (1, 3)  # at least 32 pairs of each batch of 96 a process
    said = capsys.readouterr().out
    assert "training one model on 3 processes, data-parallel" in said and "(--members 3 for an ensemble)" in said
    enough = settings_for({"data": str(data), "d_model": 128, "steps": steps + 1})
    assert cli.choose_processes(enough) == (4, 4)
    narrow = settings_for({"data": str(data), "d_model": 64, "steps": steps})
    assert cli.choose_processes(narrow) == (1, 1)  # too narrow to gain from more processes (auto_processes)


def test_members_need_a_process_each(monkeypatch, tmp_path):
    settings = settings_for({"data": str(write_anki(tmp_path / "fra.txt", n_sources=40)), "members": 2})
    monkeypatch.setattr(cli, "can_launch", lambda: None)
    assert cli.train_processes(None, settings) == 2
    assert cli.train_processes(2, settings) == 2
    with pytest.raises(ValueError, match="--processes 3 with --members 2: each model of an ensemble trains on one "
                                         "process of its own"):
        cli.train_processes(3, settings)
    monkeypatch.setattr(cli, "can_launch", lambda: "no mpiexec was found")
    with pytest.raises(ValueError, match=r"--members 2: no mpiexec was found: pip install"):
        cli.train_processes(None, settings)


def test_one_model_on_a_gpu_stays_on_one_process_however_many_cores_are_idle(monkeypatch, tmp_path):
    """`train --data F --device cuda --members 1` on a one-GPU machine with 16 idle cores started 3
    data-parallel ranks on the one GPU (seen on an H200): the idle cores choose processes on the CPU only."""
    settings = settings_for({"data": str(write_anki(tmp_path / "fra.txt", n_sources=40)), "d_model": 128})
    monkeypatch.setattr(launch, "idle_cores", lambda: 16)
    monkeypatch.setattr(cli, "can_launch", lambda: None)
    assert cli.train_processes(None, settings) == 3  # the CPU: at least 32 pairs of each batch of 96 a process
    settings.device = "cuda"
    assert cli.train_processes(None, settings) == 1
    assert cli.train_processes(2, settings) == 2  # asked for: a rank on each of two GPUs


def test_an_ensemble_keeps_more_of_the_budget_for_its_decoding_unless_its_ranks_share_it():
    """Its decoding is chosen and reported with every model: each a rank decodes beyond the first
    adds half a share, and the ranks of a job share the sentences (sharing.py)."""
    assert Budget(600, 0.0).training_ends == pytest.approx(600 * (1 - FINAL_SHARE))
    assert Budget(600, 0.0, models=2).training_ends == pytest.approx(600 * (1 - 1.5 * FINAL_SHARE))
    assert Budget(600, 0.0, models=3).training_ends == pytest.approx(600 * (1 - 2 * FINAL_SHARE))
    assert Budget(600, 0.0, models=2, processes=2).training_ends == pytest.approx(600 * (1 - FINAL_SHARE))
    assert Budget(600, 0.0, models=3, processes=2).training_ends == pytest.approx(600 * (1 - 1.25 * FINAL_SHARE))
    assert Budget(600, 0.0, models=1, processes=2).training_ends == pytest.approx(600 * (1 - FINAL_SHARE))

