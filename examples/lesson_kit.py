"""What the lessons share: their command line, a training update, their final checks, their pictures.

Each lesson runs as a script (`python examples/lesson_....py --out DIR [--quick]`)
or cell by cell as a notebook (`# %%` cells: Jupyter with jupytext, or VS Code), where
its pictures also appear inline. Its last cell compares what it computed with an
independent truth, says which checks passed and which could not run (and what to
install for them), and exits non-zero when a check fails, so that
`tests/examples/test_lessons.py` can run it as CI does. Its one-line `RESULT:` is what
`benchmarks/lessons.py` puts in the README's table of lessons.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]  # the checkout

if TYPE_CHECKING:
    from tinygrad_tx import Tensor
    from tinygrad_tx.optim import Optimizer
    from tinygrad_tx.schedules import LRSchedule


def options(description: str, default_out: str) -> argparse.Namespace:
    """`--out DIR` for the pictures (made if missing) and `--quick` (or LESSONS_QUICK=1) for CI.

    Unknown arguments are ignored, so the same cell runs inside Jupyter, which passes its own.
    NumPy's BLAS gets one thread: the lessons' matrices are small, and two threads on a busy
    2-core machine spin against each other (see benchmarks/threads.py).
    """
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")
    except ImportError:
        pass
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path(default_out), help="folder for the pictures")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("LESSONS_QUICK") == "1",
                        help="a short run for CI that still checks the result's direction")
    args, _ = parser.parse_known_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


TORCH = "torch"
LESSONS_INSTALL = 'pip install -e ".[lessons]"'  # brings torch (pinned: the CPU build here), see pyproject.toml


class Checks:
    """The lesson's verdicts, one line each: `check(name, ok, detail)`, or `check.skip(name, needs)`
    for a check whose truth (`needs`, a package) is not installed. `finish()` sums them up, never
    calling a skipped check passed, and exits 1 if any failed."""

    def __init__(self):
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.skipped: dict[str, str] = {}  # check -> the package it needs

    def __call__(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"CHECK {'pass' if ok else 'FAIL'}: {name}" + (f" ({detail})" if detail else ""))
        (self.passed if ok else self.failed).append(name)

    def skip(self, name: str, needs: str) -> None:
        print(f"CHECK skip: {name} ({needs} is not installed)")
        self.skipped[name] = needs

    def finish(self) -> None:
        if self.failed:
            print(f"{len(self.failed)} check(s) failed: {', '.join(self.failed)}")
            sys.exit(1)
        if self.skipped:
            needs = ", ".join(sorted(set(self.skipped.values())))
            print(f"{len(self.passed)} passed, {len(self.skipped)} skipped: install {needs} to run them "
                  f"({LESSONS_INSTALL})")
        else:
            print(f"all {len(self.passed)} checks passed")


def result(text: str) -> None:
    """The lesson's outcome in one line, measured in this run: the README's table of lessons shows it."""
    print(f"RESULT: {text}")


def update(loss: Tensor, optimizer: Optimizer, schedule: LRSchedule) -> float:
    """One training step after the forward pass: clear the old gradients, backpropagate, let the
    optimizer move the weights, set the next learning rate. Returns the loss as a number."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    return loss.item()


def pyplot():
    """matplotlib's pyplot drawing to files (`show` puts them inline in a notebook), or None when
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, so no pictures: pip install "tinygrad-tx[viz]"')
        return None
    return plt


def show(fig, path: Path) -> Path:
    """Save `fig` to `path` and close it; in a notebook, also show the picture under its cell."""
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
    print(f"picture: {path}")
    if "ipykernel" in sys.modules:  # a Jupyter kernel runs this cell
        from IPython.display import Image, display

        display(Image(filename=str(path)))
    return path


def heatmaps(matrices: np.ndarray, path: Path, titles: Sequence[str], rows: Sequence[str] = (),
             cols: Sequence[str] = (), suptitle: str = "", cmap: str = "viridis", annotate: bool = False,
             vmin: float | None = None, vmax: float | None = None, per_row: int = 5) -> Path | None:
    """Draw the matrices (n, R, C), `per_row` to a row, rows and columns labelled; None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    n, R, C = matrices.shape
    grid = (-(-n // per_row), min(n, per_row))  # (rows, columns) of pictures
    scale = max(R, C) / 12 + 0.8
    fig, axes = plt.subplots(*grid, figsize=(3.4 * grid[1] * scale + 1, (3.0 * scale + 0.6) * grid[0]),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, matrix, title in zip(axes.flat, matrices, titles):
        image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        if len(cols):
            ax.set_xticks(range(C), cols, rotation=90, fontsize=8)
        if len(rows):
            ax.set_yticks(range(R), rows, fontsize=8)
        ax.set_title(title, fontsize=9)
        if annotate:
            for i in range(R):
                for j in range(C):
                    light = image.norm(matrix[i, j]) > 0.5  # dark text on the light cells
                    ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", color="k" if light else "w",
                            fontsize=7)
    fig.colorbar(image, ax=list(axes.flat), shrink=0.8)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return show(fig, path)
