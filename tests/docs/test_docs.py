"""Every snippet of README.md and docs/*.md runs, and shows what it prints.

The pages are parsed with Sybil, the field's doc-testing library; each page is one
test, its examples run in order in one namespace. The conventions a page follows:

- A ```python block runs as written. A set-up the reader need not see goes in an
  `<!-- invisible-code-block: python -->` comment, and a block that cannot run here
  (it starts a server) follows `<!-- skip: next -->` (Sybil's own directives).
- An ```output block right after a python block is what that block prints; it is
  compared with the real output (doctest's rules: `...` matches anything, runs of
  spaces are one space).
- Every ```bash block is declared by the HTML comment just before it:
  `<!-- shell: run -->` runs each line as written; `<!-- shell: run-instead ... -->`
  runs the commands written inside the comment instead (a long training in a reduced
  form, declared in the page); `<!-- shell: not-run: reason -->` says why it is not
  run (an installation, a cluster). An undeclared block fails, so nothing goes stale
  unnoticed. Commands run in one temporary directory per page, with the repository's
  examples/, benchmarks/ and tinygrad_tx/ and models/ reachable as in a checkout.
- A measured figure is never retyped: `<!-- include: results/NAME.txt -->` before a
  ```text block (or `<!-- include: results/NAME.md -->` ... `<!-- end include -->` around
  a markdown table) says the block is that file, which the benchmark script wrote
  (`--write-docs`, see benchmarks/report.py); it must equal the file word for word.
"""
from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

import tinygrad_tx as tx

ROOT = Path(__file__).resolve().parents[2]
# docs/results holds the tables the benchmarks write (each starts "Measured ...") and the pages
# that narrate them, which are pages like the others
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *(p for p in sorted((ROOT / "docs" / "results").glob("*.md")) if not p.read_text().startswith("Measured"))]
SHELL = re.compile(r"(?:<!--\s*shell:\s*(?P<how>run-instead|run|not-run)(?P<arg>.*?)-->\s*\n)?```bash\n(?P<body>.*?)```",
                   re.S)
INCLUDE = re.compile(r"<!--\s*include:\s*(?P<file>\S+)\s*-->\s*\n(?:```text\n(?P<body>.*?)```"
                     r"|(?P<markdown>.*?)<!-- end include -->)", re.S)
LINKED = ["examples", "benchmarks", "tinygrad_tx", "models", "pyproject.toml"]


class Printing(PythonEvaluator):
    """Runs a python block and keeps what it printed, for the ```output block after it."""

    def __call__(self, example):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = super().__call__(example)
        example.namespace["_printed"] = out.getvalue()
        return result


def compare_output(example) -> str | None:
    printed = example.namespace.pop("_printed", None)
    if printed is None:
        return "an ```output block must follow a ```python block that runs"
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    if not checker.check_output(example.parsed, printed, flags):
        return f"the page shows:\n{example.parsed}\nthe code printed:\n{printed}"
    return None


def sybil_for(page: Path) -> Sybil:
    python = PythonCodeBlockParser()
    python.codeblock_parser = CodeBlockParser("python", Printing(()))
    return Sybil(parsers=[python, CodeBlockParser("output", compare_output), SkipParser()], path=str(page.parent),
                 patterns=[page.name])


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_python_blocks_run_and_print_what_the_page_shows(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files a snippet writes land here, not in the checkout
    tx.manual_seed(0)  # as in a reader's fresh session, whichever tests ran before in this one
    document = sybil_for(page).parse(page)
    for example in document.examples():
        try:
            example.evaluate()
        except Exception as e:  # noqa: BLE001 - re-raised with the page and line
            raise AssertionError(f"{page.name}, line {example.line}: {e}") from e


def shell_blocks(page: Path) -> list[tuple[int, str, str, str]]:
    text = page.read_text()
    return [(text[: m.start()].count("\n") + 1, m["how"], (m["arg"] or "").strip(), m["body"])
            for m in SHELL.finditer(text)]


def commands(how: str, arg: str, body: str) -> list[str]:
    lines = arg.splitlines()[1:] if how == "run-instead" else body.splitlines()
    return [line.split(" #")[0].strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_shell_block_is_declared_and_the_declared_ones_run(page: Path, tmp_path):
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    # `python` in a command is this interpreter, found first on PATH
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    for line, how, arg, body in shell_blocks(page):
        assert how, f"{page.name}, line {line}: a ```bash block without a <!-- shell: ... --> declaration"
        if how == "not-run":
            assert arg.lstrip(":").strip(), f"{page.name}, line {line}: not-run needs a reason"
            continue
        for command in commands(how, arg, body):
            done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, (f"{page.name}, line {line}: `{command}` exited {done.returncode}\n"
                                          f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_included_results_are_the_files_the_benchmarks_wrote(page: Path):
    for m in INCLUDE.finditer(page.read_text()):
        source = page.parent / m["file"]
        assert source.is_file(), f"{page.name} includes {m['file']}, which does not exist"
        shown = m["body"] if m["body"] is not None else m["markdown"]
        assert shown == source.read_text(), (f"{page.name}: the block after <!-- include: {m['file']} --> differs "
                                             "from the file; paste it with `python benchmarks/report.py`")
