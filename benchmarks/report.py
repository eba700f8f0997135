"""Each benchmark's printed result, kept as the file the docs show verbatim.

`python benchmarks/X.py --write-docs` runs as usual and also writes what it printed to
`docs/results/X.txt`, under one line that says when, on what machine and by which command
it was measured. docs/benchmarks.md includes these files word for word (the doc tests
check it), so a figure is never retyped and no two copies of it can disagree;
`python benchmarks/report.py` pastes the files into the pages that include them.
"""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import platform
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def machine() -> str:
    """"2 cores, Intel(R) Xeon(R) ..., Linux, load 0.31": what the figures were measured on, and how busy
    it was when the measurement began (the 1-minute load average: 2.0 on 2 cores means both were taken)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()}, load {os.getloadavg()[0]:.2f}"


@contextlib.contextmanager
def written_to_docs(name: str, markdown: bool = False):
    """Print as usual; with `--write-docs` among the arguments (taken out of sys.argv before the
    script parses them), also write the output to docs/results/<name>.txt, or, for a script that
    prints a markdown table, to <name>.md, which a page includes as markdown."""
    if "--write-docs" not in sys.argv:
        yield
        return
    sys.argv.remove("--write-docs")
    printed = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            sys.__stdout__.write(text)
            return printed.write(text)

    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    command += " --write-docs"
    when = f"{datetime.date.today().isoformat()}, {machine()}"  # before the run, whose own work raises the load
    with contextlib.redirect_stdout(Tee()):
        yield
    header = f"Measured {when}: `{command}`\n\n" if markdown else f"# {when}: {command}\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    for_people = "".join(line for line in printed.getvalue().splitlines(True) if not line.startswith("{"))
    (RESULTS / f"{name}.{'md' if markdown else 'txt'}").write_text(header + for_people)  # no JSON record


def paste_into_pages() -> None:
    """Put each docs/results file into the pages that include it (`<!-- include: results/X.txt -->`
    before a ```text block, or `<!-- include: results/X.md -->` ... `<!-- end include -->` around
    markdown; README.md says docs/results/X), word for word: `python benchmarks/report.py` after a
    --write-docs run."""
    import re

    include = re.compile(r"(<!--\s*include:\s*(\S+)\s*-->\s*\n(?:```text\n)?)(.*?)(```|<!-- end include -->)", re.S)
    for page in [RESULTS.parents[1] / "README.md", *sorted(RESULTS.parent.glob("*.md")), *sorted(RESULTS.glob("*.md"))]:
        text = page.read_text()

        def pasted(m: re.Match) -> str:
            source = page.parent / m[2]
            return m[1] + (source.read_text() if source.is_file() else m[3]) + m[4]

        new = include.sub(pasted, text)
        if new != text:
            page.write_text(new)
            print("pasted into", page.relative_to(RESULTS.parents[1]))


if __name__ == "__main__":
    paste_into_pages()
