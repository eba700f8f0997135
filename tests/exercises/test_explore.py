"""`python -m exercises explore`: the explorer on a run with the learner's ops, walk and Adam installed.

The answers are stand-ins (the tests ship no answers): the engine's classes, and for Mul a
subclass written in the answer file itself, as a learner's would be, so that finding its file and
lines in a node's op text proves the page was built with the installed classes, not the engine's."""
from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
from exercises.exploring import WalksDiffer, beside_the_engines
from exercises.training import as_method, installed
from models.translate.explore import save_page
from tinygrad_tx import Tensor
from tinygrad_tx.inspect import trace_backward

from .standins import write_engine_answers
from .test_training import counting_answers
from .test_wrong_answers import by_sequence, walk_with

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
TINY = ["--steps", "20", "--eval-every", "20", "--d-model", "16", "--num-heads", "2", "--num-encoder-layers", "1",
        "--num-decoder-layers", "1", "--d-ff", "32", "--n-train", "200", "--batch-size", "8"]
MUL = '''import tinygrad_tx.ops as ops


class Mul(ops.Mul, register=False):
    """y = a * b  (a stand-in: the engine's Mul, written in the learner's file)"""

    def forward(self, a, b):
        return super().forward(a, b)

    def backward(self, g, a, b):  # the stand-in's own line
        return super().backward(g, a, b)
'''


def exercises(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exercises", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)


def saved_answers(page: Path) -> dict:
    return json.loads(re.search(r'<script id="tx-saved" type="application/json">(.*?)</script>', page.read_text(),
                                re.S)[1])


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A run of the reverse task, trained for seconds."""
    out = tmp_path_factory.mktemp("explore") / "run"
    done = subprocess.run([sys.executable, "-m", "models", "train", "--task", "reverse", "--out", str(out), *TINY],
                          capture_output=True, text=True, env=ENV, cwd=out.parent, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_page_shows_the_installed_ops_text_at_the_learners_lines(run, tmp_path):
    answers = tmp_path / "answers"
    answers.mkdir()
    write_engine_answers(answers)
    (answers / "01_mul.py").write_text(MUL)
    page = tmp_path / "page.html"
    done = exercises("--dir", str(answers), "explore", str(run), "--html", str(page), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Mul, from 01_mul.py" in done.stdout and "Tensor.backward: your walk" in done.stdout
    saved = saved_answers(page)
    ops = [v["op"] for k, v in saved.items() if k.startswith("/api/node?") and "op" in v]
    muls = [op for op in ops if op["name"] == "Mul"]
    lines = MUL.splitlines()
    assert muls, [op["name"] for op in ops]
    for op in muls:
        assert Path(op["forward"]["file"]) == answers / "01_mul.py"
        assert op["forward"]["line"] == lines.index("    def forward(self, a, b):") + 1
        assert op["backward"]["line"] == lines.index("    def backward(self, g, a, b):  # the stand-in's own line") + 1
        assert "the stand-in's own line" in op["backward"]["code"] and "written in the learner's file" in op["doc"]
    others = [op for op in ops if op["name"] == "Linear"]  # the engine's own class, as the stand-in
    assert others and others[0]["forward"]["file"] == inspect.getsourcefile(tx.REGISTRY["Linear"])
    # the walk view: the engine's walk traced once (not once more for the learner's), one step per op
    assert len(saved["/api/walk"]["steps"]) == len(ops)
    assert saved["/api/update"]["params"], saved["/api/update"]  # the update view's step ran


def test_a_learners_own_walk_gives_the_gradients_and_the_engines_is_traced(run, tmp_path):
    answers, calls = counting_answers()
    mine = walk_with(by_sequence, add=True)  # a walk of the learner's kind: no plan, no observers

    def walk(root, grad):
        calls["walk"] = calls.get("walk", 0) + 1
        mine(root, grad)

    answers["09"]["backward"] = walk
    engine = Tensor.backward
    with installed(answers):
        Tensor.backward = beside_the_engines(Tensor.backward, engine)
        save_page(run, tmp_path / "page.html")
    assert Tensor.backward is engine
    saved = saved_answers(tmp_path / "page.html")
    ops = [k for k, v in saved.items() if k.startswith("/api/node?") and "op" in v]
    assert calls["walk"] >= 2 and len(saved["/api/walk"]["steps"]) == len(ops)  # the step's and the update's


def test_the_learners_walk_keeps_its_gradients_and_a_differing_one_is_named():
    x = Tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True, name="x")
    right = beside_the_engines(as_method(walk_with(by_sequence, add=True)), Tensor.backward)
    with trace_backward() as seen:
        right((x * x).sum())  # fan-out: x used twice, d/dx = 2x
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])
    assert len(seen.steps) == 2  # the engine's walk alone was traced: Sum, then Mul
    x.grad = None
    overwrites = beside_the_engines(as_method(walk_with(by_sequence, add=False)), Tensor.backward)
    with pytest.raises(WalksDiffer, match=r"gave leaf 0 \(x, shape \(3,\)\) at element \(2,\) 3; the engine's "
                                          r"walk gives 6 "):
        overwrites((x * x).sum())  # the second use's gradient overwrote the first's: x, not 2x


def test_explore_refuses_in_one_line_naming_the_first_exercise_that_fails(run, tmp_path):
    answers = tmp_path / "answers"
    answers.mkdir()
    write_engine_answers(answers)
    shutil.copy(ROOT / "exercises" / "05_softmax.py", answers)  # the starting file: not written yet
    page = tmp_path / "page.html"
    for args in (["--dir", str(answers), "explore", str(run), "--html", str(page)],
                 ["explore", str(run), "--dir", str(answers), "--html", str(page)]):
        done = exercises(*args, cwd=tmp_path)
        assert done.returncode == 1 and done.stdout == "" and not page.exists()
        assert done.stderr.splitlines() == ["exercise 05 (Softmax) does not pass its check yet: python -m "
                                            "exercises check 05 says what is wrong"]
    starting = exercises("explore", "--html", str(page), cwd=ROOT)  # the checkout's unwritten files
    assert starting.returncode == 1 and len(starting.stderr.splitlines()) == 1
    assert "exercise 01 (an elementwise op: Mul) does not pass" in starting.stderr
    assert tx.REGISTRY["Mul"].__module__.startswith("tinygrad_tx")
