"""Regression tests for the command-line defects a hostile test found: every bad argument or
damaged file is one line on stderr and exit status 2, nothing a user owns is overwritten, and
nothing is written before every argument has been checked.

The commands run in this process (`cli.main`), which is much faster than a subprocess each.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tinygrad_tx as tx
from models.translate import cli
from models.translate.settings import TrainSettings, settings_for
from models.translate.training import Trainer

TINY = ["--steps", "4", "--eval-every", "2", "--d-model", "8", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "8", "--n-train", "60", "--batch-size", "8"]
REPO = Path(__file__).resolve().parents[3]


def run(capsys, *args: str, stdin: str | bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """`python -m models ARGS` in this process: (exit status, stdout, stderr)."""
    if stdin is not None:
        import io

        data = stdin if isinstance(stdin, bytes) else stdin.encode()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "reverse"
    cli.main(["train", "--task", "reverse", "--out", str(out), *TINY])
    return out


@pytest.fixture
def copy_of(trained, tmp_path):
    def make() -> Path:
        target = tmp_path / "run"
        shutil.copytree(trained, target)
        return target
    return make


# -- every argument is checked up front; nothing is written before -------------------------

@pytest.mark.parametrize("extra, words", [
    (["--num-heads", "0"], ["--num-heads", "from 1"]),
    (["--d-ff", "0"], ["--d-ff"]),
    (["--d-model", "0"], ["--d-model"]),
    (["--eval-every", "0"], ["--eval-every"]),
    (["--num-encoder-layers", "0"], ["--num-encoder-layers"]),
    (["--num-decoder-layers", "0"], ["--num-decoder-layers"]),
    (["--steps", "0"], ["--steps"]),
    (["--n-train", "0"], ["--n-train"]),
    (["--lr", "nan"], ["--lr", "nan"]),
    (["--dropout", "1.0"], ["--dropout", "[0, 1)"]),
    (["--label-smoothing", "2"], ["--label-smoothing"]),
    (["--clip-norm", "-1"], ["--clip-norm", "[0, "]),
    (["--d-model", "10", "--num-heads", "4"], ["divisible"]),
    (["--tokenizer", "char"], ["--tokenizer", "its own tokenisation"]),
    (["--vocab-size", "100"], ["--vocab-size", "its own tokenisation"]),
    (["--max-len", "0"], ["--max-len"]),
    (["--seed", "-1"], ["--seed"]),
])
def test_bad_train_arguments_write_nothing(capsys, tmp_path, extra, words):
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY, *extra)
    assert_one_line_error(code, err, *words)
    assert not out.exists()


def test_out_naming_a_file_is_refused(capsys, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(target), *TINY)
    assert_one_line_error(code, err, "notes.txt", "is a file")
    assert target.read_text() == "mine"


@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_beam_zero_is_refused(capsys, trained, command):
    args = ["--run", str(trained), "--beam", "0"] + (["abc"] if command == "translate" else [])
    assert_one_line_error(*run(capsys, command, *args)[::2], "--beam")


# -- a directory that is not empty and not a run directory is never written into --------------

@pytest.mark.parametrize("name", ["run.json", "test.tsv", "notes.txt"])
def test_train_refuses_a_directory_holding_a_users_files(capsys, tmp_path, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("the user's\n")
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY)
    assert_one_line_error(code, err, "not a run directory")
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == "the user's\n"


def test_train_may_restart_its_own_run_directory_without_checkpoint(capsys, copy_of):
    run_dir = copy_of()
    for name in ("last.npz", "best.npz"):
        (run_dir / name).unlink()
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(run_dir), *TINY)
    assert code == 0, err
    assert (run_dir / "last.npz").exists()


# -- resume keeps the run's data, or refuses -------------------------------------------------

def test_resume_with_another_task_is_refused(capsys, copy_of):
    run_dir = copy_of()
    before = (run_dir / "last.npz").read_bytes()
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(run_dir), "--resume")
    assert_one_line_error(code, err, "'reverse'", "'copy'")
    assert (run_dir / "last.npz").read_bytes() == before


def test_resume_needs_only_the_run_directory(capsys, copy_of):
    run_dir = copy_of()
    code, out, err = run(capsys, "train", "--out", str(run_dir), "--resume", "--steps", "6")
    assert code == 0, err
    assert f"resuming {run_dir} at step 4" in out and int(tx.load(run_dir / "last.npz")["step"]) == 6
    code, _, err = run(capsys, "train", "--resume")
    assert_one_line_error(code, err, "--resume needs --out")


def test_resume_with_a_changed_corpus_is_refused(capsys, tmp_path):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"w{i} x\tv{i} y\n" for i in range(30)))
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--data", str(corpus), "--out", str(out), *TINY)
    assert code == 0, err
    corpus.write_text("".join(f"w{i} x x\tv{i} y\n" for i in range(30)))  # word frequencies change
    code, _, err = run(capsys, "train", "--data", str(corpus), "--out", str(out), "--resume")
    assert_one_line_error(code, err, "does not give the pairs", str(out))


def test_resume_reads_vocabulary_and_held_out_pairs_from_the_run(capsys, trained, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    trainer = Trainer(settings_for({"task": "reverse", "out": str(run_dir), "resume": True}))
    vocab = json.loads((run_dir / "vocab.json").read_text())
    assert trainer.data.src_vocab.tokens == vocab["src"]["tokens"] and trainer.data.tgt_vocab.tokens == vocab["tgt"]["tokens"]
    assert ["\t".join(p) for p in trainer.data.test_pairs] == (run_dir / "test.tsv").read_text().splitlines()
    held_out = {s for s, _ in trainer.data.test_pairs + trainer.data.valid_pairs}
    assert not held_out & {s for s, _ in trainer.data.train_pairs}
    # a held-out file changed by hand is not taken as the run's: it is refused
    lines = (run_dir / "test.tsv").read_text().splitlines()
    (run_dir / "test.tsv").write_text("".join(line + "\n" for line in lines[::-1]))
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(run_dir), "--resume")
    assert_one_line_error(code, err, "test.tsv", "edited")


# -- damaged run directories: one line naming the file ----------------------------------------

@pytest.mark.parametrize("name, content, words", [
    ("run.json", "{}", ["run.json", "'settings'"]),
    ("run.json", "[1, 2]", ["run.json", "list"]),
    ("run.json", None, ["run.json", "src tokenizer"]),  # an unknown tokenizer kind, set below
    ("vocab.json", '{"tgt": {"tokens": []}}', ["vocab.json", "src"]),
    ("vocab.json", None, ["vocab.json", "does not fit the model"]),  # shortened, below
])
def test_damaged_run_files_are_one_line(capsys, copy_of, name, content, words):
    run_dir = copy_of()
    path = run_dir / name
    if content is None and name == "run.json":
        data = json.loads(path.read_text())
        data["tokenizers"]["src"]["kind"] = "klingon"
        content = json.dumps(data)
    elif content is None:
        data = json.loads(path.read_text())
        data["tgt"]["tokens"] = data["tgt"]["tokens"][:-2]
        content = json.dumps(data)
    path.write_text(content)
    if name == "vocab.json":  # a vocabulary whose checksum fits, so that its contents are what is checked
        data = json.loads((run_dir / "run.json").read_text())
        data["checksums"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
        (run_dir / "run.json").write_text(json.dumps(data))
    for command in (["evaluate"], ["translate", "abc"]):
        code, _, err = run(capsys, command[0], "--run", str(run_dir), *command[1:])
        assert_one_line_error(code, err, *words)
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(run_dir), "--resume")
    assert_one_line_error(code, err, name)


@pytest.mark.parametrize("damage", ["missing", "half-written"])
def test_a_damaged_metrics_log_never_blocks_a_resume(capsys, copy_of, damage):
    run_dir = copy_of()
    log = run_dir / "metrics.jsonl"
    if damage == "missing":
        log.unlink()
    else:
        log.write_text(log.read_text() + '{"step": 3, "lo')
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(run_dir), "--resume", "--steps", "6")
    assert code == 0, err
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps and max(steps) == 6


# -- translate cleans its input as training cleaned the pairs ----------------------------------

def test_translate_strips_like_training_and_keeps_empty_lines(capsys, monkeypatch, trained):
    code, plain, err = run(capsys, "translate", "--run", str(trained), "abc", "hgf")
    assert code == 0, err
    code, out, err = run(capsys, "translate", "--run", str(trained),
                         stdin="abc\r\n\n  hgf  \r\n", monkeypatch=monkeypatch)
    assert code == 0, err
    lines = plain.splitlines()
    assert out.splitlines() == [lines[0], "", lines[1]]
    code, out, err = run(capsys, "translate", "--run", str(trained), "")
    assert code == 0 and out == "\n", err


# -- a line of standard input is a line of a corpus file ---------------------------------------

@pytest.mark.parametrize("inside", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"],
                         ids=["VT", "FF", "FS", "GS", "RS", "NEL", "LS", "PS", "lone-CR"])
def test_translate_gives_one_output_line_per_input_line(capsys, monkeypatch, trained, tmp_path, inside):
    """str.splitlines() cuts at each of these; a corpus file's reader does not, nor does translate."""
    from models.translate.corpus import read_corpus

    text = f"abc{inside}def\nghi\n"
    code, out, err = run(capsys, "translate", "--run", str(trained), stdin=text, monkeypatch=monkeypatch)
    assert code == 0, err
    code, expected, err = run(capsys, "translate", "--run", str(trained), "abc def", "ghi")
    assert out == expected and len(out.splitlines()) == 2
    corpus = tmp_path / "pairs.tsv"  # the same text as a corpus: as many pairs as translate gave lines
    corpus.write_bytes(text.replace("\n", "\tx\n").encode())
    assert [s for s, _ in read_corpus(corpus).pairs] == ["abc def", "ghi"]


