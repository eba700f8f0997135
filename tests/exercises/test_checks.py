"""Each exercise's starting file fails its check with a useful message (what is not written,
where), and the engine's own code passes every check, so that no check is vacuous: a check
that a right answer cannot pass, or that passes anything, fails here."""
from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exercises import EXERCISES, check
from exercises.catalog import FOLDER
from .standins import engine_answers, write_engine_answers

ROOT = Path(__file__).resolve().parents[2]
WRITTEN = [e for e in EXERCISES if e.special != "all"]  # the exercises with something to write
NOT_WRITTEN = re.compile(r"is not written yet \((exercises/\d\d_\w+\.py), line (\d+)\)")
PASSED = re.compile(r"passed\. Compare with the engine's own: (.+)")


@pytest.mark.parametrize("exercise", WRITTEN, ids=lambda e: e.file)
def test_the_starting_file_fails_saying_what_to_write_and_where(exercise):
    report = check(exercise.number)
    assert not report
    where = NOT_WRITTEN.search(str(report))
    assert where, str(report)
    path, line = ROOT / where[1], int(where[2])
    assert path.name == exercise.file
    assert "raise NotImplementedError" in path.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("exercise", WRITTEN, ids=lambda e: e.file)
def test_the_engines_own_code_passes_every_check_and_the_pass_links_to_it(exercise):
    report = check(exercise.number, engine_answers(exercise.number))
    assert report, str(report)
    assert not any("✗" in line for line in report.lines)
    links = PASSED.search(str(report))[1].split(", ")
    for link in links:
        path, line = re.fullmatch(r"(\S+):(\d+) \(.+\)", link).groups()
        assert (ROOT / path).is_file() and int(line) > 0, link
    cases = sum(len(spec.cases) + 1 for spec in exercise.ops)  # + the float32 case of each op
    if exercise.ops:
        assert sum(line.startswith("  ✓") for line in report.lines) == cases


def test_the_last_exercise_checks_every_earlier_one(tmp_path):
    starting = check("11")
    assert not starting and "01: an elementwise op: Mul" in str(starting)
    assert "not written yet" in str(starting)
    write_engine_answers(tmp_path)
    done = check("11", folder=tmp_path)
    assert done, str(done)
    assert sum(line.startswith("  ✓") for line in done.lines) == len(WRITTEN)


def test_loading_an_exercise_leaves_the_engines_registry_as_it_was():
    import tinygrad_tx as tx
    before = dict(tx.REGISTRY)
    for exercise in EXERCISES:
        check(exercise.number)
    assert tx.REGISTRY == before


def test_the_command_line_exits_1_on_a_failing_check_and_2_on_a_bad_number():
    run = [sys.executable, "-m", "exercises"]
    env = {"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "PATH": ""}
    failing = subprocess.run([*run, "check", "02"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert failing.returncode == 1 and "exercise 02: broadcasting: Add" in failing.stdout
    bad = subprocess.run([*run, "check", "42"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: no exercise '42': they are numbered 01 to 11"


def test_every_exercise_file_is_listed_and_opens_as_a_notebook():
    jupytext = pytest.importorskip("jupytext")
    files = sorted(p.name for p in FOLDER.glob("[0-9][0-9]_*.py"))
    assert files == [e.file for e in EXERCISES]
    for name in files:
        notebook = jupytext.read(FOLDER / name)
        kinds = [cell.cell_type for cell in notebook.cells]
        assert kinds[0] == "markdown" and "code" in kinds, name
        assert f"about {next(e.minutes for e in EXERCISES if e.file == name)} minutes" in notebook.cells[0].source


def test_the_page_gives_each_exercise_its_time_and_what_it_teaches():
    page = (ROOT / "docs" / "exercises.md").read_text()
    rows = re.findall(r"^\| (\d\d) \| `(\S+)` \| (\d+) min \| (.+) \|$", page, re.M)
    assert [(n, f, int(m)) for n, f, m, _ in rows] == [(e.number, e.file, e.minutes) for e in EXERCISES]
    assert f"About {round(sum(e.minutes for e in EXERCISES) / 60)} hours in all" in page


@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e.ops], ids=lambda e: e.file)
def test_a_learners_op_carries_its_math_and_source_as_the_engines_ops_do(exercise):
    """What the explorer shows beside a node (its op class's own docstring, its forward and
    backward as written, with file and line) is there for the learner's classes too."""
    from exercises.catalog import load
    names = load(exercise)
    for spec in exercise.ops:
        cls = names[spec.name]
        assert cls.__dict__["__doc__"].startswith("y = ") and " d" in cls.__dict__["__doc__"]
        for method in ("forward", "backward"):
            code = inspect.unwrap(getattr(cls, method))
            assert Path(inspect.getsourcefile(code)) == FOLDER / exercise.file
            assert inspect.getsource(code).lstrip().startswith(f"def {method}(self")


def test_an_exercise_runs_as_a_notebook_and_its_last_cell_checks_the_cells_classes(tmp_path, monkeypatch):
    """Exercise 05 in a kernel started away from the checkout (as Jupyter opens it through
    jupytext): its cells run, and the last one's check reports on the class its cells defined."""
    missing = [name for name in ("jupytext", "nbclient", "ipykernel") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e \".[test]\")")
    import jupytext
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel inherits it: `import exercises` as after pip install -e
    notebook = jupytext.read(FOLDER / "05_softmax.py")
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    said = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "g = random: " in said and "exercise 05: Softmax\n  ✗ Softmax: (3, 5) along the last axis" in said
    assert "backward is not written yet (a notebook cell, line " in said and "write Softmax.backward" in said
