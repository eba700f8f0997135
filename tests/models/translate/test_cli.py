"""The translation command line, end to end, on tiny models that train in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
from models.translate.cli import parser as cli_parser
from models.translate.run import open_run
from models.translate.settings import TrainSettings, settings_for
from models.translate.training import Trainer

TINY = ["--steps", "40", "--eval-every", "20", "--d-model", "16", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "32", "--n-train", "300", "--batch-size", "16"]
REPO = Path(__file__).resolve().parents[3]


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "models", *args], capture_output=True, text=True,
                          input=stdin, env=env, cwd=REPO, timeout=300)


class Quiet:
    """A progress bar that shows nothing (Trainer.train takes tqdm's interface)."""

    def update(self, n): pass
    def set_postfix(self, **kw): pass
    def write(self, text): pass
    def refresh(self): pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "copy"
    # seed 2: this tiny model then says something for "abc", so --attention has a picture to draw
    result = run_cli("train", "--task", "copy", "--out", str(out), *TINY, "--seed", "2")
    assert result.returncode == 0, result.stderr
    assert "held-out test" in result.stdout
    return out


def test_train_leaves_a_complete_run_directory(trained):
    for name in ("run.json", "vocab.json", "valid.tsv", "test.tsv", "last.npz", "best.npz",
                 "metrics.jsonl", "curves.png"):
        assert (trained / name).exists(), name
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == list(range(10, 41, 10))
    assert [r["step"] for r in records if "valid_exact_match" in r] == [20, 40]
    assert all(np.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in records if "loss" in r)


def test_held_out_pairs_never_appear_in_training(trained):
    settings = json.loads((trained / "run.json").read_text())["settings"]
    trainer = Trainer(TrainSettings(**{k: v for k, v in settings.items()}))
    train_sources = {s for s, _ in trainer.data.train_pairs}
    held_out = (trained / "test.tsv").read_text().splitlines() + (trained / "valid.tsv").read_text().splitlines()
    assert held_out and not train_sources & {line.split("\t")[0] for line in held_out}


def test_evaluate_json_matches_a_recomputation(trained):
    result = run_cli("evaluate", "--run", str(trained), "--json")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout)
    assert set(metrics) == {"exact_match", "token_accuracy", "bleu", "chrf", "n", "references", "bleu_defined"}
    run = open_run(trained)
    sources = run.held_out("test")
    from models.translate.evaluation import translate

    beam, penalty = run.decoding()  # chosen on the validation set by train
    outputs = translate(run.model, [s for s, _ in sources], run.src_vocab, run.tgt_vocab, run.tokenizers, beam,
                        length_penalty=penalty)
    exact = 100 * np.mean([o in refs for o, (_, refs) in zip(outputs, sources)])
    assert metrics["n"] == len(sources) and metrics["exact_match"] == pytest.approx(exact)


def test_translate_arguments_stdin_and_attention_picture(trained, tmp_path):
    picture = tmp_path / "attention.png"
    by_argument = run_cli("translate", "--run", str(trained), "abc", "hello", "--attention", str(picture))
    assert by_argument.returncode == 0, by_argument.stderr
    assert len(by_argument.stdout.splitlines()) == 2
    assert picture.exists() and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    by_stdin = run_cli("translate", "--run", str(trained), stdin="abc\nhello\n")
    assert by_stdin.stdout == by_argument.stdout


def test_tasks_lists_every_task_with_an_example():
    result = run_cli("tasks")
    assert result.returncode == 0
    for name in ("copy", "reverse", "sort", "numbers", "dates", "grammar"):
        assert name in result.stdout


@pytest.mark.parametrize("args, message", [
    (["train", "--task", "klingon"], "known tasks"),
    (["evaluate", "--run", "no/such/run"], "does not exist"),
    (["translate", "--run", "no/such/run", "x"], "does not exist"),
])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_cuda_without_cupy_says_how_to_install():
    try:
        import cupy  # noqa: F401
    except ImportError:
        result = run_cli("evaluate", "--run", "x", "--device", "cuda")
        assert result.returncode == 2 and 'pip install -e ".[cuda]"' in result.stderr
    else:
        pytest.skip("CuPy is installed here, so the missing-CuPy message cannot be shown")


def test_tsv_errors_name_the_line(tmp_path):
    bad = tmp_path / "pairs.tsv"
    bad.write_text("one\tun\ntwo deux\n")
    result = run_cli("train", "--data", str(bad), "--out", str(tmp_path / "run"), *TINY)
    assert result.returncode == 2 and "line 2" in result.stderr
    bad.write_bytes(b"one\tun\n\xff\xfe\tx\n")
    result = run_cli("train", "--data", str(bad), "--out", str(tmp_path / "run"), *TINY)
    assert result.returncode == 2 and "line 2" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_sentence_longer_than_the_model_is_refused(trained):
    result = run_cli("translate", "--run", str(trained), "a" * 500)
    assert result.returncode == 2 and "longer than the model's maximum" in result.stderr