# -- overly long pairs are left out, with a count ----------------------------------------------

def test_overly_long_training_pairs_are_left_out(capsys, tmp_path):
    corpus = tmp_path / "pairs.tsv"
    lines = [f"w{i} x\tv{i} y" for i in range(40)] + [" ".join(["long"] * 3000) + "\tshort"]
    corpus.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "train", "--data", str(corpus), "--out", str(tmp_path / "run"), *TINY,
                         "--max-len", "20")
    assert code == 0, err
    assert "left out 1 pairs longer than --max-len 20 tokens" in out
    assert tx.load(tmp_path / "run" / "last.npz")["config"]["max_len"] <= 2 * 20 + 16


# -- every file of a run directory honours the umask ------------------------------------------

def test_run_files_honour_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        trainer = Trainer(TrainSettings(task="copy", out=str(tmp_path / "run"), steps=2, eval_every=2,
                                        d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=8,
                                        n_train=20, n_held_out=5))

        class Quiet:
            def update(self, n): pass
            def set_postfix(self, **kw): pass
            def write(self, text): pass

        trainer.start()
        trainer.train(Quiet())
    finally:
        os.umask(previous)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "run").iterdir()}
    assert {"run.json", "vocab.json", "valid.tsv", "test.tsv", "last.npz", "metrics.jsonl"} <= set(modes)
    assert set(modes.values()) == {0o640}, modes


