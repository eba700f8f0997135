"""What each built-in task reaches, and how long it trains: the table of docs/translate.md.

Each task is trained by the command a user types, `python -m models train --task T`
(into a temporary run directory), in a fresh process; the table gives its held-out
exact match and BLEU as `train` reports them (the decoding it chose), the probe's exact match for the
tasks that have one (`python -m models tasks --probe T`, scored by `evaluate`), and the
wall and CPU time of the training command. Run it alone: the times are the machine's.

    python benchmarks/tasks.py [--tasks copy,reverse,sort,numbers,dates,grammar] [--write-docs]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

from report import written_to_docs

TASKS = ["copy", "reverse", "sort", "numbers", "dates", "grammar"]
PROBES = {"numbers", "dates"}


def models(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "models", *args], capture_output=True, text=True, check=True,
                          **kwargs)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(task: str, tmp: str) -> dict:
    out = os.path.join(tmp, task)
    cpu, start = children_cpu(), time.perf_counter()
    done = models("train", "--task", task, "--out", out)
    row = {"wall_s": time.perf_counter() - start, "cpu_s": children_cpu() - cpu}
    report = re.search(r"held-out test .*?exact match ([\d.]+)%.*?BLEU ([\d.]+)", done.stdout + done.stderr)
    row["exact"], row["bleu"] = (float(report[1]), float(report[2])) if report else (float("nan"),) * 2
    if task in PROBES:
        probe = os.path.join(tmp, f"{task}-probe.tsv")
        with open(probe, "w") as f:
            f.write(models("tasks", "--probe", task).stdout)
        scores = json.loads(models("evaluate", "--run", out, "--data", probe, "--json").stdout)
        row["probe"] = f"{scores['exact_match']:.1f}% of {scores['n']}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    args = parser.parse_args()
    print("| task | held-out exact match | BLEU | probe exact match | training wall time | CPU time |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks.split(","):
            r = measure(task, tmp)
            print(f"| `{task}` | {r['exact']:.1f}% | {r['bleu']:.1f} | {r.get('probe', '—')} | {r['wall_s']:.0f} s "
                  f"| {r['cpu_s']:.0f} s |", flush=True)


if __name__ == "__main__":
    with written_to_docs("tasks", markdown=True):
        main()
