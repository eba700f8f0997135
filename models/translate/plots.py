"""Pictures of a run: learning curves and cross-attention heatmaps (matplotlib, optional).

Without matplotlib these return False instead of failing: pictures are a bonus,
never a reason for a training run to crash. A picture is written whole or not at all
(`write_atomically`): a full disk leaves no empty or half-drawn file behind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from tinygrad_tx.files import check_output_path, write_atomically

from .run import read_metrics


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: works without a screen
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_curves(run_dir: Path) -> bool:
    """curves.png: training loss and validation accuracy against the step."""
    plt = _pyplot()
    if plt is None:
        return False
    records = read_metrics(run_dir / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if "valid_exact_match" in r and "averaged" not in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot([r["step"] for r in train], [r["loss"] for r in train])
    left.set(xlabel="step", ylabel="training loss (label-smoothed)", yscale="log", title="loss")
    for key, label in (("valid_exact_match", "exact match"), ("valid_token_accuracy", "token accuracy")):
        right.plot([r["step"] for r in valid], [r[key] for r in valid], marker="o", label=label)
    right.set(xlabel="step", ylabel="% of validation set", ylim=(0, 101), title="validation")
    right.legend(loc="lower right")
    fig.tight_layout()
    save(plt, fig, run_dir / "curves.png", dpi=100)
    return True


def check_picture_path(path: str | Path) -> None:
    """Refuse, before any work is done, a picture path that `plot_attention` could not write."""
    path = Path(path)
    check_output_path(path, "--attention")  # a picture already there is replaced, as by any drawing program
    plt = _pyplot()
    if plt is None:
        return  # no picture will be drawn; `translate` says so
    figure = plt.figure()
    kinds = figure.canvas.get_supported_filetypes()  # what savefig writes, by file name ending
    plt.close(figure)
    if path.suffix.lower().lstrip(".") not in kinds:
        raise ValueError(f"--attention {path}: the file name must end in one of "
                         f"{', '.join('.' + kind for kind in sorted(kinds))}")


def plot_attention(weights: np.ndarray, source: Sequence[str], output: Sequence[str], path: str | Path) -> bool:
    """One heatmap per head: which source token each generated token looked at.

    `weights`: (heads, len(output), len(source)) cross-attention of one sentence.
    """
    plt = _pyplot()
    if plt is None:
        return False
    heads = weights.shape[0]
    cols = min(heads, 4)
    rows = -(-heads // cols)
    scale = max(len(source), len(output)) / 12 + 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols * scale, 3.0 * rows * scale), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(weights[h], cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(source)), [repr(t)[1:-1] for t in source], rotation=90, fontsize=8)
        ax.set_yticks(range(len(output)), [repr(t)[1:-1] for t in output], fontsize=8)
        ax.set_title(f"head {h}", fontsize=9)
    fig.suptitle("cross-attention, last decoder layer (rows: generated, columns: source)", fontsize=9)
    fig.tight_layout()
    save(plt, fig, Path(path), dpi=110)
    return True


def save(plt, fig, path: Path, dpi: int) -> None:
    """`fig` as a picture file in the format its name ends in, written whole or not at all; then closed."""
    try:
        write_atomically(path, lambda f: fig.savefig(f, format=path.suffix.lstrip(".").lower(), dpi=dpi))
    finally:
        plt.close(fig)
