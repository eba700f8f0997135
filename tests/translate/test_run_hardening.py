"""Issue 22, items 9 and 14: one `train` per run directory (a killed one never blocks the next),
temporaries a killed save left behind are cleaned up, CR-only corpora, tiny --n-train, and
`translate --attention` checking its argument before translating."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models.translate import cli
from models.translate.corpus import read_corpus
from models.translate.run import LOCK, claim
from models.translate.tasks import TASKS

from .test_cli_errors import assert_one_line_error, run

TINY = ["--steps", "4", "--eval-every", "2", "--d-model", "8", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "8", "--n-train", "60", "--n-held-out", "10", "--batch-size", "8"]
REPO = Path(__file__).resolve().parents[2]


def snapshot(directory: Path) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in directory.iterdir()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "copy"
    cli.main(["train", "--task", "copy", "--out", str(out), *TINY, "--seed", "2"])
    return out


# -- [9] two `train` runs into one --out ------------------------------------------------------

def hold_lock(directory: Path) -> subprocess.Popen:
    """Another process that holds the run directory as a running `train` does."""
    code = ("import sys, time; from pathlib import Path; from models.translate.run import claim; "
            "lock = claim(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)")
    process = subprocess.Popen([sys.executable, "-c", code, str(directory)], cwd=REPO, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_train_into_a_busy_directory_refuses_at_once_and_writes_nothing(capsys, tmp_path, trained,
                                                                               resume):
    import shutil

    out = tmp_path / "run"
    if resume:
        shutil.copytree(trained, out)
    other = hold_lock(out)
    try:
        before = snapshot(out)
        started = time.monotonic()
        args = ["--resume", "--steps", "6"] if resume else TINY
        code, stdout, err = run(capsys, "train", "--task", "copy", "--out", str(out), *args)
        assert_one_line_error(code, err, "another `train` is writing into", str(out))
        assert time.monotonic() - started < 60 and "training on" not in stdout
        assert snapshot(out) == before  # not a byte written, not a file touched
    finally:
        other.kill()
        other.wait()


def test_a_killed_runs_lock_never_blocks_the_next_run(capsys, tmp_path):
    """kill -9 ends the holder: the kernel drops its flock, so the next train goes ahead."""
    out = tmp_path / "run"
    other = hold_lock(out)
    os.kill(other.pid, signal.SIGKILL)
    other.wait()
    assert (out / LOCK).exists()  # the file stays; the lock does not
    code, stdout, err = run(capsys, "train", "--task", "copy", "--out", str(out), *TINY)
    assert code == 0, err
    assert (out / "last.npz").exists()
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), "--resume", "--steps", "6")
    assert code == 0, err  # the finished run let go of its directory


def test_one_process_cannot_take_a_directory_twice(tmp_path):
    lock = claim(tmp_path / "run")
    try:
        with pytest.raises(RuntimeError, match="another `train`"):
            claim(tmp_path / "run")
    finally:
        lock.close()
    claim(tmp_path / "run").close()  # free again once closed


# -- [14] stale temporaries of a killed save --------------------------------------------------

@pytest.mark.parametrize("resume", [False, True])
def test_temporaries_a_killed_save_left_are_deleted_on_the_next_start(capsys, tmp_path, trained, resume):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(trained, out)
    if not resume:
        for name in ("last.npz", "best.npz"):
            (out / name).unlink()  # a run killed before its first checkpoint
    stale = [out / ".last.npz.k1ll3d00.tmp", out / ".best.npz.abcd1234.tmp"]
    for path in stale:
        path.write_bytes(b"\0" * 4096)
    args = ["--resume", "--steps", "6"] if resume else TINY
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), *args)
    assert code == 0, err
    assert not any(path.exists() for path in stale)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


# -- [14] CR-only line endings -----------------------------------------------------------------

def test_a_corpus_with_cr_endings_is_read_line_by_line(tmp_path):
    pairs = [("Run!", "Cours !"), ("Who?", "Qui ?"), ("Wow!", "Ça alors !")]
    for ending in ("\r", "\r\n", "\n"):
        path = tmp_path / "pairs.tsv"
        path.write_bytes("".join(f"{s}\t{t}\tCC-BY{ending}" for s, t in pairs).encode())
        corpus = read_corpus(path)
        assert corpus.pairs == pairs and corpus.columns == 3, ending


# -- [14] --n-train 1 --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(TASKS))
def test_a_task_holds_out_as_many_as_asked_whatever_n_train(name):
    splits = TASKS[name].make_splits(0, 1, 500, 500)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [1, 500, 500]
    held_out = {s for s, _ in splits["valid"] + splits["test"]}
    assert len(held_out) == 1000 and splits["train"][0][0] not in held_out


def test_n_train_1_trains(capsys, tmp_path):
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(tmp_path / "r"), *TINY, "--n-train", "1")
    assert code == 0, err


# -- [14] translate --attention checks its argument before it translates -------------------------

@pytest.mark.parametrize("name, words", [("attention.xyz", ["attention.xyz", ".png"]),
                                         ("picture", ["picture", ".png"]),
                                         ("", ["is a directory"])])
def test_translate_refuses_a_bad_picture_name_before_printing_anything(capsys, tmp_path, trained, name, words):
    pytest.importorskip("matplotlib")
    target = tmp_path / name if name else tmp_path
    code, out, err = run(capsys, "translate", "--run", str(trained), "abc", "--attention", str(target))
    assert_one_line_error(code, err, *words)
    assert out == ""


# -- [13] a run directory from elsewhere: run.json asking for a model its checkpoint does not hold --

def test_resume_checks_run_json_against_the_checkpoint_before_building(capsys, tmp_path, trained, monkeypatch):
    import json
    import shutil

    from models.transformer import Transformer

    out = tmp_path / "run"
    shutil.copytree(trained, out)
    run_json = json.loads((out / "run.json").read_text())
    run_json["settings"]["d_model"] = 65536  # 16 GiB of weights, were it built
    (out / "run.json").write_text(json.dumps(run_json))

    def build(self, *args, **kwargs):
        raise AssertionError("the model was built before the checkpoint was checked")
    monkeypatch.setattr(Transformer, "__init__", build)
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), "--resume")
    assert_one_line_error(code, err, "last.npz", "d_model 65536", "run.json")