def test_a_truncated_checkpoint_is_reported_and_left_alone(trained, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trained, copy)
    damaged = (copy / "best.npz").read_bytes()[:200]
    (copy / "best.npz").write_bytes(damaged)
    result = run_cli("evaluate", "--run", str(copy))
    assert result.returncode == 2 and "best.npz" in result.stderr
    assert (copy / "best.npz").read_bytes() == damaged  # nothing was overwritten


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(tmp_path, device):
    """On every device: training, validation (greedy translation and scoring), checkpoints, resume,
    and checkpoint averaging across the interruption (steps 15, 20 and 24 averaged; stop at 16)."""
    def settings(out, steps):
        return TrainSettings(task="reverse", out=str(out), steps=steps, eval_every=5, average=3, log_every=1,
                             d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                             n_train=200, batch_size=16, n_held_out=20, dropout=0.2, device=device)

    def records(out, key):
        return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if key in r]

    def losses(out):
        return [r["loss"] for r in records(out, "loss")]

    whole = Trainer(settings(tmp_path / "whole", 24))
    whole.start()
    whole.train(Quiet())
    first = Trainer(settings(tmp_path / "split", 24))
    first.start()
    first.s.steps = 16  # stop early, as an interruption would; the schedule still spans 24 steps
    first.train(Quiet())
    first.save("last.npz")
    resumed = Trainer(TrainSettings(**{**vars(settings(tmp_path / "split", 24)), "resume": True}))
    resumed.start()
    assert resumed.step == 16 and resumed.average.taken == [15]
    resumed.train(Quiet())
    assert losses(tmp_path / "split") == losses(tmp_path / "whole")
    assert len(losses(tmp_path / "whole")) == 24
    averaged = records(tmp_path / "whole", "averaged")
    assert [r["averaged"] for r in averaged] == [3] and records(tmp_path / "split", "averaged") == averaged
    run = open_run(tmp_path / "whole", device)
    assert run.model.device == device and {p.device for p in run.model.parameters()} == {device}
    report = json.loads(run_cli("evaluate", "--run", str(tmp_path / "whole"), "--json", "--beam", "1").stdout)
    from models.translate.evaluation import score, translate

    sources = run.held_out("test")
    outputs = translate(run.model, [s for s, _ in sources], run.src_vocab, run.tgt_vocab, run.tokenizers)
    metrics = score(outputs, [refs for _, refs in sources], run.tokenizers[1])
    assert metrics["exact_match"] == pytest.approx(report["exact_match"])


def test_jitted_training_equals_eager_training(tmp_path):
    """The default (tx.jit) and --no-jit train the same model: same losses, same weights, dropout on."""
    def run(jit):
        settings = TrainSettings(task="reverse", out=str(tmp_path / str(jit)), steps=30, eval_every=1000,
                                 log_every=1, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                 d_ff=32, n_train=200, batch_size=16, n_held_out=20, dropout=0.2, jit=jit)
        trainer = Trainer(settings)
        trainer.start()
        trainer.train(Quiet())
        lines = (tmp_path / str(jit) / "metrics.jsonl").read_text().splitlines()
        losses = [json.loads(line)["loss"] for line in lines if "loss" in json.loads(line)]
        return losses, [p.numpy() for p in trainer.model.parameters()]

    (jit_losses, jit_params), (eager_losses, eager_params) = run(True), run(False)
    assert jit_losses == eager_losses and len(jit_losses) == 30
    for a, b in zip(jit_params, eager_params):
        np.testing.assert_array_equal(a, b)
    assert cli_parser().parse_args(["train", "--task", "copy", "--no-jit"]).jit is False


def test_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "last.npz"
    tx.save({"step": 1}, path)
    good = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np.lib.format, "write_array", crash)
    with pytest.raises(KeyboardInterrupt):
        tx.save({"step": 2, "w": np.ones(3)}, path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["last.npz"]


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "models", "train", "--task", "copy", "--out", str(out), *TINY]
    args[args.index("--steps") + 1] = "100000"  # far more than it will get to run
    process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
        assert time.time() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert f"continue with python -m models train --out {out} --resume" in stdout
    step = int(tx.load(out / "last.npz")["step"])
    assert step >= 10
    # no model flags given again: they come from the run directory's run.json
    resumed = Trainer(settings_for({"task": "copy", "out": str(out), "resume": True}))
    resumed.start()
    assert resumed.step == step and resumed.s.d_model == 16
