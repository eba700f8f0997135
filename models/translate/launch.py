"""`train` on every idle core: a corpus run starts its own processes, one model each.

`mpiexec -n N python -m models train ...` trains on N processes (training.py), but a user
with a free laptop should not have to know that to use its cores. So `train --data`, started
by hand, counts the cores that are idle and, when more than one is, starts itself again
under `mpiexec`, one process per idle core, each with one BLAS thread, and waits for them.
On a busy machine it stays one process with one thread, as before: more processes than
free cores would only take turns, and slow both the run and whatever else is running
(the reason for one BLAS thread: docs/benchmarks.md, the threads table).

What the processes do depends on how often a model would see the corpus (`cli.choose_processes`).
Where each would make many epochs, each trains a model of its own, and the run translates with
their ensemble (`--members`): on the 18k-pair Tatoeba list (docs/results/translate-experiments.md,
"What ten minutes buy") two data-parallel processes made 10,300 target tokens a second together, where one
process alone makes 8,000, so a second model gets more out of the second core than a faster
first one (the first learns its pairs by heart before its ten minutes end), and two models'
ensemble scored 1 to 2 BLEU above one model on two such lists. Where a model would see the
corpus only a few times, the processes train one model, data-parallel (`--processes N`): the
1.7 times the tokens a second that one model of the ensemble gets (5,600 against 3,250 on a
76k-pair list) matter more than a second opinion (on 38k and 76k pairs it scored 2.4 and 5.3
BLEU above the ensemble). A toy task stays one process and one model unless told
otherwise (its model is too small to gain from data parallelism, docs/distributed.md, and right
already).

The processes started here take the budget of `--time` from when this command began
(`STARTED`, in the environment they inherit).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time

from .budget import FINAL_SHARE
from .interrupts import owned, stops_passed_on

INSTALL_HINT = 'pip install "tinygrad-tx[dist]"'
STARTED = "TINYGRAD_TX_TRAIN_STARTED"
"""The environment variable that hands the processes `mpiexec` starts the time this command began."""
IDLE = 0.75
"""A core counts as idle if it was at least this idle over the sample."""
SAMPLE_S = 0.5


def idle_cores(sample_s: float = SAMPLE_S) -> int:
    """How many of the cores this process may run on were idle (>= IDLE of the time) over
    `sample_s` seconds, from /proc/stat (Linux); elsewhere 1, which keeps `train` to one process."""
    try:
        allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        with open("/proc/stat") as f:
            before = core_ticks(f.read())
        time.sleep(sample_s)
        with open("/proc/stat") as f:
            after = core_ticks(f.read())
    except (OSError, AttributeError, ValueError):
        return 1
    return max(1, count_idle(before, after, allowed))


def core_ticks(stat: str) -> dict[str, tuple[int, int]]:
    """/proc/stat's text -> (idle, total) clock ticks of each core ("cpu0", ...): idle and iowait
    are idle; user, nice, system, irq, softirq and steal (the hypervisor's) are not."""
    cores = {}
    for line in stat.splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name != "cpu":
            values = list(map(int, ticks[:8]))
            cores[name] = (values[3] + values[4], sum(values))
    return cores


def count_idle(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], allowed: set[str]) -> int:
    """The cores of `allowed` idle for at least IDLE of the ticks between two `core_ticks`."""
    idle = 0
    for core in allowed & before.keys() & after.keys():
        spent = after[core][1] - before[core][1]
        idle += spent > 0 and (after[core][0] - before[core][0]) / spent >= IDLE
    return idle


WIDE = 128
"""The narrowest model (--d-model) that gains from more processes: the corpus defaults' from 3,000 pairs."""
MIN_ROWS = 32
"""The fewest pairs of each batch a process should get: below that its share computes faster
than the gradients are averaged."""


