"""The lessons in examples/, in quick mode, as CI runs them: each runs as a script and as a
notebook (jupytext + nbclient) from a folder that is neither the checkout nor examples/, shows
its pictures under their cells in the notebook, and its checks pass; a check whose truth is
not installed says "skipped" and never "passed"; the README's table of lessons is the one
benchmarks/lessons.py writes.

A lesson ends by comparing what it computed with an independent truth (PyTorch's layers, the
paper's formula, the grammar's entropy, the command line's translation) and exits non-zero
when a check fails; in quick mode the training checks ask only for the right direction (loss
far below a uniform guess, accuracy above the baseline).
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LESSONS = sorted(EXAMPLES.glob("lesson_0*.py"))
HAS_TORCH = importlib.util.find_spec("torch") is not None
QUICK = {"OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg", "LESSONS_QUICK": "1"}
ALL_PASSED = re.compile(r"all (\d+) checks passed")
SKIPPED = re.compile(r'(\d+) passed, (\d+) skipped: install torch to run them \(pip install -e "\.\[lessons\]"\)')


def run_lesson(lesson: Path, folder: Path, **env: str) -> tuple[list[str], str]:
    """Run a lesson as a script in `folder`; its printed lines and everything it said."""
    done = subprocess.run([sys.executable, str(lesson), "--out", "pictures"], cwd=folder, capture_output=True,
                          text=True, env={**os.environ, **QUICK, **env}, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    return done.stdout.splitlines(), said


def assert_checks_ran(lines: list[str], said: str) -> None:
    """Every check passed, none failed, and the summary says whether any could not run."""
    assert not any(line.startswith("CHECK FAIL") for line in lines), said[-4000:]
    skips = [line for line in lines if line.startswith("CHECK skip")]
    if skips:  # only where PyTorch is missing
        assert not HAS_TORCH and SKIPPED.fullmatch(lines[-1]), said[-4000:]
        assert int(SKIPPED.fullmatch(lines[-1])[2]) == len(skips)
    else:
        assert ALL_PASSED.fullmatch(lines[-1]), said[-4000:]
    assert sum(line.startswith("RESULT: ") for line in lines) == 1, said[-4000:]


def test_there_is_a_lesson_for_each_seed():
    assert [p.name[:10] for p in LESSONS] == [f"lesson_00{i}" for i in range(5)]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_as_a_script_from_any_folder_and_its_checks_pass(lesson: Path, tmp_path: Path):
    lines, said = run_lesson(lesson, tmp_path)
    assert_checks_ran(lines, said)
    pictures = [line.removeprefix("picture: ") for line in lines if line.startswith("picture: ")]
    assert pictures and all((tmp_path / p).is_file() for p in pictures), said[-4000:]


@pytest.mark.parametrize("lesson", [LESSONS[0], LESSONS[4]], ids=lambda p: p.stem)
def test_a_check_whose_truth_is_not_installed_is_skipped_never_passed(lesson: Path, tmp_path: Path):
    """Lessons 000 and 004 check layers against PyTorch's: without it, those checks are skipped,
    and the last line says how many and what to install, never "all checks passed"."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "torch.py").write_text('raise ImportError("torch is hidden by the test")\n')
    path = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH")) if p)
    lines, said = run_lesson(lesson, tmp_path, PYTHONPATH=path)
    skips = [line for line in lines if line.startswith("CHECK skip") and "torch" in line]
    summary = SKIPPED.fullmatch(lines[-1])
    assert skips and summary and int(summary[2]) == len(skips), said[-4000:]
    assert int(summary[1]) == sum(line.startswith("CHECK pass") for line in lines)
    assert not any(line.startswith("CHECK pass") and "torch" in line for line in lines)


def test_checks_count_what_passed_failed_and_was_skipped(capsys):
    sys.path.insert(0, str(EXAMPLES))
    from lesson_kit import Checks

    check = Checks()
    check("one", True)
    check.skip("two", "torch")
    check.finish()
    assert capsys.readouterr().out.splitlines()[-1] == ('1 passed, 1 skipped: install torch to run them '
                                                        '(pip install -e ".[lessons]")')
    check("three", False, "3 > 2")
    with pytest.raises(SystemExit) as exit_:
        check.finish()
    assert exit_.value.code == 1 and "1 check(s) failed: three" in capsys.readouterr().out


def notebook_tools_missing() -> str:
    missing = [name for name in ("jupytext", "nbclient", "ipykernel") if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed (pip install -e \".[test]\")" if missing else ""


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_as_a_notebook_from_any_folder_with_its_pictures_inline(lesson: Path, tmp_path: Path,
                                                                           monkeypatch):
    """jupytext reads the `# %%` cells, nbclient runs them in a kernel started in tmp_path (not
    examples/, where Jupyter would start it): every picture the lesson saves is also an image
    under its cell."""
    if notebook_tools_missing():
        if os.environ.get("CI"):
            pytest.fail(f"the notebook tests must run in CI, but {notebook_tools_missing()}")
        pytest.skip(notebook_tools_missing())
    import jupytext
    from nbclient import NotebookClient

    for name, value in QUICK.items():
        monkeypatch.setenv(name, value)  # the kernel inherits this process's environment
    notebook = jupytext.read(lesson)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    lines = "".join(o.get("text", "") for o in outputs if o.output_type == "stream").splitlines()
    said = "\n".join(lines)
    assert_checks_ran(lines, said)
    saved = [line for line in lines if line.startswith("picture: ")]
    inline = [o for o in outputs if "image/png" in o.get("data", {})]
    assert saved and len(inline) == len(saved), said[-4000:]


def test_the_readmes_table_of_lessons_is_the_one_the_script_wrote():
    """README.md shows docs/results/lessons.md (tests/docs checks the copy is word for word):
    one row per lesson, every check of a full run passed, none skipped."""
    readme = (ROOT / "README.md").read_text()
    assert "<!-- include: docs/results/lessons.md -->" in readme
    table = (ROOT / "docs" / "results" / "lessons.md").read_text()
    assert "benchmarks/lessons.py --write-docs" in table.splitlines()[0] and "--quick" not in table
    rows = [line for line in table.splitlines() if line.startswith("| `lesson_")]
    assert [row.split("`")[1] for row in rows] == [p.name for p in LESSONS]
    assert all(re.search(r"\| \d+ checks passed \|", row) for row in rows) and "skipped" not in table


def test_the_table_script_reports_a_lesson_and_refuses_a_skipped_check(tmp_path: Path):
    script = [sys.executable, str(ROOT / "benchmarks" / "lessons.py"), "--quick", "--lessons", "004"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(script, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| `lesson_004"))
    assert "| seed 004: " in row and "the tutorial's hand-computed values" in row and "checks passed" in row
    (tmp_path / "torch.py").write_text('raise ImportError("torch is hidden by the test")\n')
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(script, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0 and "skipped" in done.stderr and "| `lesson_004" not in done.stdout