# -- a closed pipe is not an error worth a traceback -------------------------------------------

def test_a_closed_pipe_ends_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` does once it has its line
    try:
        result = subprocess.run([sys.executable, "-m", "models", "tasks"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)
    assert result.stderr == "" and result.returncode == 1


def test_a_checkpoint_of_an_unknown_model_is_one_line(capsys, copy_of):
    run_dir = copy_of()
    state = tx.load(run_dir / "best.npz")
    tx.save({**state, "model": "Klingon"}, run_dir / "best.npz")
    code, _, err = run(capsys, "evaluate", "--run", str(run_dir))
    assert_one_line_error(code, err, "best.npz", "Klingon")


# -- translate --attention checks its argument before it translates ----------------------------

@pytest.mark.parametrize("name, words", [("attention.xyz", ["attention.xyz", ".png"]),
                                         ("picture", ["picture", ".png"]),
                                         ("", ["is a directory"])])
def test_translate_refuses_a_bad_picture_name_before_printing_anything(capsys, tmp_path, trained, name, words):
    """`translate --attention FILE` printed the translation, then failed with
    exit 2; the picture's name is checked first."""
    pytest.importorskip("matplotlib")
    target = tmp_path / name if name else tmp_path
    code, out, err = run(capsys, "translate", "--run", str(trained), "abc", "--attention", str(target))
    assert_one_line_error(code, err, *words)
    assert out == ""