def auto_processes(corpus: bool, d_model: int, batch_size: int) -> int:
    """The processes `train` starts by default: one per idle core for a corpus model of at least
    WIDE, at most one per MIN_ROWS pairs of a batch; else one."""
    if not corpus or d_model < WIDE or batch_size < 2 * MIN_ROWS:
        return 1
    return min(idle_cores(), batch_size // MIN_ROWS)


MAX_MEMBERS = 4
"""The most models `train` trains side by side by default: decoding runs every one of them, so
`translate` and `evaluate` slow down with each, and an ensemble's gain shrinks with its size."""


ENSEMBLE_EPOCHS = 10
"""The fewest epochs each model of an ensemble should make: below, one data-parallel model is the
default. `train --data` as written on three Tatoeba lists, two models against one model on both
cores of the 2-core AMD machine (test BLEU): 18k pairs, 18 epochs a model of the ensemble, 47.5-48.6
against 46.1-46.7 (one model, measured on the Intel machine); 38k pairs, 5 epochs, 37.1 against
39.6; 76k pairs, 3 epochs, 41.7 against 47.0 (docs/results/translate-experiments.md, "The beam's
candidates, and a larger list")."""
STEPS_A_SECOND = 5
"""What a --time run guesses a model of an ensemble makes, to count its epochs before it has timed a
step: the corpus defaults' 128-wide model made 5.3 steps a second of 96 pairs on the AMD machine
(4 with a 3,900-piece vocabulary), about 8 on the Intel one."""


def auto_members(corpus: bool, d_model: int) -> int:
    """The models of the ensemble `train` trains by default: one per idle core, up to MAX_MEMBERS,
    for a corpus model of at least WIDE (where it was measured to pay: a corpus of 3,000 pairs or
    more, each model making at least ENSEMBLE_EPOCHS epochs, which the caller sees to); else one (a
    toy task's model is right already, and would only decode slower)."""
    return min(idle_cores(), MAX_MEMBERS) if corpus and d_model >= WIDE else 1


def epochs_a_model(steps: int, batch_size: int, pairs: int, seconds: float | None) -> float:
    """The epochs a model of an ensemble would make over `pairs`: `steps` of `batch_size`, or with a
    budget of `seconds`, as many as STEPS_A_SECOND fit in its training share, if fewer."""
    if seconds is not None:
        steps = min(steps, int(STEPS_A_SECOND * seconds * (1 - FINAL_SHARE)))
    return steps * batch_size / max(1, pairs)


def mpiexec() -> str | None:
    """The `mpiexec` of this Python's environment (the mpich wheel puts it beside python), else PATH's."""
    return shutil.which("mpiexec", path=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")]))


def can_launch() -> str | None:
    """Why `train` cannot start processes itself, or None if it can."""
    try:
        import mpi4py  # noqa: F401  (only whether it is there)
    except ImportError:
        return "mpi4py is not installed"
    command = mpiexec()
    if command is None:
        return "no mpiexec was found"
    if refuses_root(command):
        return ("Open MPI's mpiexec refuses to run as root (unless OMPI_ALLOW_RUN_AS_ROOT=1 and "
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set)")
    return None


def refuses_root(command: str) -> bool:
    """Whether the mpiexec `command` is Open MPI's, and this process root without Open MPI's two
    permissions: it then starts nothing and prints a page of warning (seen on a GPU machine whose
    image has Open MPI and not the mpich wheel, whose mpiexec `mpiexec()` would prefer)."""
    allowed = os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") and os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
    if getattr(os, "geteuid", lambda: 1)() != 0 or allowed:
        return False
    try:
        done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False  # launching will say what is wrong, in its own words
    said = done.stdout + done.stderr
    return "Open MPI" in said or "OpenRTE" in said


def launch(processes: int, argv: list[str], started: float) -> int:
    """Run `python -m models ARGV` on `processes` processes under mpiexec; its exit status.

    This process owns them (interrupts.py): Ctrl-C, SIGINT or SIGTERM to it stops every rank
    together at a step boundary, saved; and no rank outlives it."""
    env = {**os.environ, STARTED: repr(started)}
    job = owned([mpiexec(), "-n", str(processes), sys.executable, "-m", "models", *argv], env)
    with stops_passed_on(job):
        return job.wait()
