"""Fixtures of the explorer's tests: a tiny trained run (and a diverged copy of it), and an explorer
serving in a thread."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from tinygrad_tx.inspect.explorer import Explorer
from tinygrad_tx.inspect.explorer.access import host_header

REPO = Path(__file__).resolve().parents[3]
TINY = ["--steps", "300", "--eval-every", "100", "--d-model", "32", "--num-heads", "2",
        "--num-encoder-layers", "1", "--num-decoder-layers", "1",
        "--d-ff", "64", "--n-train", "2000", "--batch-size", "32", "--lr", "3e-3", "--log-every", "10"]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "models", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A run of the reverse task that trains in seconds (and then reverses short strings), once per session."""
    out = tmp_path_factory.mktemp("explore") / "reverse"
    done = run_cli("train", "--task", "reverse", "--out", str(out), "--snapshots", *TINY)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def diverged_run(tiny_run, tmp_path_factory) -> Path:
    """A copy of the tiny run as a run that diverged leaves it: NaN and inf in its weights and its log."""
    from models import Transformer

    run = tmp_path_factory.mktemp("diverged") / "run"
    shutil.copytree(tiny_run, run)
    for name in ("best.npz", "last.npz"):
        model = Transformer.load(run / name)
        model.out.bias.data[:] = np.nan  # every score NaN
        model.encoder.embed.tokens.weight.data[4, :2] = [np.inf, -np.inf]
        model.save(run / name, step=300)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 310, "loss": float("nan"), "lr": float("inf"), "tokens_per_s": 1}) + "\n")
    return run


@contextmanager
def serving(explorer: Explorer, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `explorer` on a free port of `host` in a thread; yields the page's address."""
    server = explorer.server(host, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host_header(host, server.server_address[1])}"
    finally:
        explorer.stopping.set()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def run_explorer(tiny_run):
    from models.translate.explore import open_explorer

    return open_explorer(tiny_run)


@pytest.fixture(scope="session")
def run_url(run_explorer) -> Iterator[str]:
    with serving(run_explorer) as url:
        yield url


def strict(body: bytes):
    """The JSON of an answer, refusing what strict JSON has not (NaN, Infinity)."""
    def refuse(token: str):
        raise ValueError(f"not strict JSON: {token}")
    return json.loads(body, parse_constant=refuse)
