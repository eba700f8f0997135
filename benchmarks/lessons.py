"""The README's table of lessons, from the lessons' own runs: what each reaches, and how long it takes.

Each examples/lesson_*.py runs as a script, as a user runs it (full mode; `--quick` for
CI's short mode), in a fresh process and a temporary folder. The table gives the seed
the lesson follows (from its title), the one line it prints as `RESULT:` (measured in
that run), its checks, and its wall and CPU time, with the load average it ran beside.
A lesson that fails a check, or skips one because its truth is not installed (PyTorch:
`pip install -e ".[lessons]"`), stops the script, and nothing is written.

    python benchmarks/lessons.py [--quick] [--lessons 000,004] [--write-docs]

`--write-docs` writes docs/results/lessons.md, which README.md and docs/tutorials.md
include; `python benchmarks/report.py` pastes it into them.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import written_to_docs
from tasks import children_cpu

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LESSONS = sorted(EXAMPLES.glob("lesson_0*.py"))


class LessonFailed(RuntimeError):
    """A lesson exited non-zero, skipped a check, or printed no RESULT line."""


def run(lesson: Path, quick: bool, folder: str) -> dict:
    """Run one lesson; its RESULT line, its checks' summary, wall and CPU seconds."""
    command = [sys.executable, str(lesson), "--out", folder] + (["--quick"] if quick else [])
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    lines = done.stdout.splitlines()
    result = [line.removeprefix("RESULT: ") for line in lines if line.startswith("RESULT: ")]
    summary = lines[-1] if lines else ""
    if done.returncode or not re.fullmatch(r"all \d+ checks passed", summary) or len(result) != 1:
        raise LessonFailed(f"{lesson.name} exited {done.returncode}, ending {summary!r}:\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {"result": result[0], "checks": summary.removeprefix("all ").removesuffix(" passed"),
            "wall_s": wall, "cpu_s": cpu}


def follows(lesson: Path) -> str:
    """The seed a lesson follows, from its title: "# # ... (seed 002: a decoder-only transformer)"."""
    title = lesson.read_text(encoding="utf-8").splitlines()[1]
    return re.search(r"\((seed \d+: .*)\)\s*$", title)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the lessons' short CI mode")
    parser.add_argument("--lessons", default=",".join(p.name[7:10] for p in LESSONS), help="e.g. 000,004")
    args = parser.parse_args()
    chosen = [p for p in LESSONS if p.name[7:10] in args.lessons.split(",")]
    print("| lesson | follows | result, checked against an independent truth | checks | time | CPU time |")
    print("|---|---|---|---|---|---|")
    loads = [os.getloadavg()[0]]
    for lesson in chosen:
        with tempfile.TemporaryDirectory() as folder:
            r = run(lesson, args.quick, folder)
        loads.append(os.getloadavg()[0])
        print(f"| `{lesson.name}` | {follows(lesson)} | {r['result']} | {r['checks']} passed | {r['wall_s']:.0f} s "
              f"| {r['cpu_s']:.0f} s |", flush=True)
    print(f"\n{'Quick' if args.quick else 'Full'} mode, one BLAS thread; load average (1 min) "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores while they ran.")


if __name__ == "__main__":
    with written_to_docs("lessons", markdown=True):
        try:
            main()
        except LessonFailed as e:
            sys.exit(f"error: {e}")
