"""The training view's weights and gradients over training, per layer: from the run's records
(layer_stats.jsonl, which `train` appends at each validation) or, for a run that has none, from
its `--snapshots`, with the gradient of the explorer's batch at each.

Per layer (a module: its weight and bias together), at each record: the norms of its weights
and of its gradients, and its change per step against its weight, ‖Δw‖ / ‖w‖ / (steps between
records): the mean update-to-weight ratio of those steps. And each parameter's histograms of
weights and gradients at each record, as TensorBoard's distributions show them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from .explore_files import stamp
from .layer_stats import STATS, read_records


def over_training(directory: Path, checkpoints: Any, stats_of: Callable[[Any, dict | None], dict], cache: dict) -> dict:
    """What the training view draws: the run's records, or where it has none, its snapshots'
    statistics (`stats_of(model, the previous snapshot's weights)`, as `layer_stats.parameter_stats`;
    kept in `cache` while the snapshots stay as they are)."""
    directory = Path(directory)
    records, skipped = read_records(directory / STATS)
    source = f"recorded by train at each validation ({STATS}): the gradient of the last training step"
    if not records:
        snapshots = [name for name in checkpoints.names() if name.startswith("snapshots/")]
        if not checkpoints.names():
            return {"steps": [], "note": "no statistics over training yet: train records them at each validation"}
        if len(snapshots) < 2:
            return {"steps": [], "note": "no statistics over training: this run neither recorded them (it was "
                                         f"trained before {STATS} existed) nor kept --snapshots"}
        versions = tuple((name, stamp(directory / name)) for name in snapshots)
        if cache.get("versions") != versions:
            cache.update(versions=versions, records=_from_snapshots(snapshots, checkpoints, stats_of))
        records = cache["records"]
        source = "computed from the run's snapshots: the gradient of the explorer's batch at each"
    if skipped:
        lines = f"{skipped} lines of {STATS} did not read and are" if skipped > 1 else f"a line of {STATS} did not read and is"
        source += f"; {lines} left out"
    return {"source": source, **by_layer(records)}


def _from_snapshots(snapshots: list[str], checkpoints: Any,
                    stats_of: Callable[[Any, dict | None], dict]) -> list[dict]:
    records, before = [], None
    for name in snapshots:
        model, about = checkpoints.get(name, "the statistics over training")
        records.append({"step": about["step"], "since": before[0] if before else None,
                        "params": stats_of(model, before[1] if before else None)})
        before = (about["step"], {n: p.numpy() for n, p in model.named_parameters()})
    return records


def by_layer(records: list[dict]) -> dict:
    """Per layer (the module holding a parameter), at each record: the norms of its weights and
    gradients, and its change per step against its weight; and each parameter's histograms."""
    names = list(records[-1]["params"])
    layers: dict[str, list[str]] = {}
    for name in names:
        layers.setdefault(name.rsplit(".", 1)[0], []).append(name)

    def norm(record: dict, params: list[str], key: str) -> float | None:
        values = [(record["params"].get(p) or {}).get(key) for p in params]
        values = [v.get("norm") if isinstance(v, dict) else v for v in values]
        return None if any(v is None for v in values) else float(np.sqrt(sum(v * v for v in values)))

    def ratio(record: dict, params: list[str]) -> float | None:
        change, weight = norm(record, params, "change"), norm(record, params, "w")
        if change is None or not weight or record.get("since") is None or record["step"] <= record["since"]:
            return None
        return change / weight / (record["step"] - record["since"])

    rows = [{"name": layer, "params": params,
             "w_norm": [norm(r, params, "w") for r in records], "g_norm": [norm(r, params, "g") for r in records],
             "ratio": [ratio(r, params) for r in records]} for layer, params in layers.items()]
    hist = {name: {key: [_histogram((r["params"].get(name) or {}).get(key)) for r in records] for key in ("w", "g")}
            for name in names}
    return {"steps": [r["step"] for r in records], "layers": rows, "hist": hist}


def _histogram(stats: dict | None) -> dict | None:
    if not stats or not stats.get("hist"):
        return None
    return {"lo": stats["lo"], "hi": stats["hi"], "counts": stats["hist"]}
