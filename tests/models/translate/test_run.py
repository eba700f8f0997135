"""The run directory (models/translate/run.py): one `train` per directory at a time (a killed
one never blocks the next), temporaries a killed save left behind are cleaned up on the next
start, and run.json is checked against the checkpoint before a model is built. A run killed
or damaged at random is in test_kill_and_damage.py."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models.translate import cli
from models.translate.run import LOCK, claim

from .test_cli_errors import assert_one_line_error, run


TINY = ["--steps", "4", "--eval-every", "2", "--d-model", "8", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "8", "--n-train", "60", "--n-held-out", "10", "--batch-size", "8"]
REPO = Path(__file__).resolve().parents[3]


def snapshot(directory: Path) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in directory.iterdir()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "copy"
    cli.main(["train", "--task", "copy", "--out", str(out), *TINY, "--seed", "2"])
    return out


# -- one `train` per run directory ---------------------------------------------------------

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
    """Two `train` runs into one --out at once both exited 0, interleaved
    metrics.jsonl, overwrote each other's checkpoints and reported each other's test scores. The
    second refuses at once, before writing anything."""
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
    """Within one process too, the claim on a directory is held until closed."""
    lock = claim(tmp_path / "run")
    try:
        with pytest.raises(RuntimeError, match="another `train`"):
            claim(tmp_path / "run")
    finally:
        lock.close()
    claim(tmp_path / "run").close()  # free again once closed


# -- temporaries a killed save left behind -----------------------------------------------------

@pytest.mark.parametrize("resume", [False, True])
def test_temporaries_a_killed_save_left_are_deleted_on_the_next_start(capsys, tmp_path, trained, resume):
    """After kill -9 during a save, 50-64 MB *.tmp files stayed behind for ever; the next start
    deletes them."""
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


# -- a run directory from elsewhere: run.json asking for a model its checkpoint does not hold ----

def test_resume_checks_run_json_against_the_checkpoint_before_building(capsys, tmp_path, trained, monkeypatch):
    """On resume, a run.json whose settings asked for d_model 65536 built the
    model (16 GiB) before any weight shape was checked."""
    import json
    import shutil

    from models.transformer import Transformer

    out = tmp_path / "run"
    shutil.copytree(trained, out)
    run_json = json.loads((out / "run.json").read_text())
    run_json["settings"]["d_model"] = 8192  # the widest run.json may ask for (65536 is out of range): GiBs, were it built
    (out / "run.json").write_text(json.dumps(run_json))

    def build(self, *args, **kwargs):
        raise AssertionError("the model was built before the checkpoint was checked")
    monkeypatch.setattr(Transformer, "__init__", build)
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(out), "--resume")
    assert_one_line_error(code, err, "last.npz", "d_model 8192", "run.json")
