"""Each layer's weights and gradients over training: a small record at every validation.

`record(directory, step, model)` is the one call `train` makes at each validation: it appends
to layer_stats.jsonl, per parameter, a few numbers of its weight and of the gradient the
last training step left in `.grad` (the one the optimizer used, after clipping): the L2
norm, mean, standard deviation and a HIST_BINS-bin histogram between the lowest and the
highest value; and how far the weight moved since the previous record, ‖w − w_prev‖ (the
weights of that record are kept in memory until the next). That is a few hundred bytes a
parameter: cheap next to the validation itself. The explorer's training view draws them
(explore_stats.py).
"""
from __future__ import annotations

import json
import math
import weakref
from pathlib import Path
from typing import Any

import numpy as np

STATS = "layer_stats.jsonl"
HIST_BINS = 30
_previous: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""model -> its weights (host copies, by name) at its last record, for the change to the next one."""


def array_stats(a: np.ndarray) -> dict:
    """norm, mean, std over the finite values, a HIST_BINS-bin histogram from lo to hi, and how many
    values are not finite (a run that diverged)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    finite = a[np.isfinite(a)]
    if not finite.size:
        return {"norm": None, "mean": None, "std": None, "lo": None, "hi": None, "hist": [], "nonfinite": int(a.size)}
    lo, hi = float(finite.min()), float(finite.max())
    counts, _ = np.histogram(finite, bins=HIST_BINS, range=(lo, hi) if hi > lo else (lo - 0.5, hi + 0.5))
    return {"norm": _short(np.sqrt((finite ** 2).sum())), "mean": _short(finite.mean()), "std": _short(finite.std()),
            "lo": lo if hi > lo else lo - 0.5, "hi": hi if hi > lo else hi + 0.5, "hist": counts.tolist(),
            "nonfinite": int(a.size - finite.size)}


def _short(x: float) -> float:
    """`x` to 7 significant digits (float32's): the record's numbers, half as long."""
    return float(f"{float(x):.7g}")


def parameter_stats(model: Any, previous: dict[str, np.ndarray] | None = None) -> dict:
    """{name: {"w", "g", "change"}} of each parameter of `model`: `w` and `g` as `array_stats`
    (g None where no gradient is kept) and ‖w − previous[name]‖ (None without a previous)."""
    out = {}
    for name, p in model.named_parameters():
        w = p.numpy()
        before = (previous or {}).get(name)
        change = float(np.linalg.norm((w - before).astype(np.float64))) if before is not None else None
        out[name] = {"w": array_stats(w), "g": None if p.grad is None else array_stats(p.grad.numpy()),
                     "change": change}
    return out


def record(directory: Path, step: int, model: Any) -> None:
    """Append the statistics of `model`'s parameters at `step` to `directory`/layer_stats.jsonl."""
    last = _previous.get(model)
    params = parameter_stats(model, last[1] if last else None)
    line = {"step": int(step), "since": last[0] if last else None, "params": params}
    with open(Path(directory) / STATS, "a") as f:
        f.write(json.dumps(line, allow_nan=False) + "\n")  # one write: a line is there whole, or cut short
    _previous[model] = (int(step), {name: p.numpy() for name, p in model.named_parameters()})


def read_records(path: Path) -> tuple[list[dict], int]:
    """The records of layer_stats.jsonl in step order, and how many lines did not read (cut short
    by a crash, or not a record). Where the steps go back (a run resumed from an earlier
    checkpoint), the records from that step on are the resumed run's."""
    if not path.is_file():
        return [], 0
    kept: list[dict] = []
    skipped = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not _is_record(entry):
            skipped += 1
            continue
        kept = [r for r in kept if r["step"] < entry["step"]] + [entry]
    return kept, skipped


def _is_record(entry: Any) -> bool:
    """A record as `record` writes it: whole steps, finite numbers, histograms of counts."""
    if not (isinstance(entry, dict) and _whole(entry.get("step")) and isinstance(entry.get("params"), dict)
            and (entry.get("since") is None or _whole(entry["since"]))):
        return False
    for stats in entry["params"].values():
        if not (isinstance(stats, dict) and _number_or_none(stats.get("change"))):
            return False
        for part in [stats.get("w")] + ([stats["g"]] if stats.get("g") is not None else []):  # g may be None
            numbers = ("norm", "mean", "std", "lo", "hi")
            if not (isinstance(part, dict) and all(_number_or_none(part.get(k)) for k in numbers)
                    and isinstance(part.get("hist"), list) and len(part["hist"]) <= HIST_BINS
                    and all(_whole(c) for c in part["hist"])):
                return False
    return True


def _whole(v: Any) -> bool:
    return type(v) is int and v >= 0


def _number_or_none(v: Any) -> bool:
    return v is None or (type(v) in (int, float) and math.isfinite(v))
