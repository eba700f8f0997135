"""How `train` stops when asked: Ctrl-C, SIGTERM, or the end of the process that started it.

A run asked to stop finishes the step it is in, saves last.npz and exits with status 130, so
that `train --resume` goes on from there as if it had never stopped (training.py). Two signals
ask: SIGINT (Ctrl-C at a terminal, `kill -INT`) and SIGTERM (`kill`, a job scheduler's stop).

The process a user starts owns the processes it starts (launch.py): `train --members N` or
`--processes N` runs `mpiexec`, which runs the ranks. So that a signal to that one process is
enough, mpiexec runs in a session of its own (a terminal's Ctrl-C reaches the user's process
alone) and the user's process hands every SIGINT or SIGTERM on to it as one SIGINT, which
mpiexec passes to every rank (a second one makes it end them at once, as a second Ctrl-C
would). And should the user's process end without a word (SIGKILL, a crash, a closed terminal),
the kernel sends mpiexec a SIGINT (Linux's PR_SET_PDEATHSIG): no rank outlives it by more than
the step it saves.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from typing import Callable, Iterator

STOPS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


@contextlib.contextmanager
def handled(handler: Callable) -> Iterator[None]:
    """Inside, SIGINT and SIGTERM call `handler(number, frame)`; outside, they do what they did before."""
    previous = {number: signal.signal(number, handler) for number in STOPS}
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


@contextlib.contextmanager
def stop_requests() -> Iterator[list]:
    """Inside, SIGINT and SIGTERM only note that a stop was asked for, in the list this yields
    (the training loop looks at it before each step); outside, they do what they did before."""
    asked: list[int] = []
    with handled(lambda number, frame: asked.append(number)):
        yield asked


def stops_interrupt() -> contextlib.AbstractContextManager:
    """Inside, SIGINT and SIGTERM raise KeyboardInterrupt, as Ctrl-C does, whatever this process
    was started with: a shell starts a background job (`train ... &` in a script) with SIGINT
    ignored, and training answers it anyway (`stop_requests`), so the steps after training do too."""
    return handled(signal.default_int_handler)


def owned(command: list[str], env: dict) -> subprocess.Popen:
    """Start `command` (mpiexec) as a process this one owns: in a session of its own, reading
    nothing, and sent SIGINT by the kernel when this process ends."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None  # for prctl
    parent = os.getpid()

    def end_with_parent() -> None:  # in the child, between fork and exec
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != parent:  # this process ended before prctl: start nothing
            os._exit(130)

    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=end_with_parent)


def stops_passed_on(job: subprocess.Popen) -> contextlib.AbstractContextManager:
    """Inside, SIGINT and SIGTERM to this process each send `job` one SIGINT."""
    return handled(lambda number, frame: job.send_signal(signal.SIGINT))
