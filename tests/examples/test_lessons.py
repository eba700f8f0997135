"""Every lesson in examples/ runs in quick mode, as CI runs it, and its own checks pass.

A lesson ends by comparing what it computed with an independent truth (PyTorch's
layers, the paper's formula, the grammar's entropy, the command line's translation)
and exits non-zero when a check fails; in quick mode the training checks ask only
for the right direction (loss far below a uniform guess, accuracy above the baseline).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LESSONS = sorted(EXAMPLES.glob("lesson_0*.py"))


def test_there_is_a_lesson_for_each_seed():
    assert [p.name[:10] for p in LESSONS] == [f"lesson_00{i}" for i in range(5)]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_and_its_checks_pass(lesson: Path, tmp_path: Path):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, str(lesson), "--quick", "--out", str(tmp_path)], cwd=EXAMPLES.parent,
                            capture_output=True, text=True, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "all checks passed" in result.stdout and "CHECK FAIL" not in result.stdout, output[-4000:]
    assert list(tmp_path.glob("*.png")), f"{lesson.name} drew no picture into --out"
