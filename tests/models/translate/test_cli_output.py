"""What the command line says to a newcomer in the first hour: its help, the line `train` starts
with, its log when written to a file, and reports that show misses and say when BLEU means nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from models.translate import cli
from models.translate.evaluation import score, summary
from models.text.tokenization import Tokenizer

from .test_cli_errors import REPO, TINY, assert_one_line_error, run


# -- the device and the threads are said, and the variable is honoured -------------------------

def test_the_first_line_names_device_threads_processes_and_the_run(capsys, tmp_path):
    import tinygrad_tx as tx

    out, before = tmp_path / "run", tx.get_num_threads()
    try:
        code, stdout, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY, "--threads", "2")
        assert code == 0, err
        assert f"new run {out}: device cpu, 2 BLAS threads, 1 process" in stdout
        code, stdout, err = run(capsys, "train", "--out", str(out), "--resume", "--steps", "6", "--threads", "1")
        assert code == 0, err
        assert f"resuming {out} at step 4: device cpu, 1 BLAS thread, 1 process" in stdout
    finally:
        tx.set_num_threads(before)


@pytest.fixture
def fresh_default(monkeypatch):
    """No `tx.set_device` made yet, as in a new process (an earlier command in this one made one)."""
    import tinygrad_tx.backends.backend

    monkeypatch.setattr(tinygrad_tx.backends.backend, "_default", None)


def test_the_device_variable_is_honoured(capsys, monkeypatch, tmp_path, fresh_default):
    monkeypatch.setenv("TINYGRAD_TX_DEVICE", "cpu")
    code, stdout, err = run(capsys, "train", "--task", "copy", "--out", str(tmp_path / "run"), *TINY)
    assert code == 0, err
    assert "device cpu (from TINYGRAD_TX_DEVICE)" in stdout


@pytest.mark.parametrize("command", [["train", "--task", "copy", "--out", "RUN"], ["evaluate", "--run", "RUN"],
                                     ["translate", "--run", "RUN", "abc"], ["explore", "RUN"]])
def test_cuda_from_the_variable_is_never_a_silent_cpu(capsys, monkeypatch, tmp_path, fresh_default, command):
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here: the variable would train on the GPU")
    except ImportError:
        pass
    monkeypatch.setenv("TINYGRAD_TX_DEVICE", "cuda")
    out = tmp_path / "run"
    code, _, err = run(capsys, *[str(out) if a == "RUN" else a for a in command])
    assert_one_line_error(code, err, "cuda", "CuPy")
    assert not out.exists()


# -- the help ------------------------------------------------------------------------------------

def test_the_top_level_help_has_an_example_of_every_command():
    parser = cli.parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = parser.format_help()
    for name in commands:
        assert f"python -m models {name} " in text, name
    assert "--resume" in text


def test_every_argument_of_every_command_has_help_and_only_computing_ones_take_a_device():
    commands = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
        flags = {s for a in command._actions for s in a.option_strings}
        computes = name in ("train", "evaluate", "translate", "explore")
        assert ({"--device", "--threads"} <= flags) == computes, name
        assert ("--device" in flags) == computes and ("--threads" in flags) == computes, name


def test_tasks_and_corpus_refuse_a_device(capsys):
    for command in (["tasks"], ["corpus", "x.tsv"]):
        code, _, err = run(capsys, *command, "--device", "cpu")
        assert code == 2 and "unrecognized arguments: --device" in err


def test_the_old_option_name_still_works_and_says_the_new_one(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY)
    assert code == 0, err
    code, new, _ = run(capsys, "translate", "--run", str(out), "abc")
    code, old, err = run(capsys, "translate", "--checkpoint", str(out), "abc")
    assert code == 0 and old == new and "--checkpoint is now called --run" in err


@pytest.mark.parametrize("fraction, text", [(5 * 64 / 20000, "1.6% of an epoch"), (1.0, "about 1 epoch"),
                                            (24.6, "about 25 epochs"), (0.0004, "0.04% of an epoch")])
def test_a_short_run_is_a_share_of_an_epoch_never_about_0_epochs(fraction, text):
    assert cli.epochs(fraction) == text


# -- the log written to a file ---------------------------------------------------------------------

def test_a_log_file_gets_plain_lines_and_each_validation_once(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "w") as f:  # a file, not a terminal: as `train ... > log 2>&1`
        subprocess.run([sys.executable, "-m", "models", "train", "--task", "reverse", "--out", str(tmp_path / "run"),
                        *TINY, "--steps", "20", "--eval-every", "10"], stdout=f, stderr=subprocess.STDOUT,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=300, check=True)
    data = log.read_bytes()  # as bytes: reading text would make each CR a line end
    assert b"\r" not in data  # tqdm's redraws
    lines = data.decode().split("\n")
    assert [line.split(" (")[0] for line in lines if line.startswith("step ") and "/20 " in line] == [
        f"step {n}/20" for n in range(2, 21, 2)]  # a line at each tenth of the run
    validations = [i for i, line in enumerate(lines) if line.startswith("step ") and ": validation" in line]
    assert len(validations) == 2
    for at in validations:  # three examples after each validation's scores, and nothing else shows them
        assert all("(reference " in line for line in lines[at + 1:at + 4])
    assert sum("(reference " in line for line in lines[:validations[-1] + 4]) == 6


# -- evaluate shows misses as well as hits ---------------------------------------------------------

def test_evaluate_shows_the_misses_as_well_as_the_right_ones(capsys, monkeypatch, tmp_path):
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY)
    assert code == 0, err
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tA\nb\tB\nc\tC\nd\tD\ne\tE\n")
    # the model's outputs, fixed so that the truth is known: three right, two wrong
    monkeypatch.setattr(cli, "translate_shared", lambda run, texts, *args: ["A", "x", "C", "y", "E"])
    code, report, err = run(capsys, "evaluate", "--run", str(out), "--data", str(pairs))
    assert code == 0, err
    assert "exact match 60.00%" in report
    assert "3 of 5 right, for example:" in report and "2 of 5 missed, for example:" in report
    assert report.count("  ✓ ") == 3 and report.count("  ✗ ") == 2
    assert "  ✗ 'b' -> 'x'  (reference 'B')" in report and "  ✗ 'd' -> 'y'  (reference 'D')" in report


# -- BLEU on sentences too short for it -----------------------------------------------------------

def test_bleu_on_three_word_sentences_says_why_it_is_zero_and_leads_with_what_means_something():
    import sacrebleu

    short = ["le chat mange", "il court", "je suis là"]
    metrics = score(short, [[s] for s in short], Tokenizer("word"))
    assert metrics["bleu"] == sacrebleu.corpus_bleu(short, [short]).score == 0.0  # sacrebleu's own definition
    assert metrics["exact_match"] == 100.0 and metrics["chrf"] == 100.0 and not metrics["bleu_defined"]
    line = summary(metrics)
    assert line.startswith("exact match 100.00%, chrF 100.00") and "4 tokens" in line
    longer = ["le petit chat mange", "il court"]
    metrics = score(longer, [[s] for s in longer], Tokenizer("word"))
    assert metrics["bleu_defined"] and metrics["bleu"] == pytest.approx(100.0)
    assert summary(metrics) == "exact match 100.00%, token accuracy 100.00%, BLEU 100.00, chrF 100.00"


def test_a_corpus_of_short_sentences_keeps_its_best_model_by_chrf(capsys, tmp_path):
    """BLEU is 0 at every validation there, so picking by it kept the first validation's model."""
    import tinygrad_tx as tx

    corpus = tmp_path / "short.tsv"
    words = ["cat", "dog", "sun", "car", "tree", "house", "bird", "fish", "book", "door"]
    corpus.write_text("".join(f"the {a} {b}\tle {a} {b}\n" for a in words for b in words))
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "train", "--data", str(corpus), "--out", str(out), "--tokenizer", "word",
                            *TINY, "--steps", "30", "--eval-every", "5", "--lr", "1e-2",
                            "--no-tie-output")  # an output layer of its own: chrF then moves within 30 steps
    assert code == 0, err
    chrf = [r["valid_chrf"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "valid_chrf" in r]
    assert len(chrf) == 6 and max(chrf) > chrf[0]
    assert float(tx.load(out / "last.npz")["best"]) == pytest.approx(max(chrf))


# -- what train chose, help that shows how, scores as people write them ---------------------------

def test_train_says_in_one_line_what_the_task_or_the_corpus_chose(capsys, tmp_path):
    """The width, layers, heads, dropout, learning rate and weight decay a task or a corpus chose
    were nowhere in train's output. The values expected are tasks.py's and corpus_defaults' own."""
    from models.translate.settings import corpus_defaults
    from models.translate.tasks import TASKS

    from .test_corpus_cli import write_anki

    tiny = ["--steps", "4", "--eval-every", "2", "--n-train", "60", "--num-encoder-layers", "1"]
    code, stdout, err = run(capsys, "train", "--task", "numbers", "--out", str(tmp_path / "task"), *tiny)
    assert code == 0, err
    task = TASKS["numbers"].defaults
    assert (f"width {task['d_model']}, 1 encoder and {task['num_decoder_layers']} decoder layers, 4 heads, "
            f"feed-forward {task['d_ff']} (relu), dropout 0.1; lr 0.002 after 1 warm-up steps") in stdout
    data = write_anki(tmp_path / "fra.txt", n_sources=40)
    code, stdout, err = run(capsys, "train", "--data", str(data), "--out", str(tmp_path / "corpus"), *tiny)
    assert code == 0, err
    chosen = corpus_defaults(80)
    assert (f"width {chosen['d_model']}, 1 encoder and 2 decoder layers, {chosen['num_heads']} heads, feed-forward "
            f"{chosen['d_ff']} (gelu_tanh), dropout {chosen['dropout']:g} (attention 0, activation 0); "
            f"lr {chosen['lr']:g} after 1 warm-up steps, cosine decay, weight decay {chosen['weight_decay']:g}, "
            f"batches of {chosen['batch_size']}") in stdout


def test_every_commands_help_has_examples_and_groups_and_says_defaults_where_they_stand():
    from models.translate.tasks import TASKS

    commands = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        text = command.format_help()
        examples = text.split("examples:")[-1]
        assert "examples:" in text and examples.count(f"python -m models {name}") >= 2, name
    train = commands["train"].format_help()
    for group in ("data:", "model:", "training:", "output:", "machine:"):
        assert f"\n{group}" in train, group
    assert "*" not in train  # a default is said where it stands, not by a footnote
    steps = " ".join(train.split("\n  --steps N")[1].split("\n  --time")[0].split())
    for task in TASKS.values():  # each task's own number of steps, as tasks.py gives it
        assert f"{task.defaults.get('steps', 3000)}" in steps, (task.name, steps)
    assert "OMP_NUM_THREADS" in train and "OPENBLAS_NUM_THREADS" in train


def test_evaluate_json_rounds_its_scores(capsys, tmp_path):
    """`evaluate --json` printed "bleu": 100.00000000000004."""
    out = tmp_path / "run"
    assert run(capsys, "train", "--task", "copy", "--out", str(out), *TINY)[0] == 0
    code, stdout, err = run(capsys, "evaluate", "--run", str(out), "--json", "--by-length")
    assert code == 0, err
    result = json.loads(stdout)
    numbers = [v for v in result.values() if isinstance(v, float)] + [row[2] for row in result["by_length"]]
    assert numbers and all(v == round(v, 4) for v in numbers), numbers
