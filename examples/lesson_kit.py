"""What the lessons share: their command line, a training update, their final checks, their heat-maps.

Each lesson runs as a script (`python examples/lesson_....py --out DIR [--quick]`)
or cell by cell (`# %%` cells, for Jupyter with jupytext or VS Code). Its last
cell compares what it computed with an independent truth and exits non-zero when
a check fails, so that `tests/examples/test_lessons.py` can run it as CI does.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]  # the checkout (a notebook has no __file__ of its own)
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

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


class Checks:
    """The lesson's verdicts: `check(name, ok, detail)` prints one line each; `finish()` exits 1 if any failed."""

    def __init__(self):
        self.failed: list[str] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"CHECK {'pass' if ok else 'FAIL'}: {name}" + (f" ({detail})" if detail else ""))
        if not ok:
            self.failed.append(name)

    def finish(self) -> None:
        if self.failed:
            print(f"{len(self.failed)} check(s) failed: {', '.join(self.failed)}")
            sys.exit(1)
        print("all checks passed")


def update(loss: Tensor, optimizer: Optimizer, schedule: LRSchedule) -> float:
    """One training step after the forward pass: clear the old gradients, backpropagate, let the
    optimizer move the weights, set the next learning rate. Returns the loss as a number."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    return loss.item()


def pyplot():
    """matplotlib's pyplot drawing to files only, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, so no pictures: pip install "tinygrad-tx[viz]"')
        return None
    return plt


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
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"picture: {path}")
    return path
