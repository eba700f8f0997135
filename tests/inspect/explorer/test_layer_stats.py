"""Each layer's weights and gradients over training: the record `train` appends at each validation,
read back against NumPy's own norms and histograms, and the training view's answer, from the
record and from a run's snapshots (with the gradient rebuilt here)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import tinygrad_tx as tx
from models import Transformer
from models.translate.explore_stats import by_layer
from models.translate.layer_stats import HIST_BINS, STATS, read_records, record
from tinygrad_tx import nn, optim


def test_a_record_holds_each_parameters_numbers(tmp_path):
    model = nn.Linear(6, 5)
    for p in model.parameters():
        p.grad = tx.Tensor(np.random.default_rng(1).normal(size=p.shape).astype(np.float32))
    record(tmp_path, 100, model)
    first = {name: p.numpy().copy() for name, p in model.named_parameters()}
    model.weight.data[:] += 0.25
    record(tmp_path, 300, model)
    records, skipped = read_records(tmp_path / STATS)
    assert skipped == 0 and [r["step"] for r in records] == [100, 300] and records[1]["since"] == 100
    for name, p in model.named_parameters():
        w, stats = p.numpy(), records[1]["params"][name]
        assert stats["w"]["norm"] == pytest.approx(np.linalg.norm(w), rel=1e-6)
        assert stats["w"]["hist"] == np.histogram(w, bins=HIST_BINS, range=(w.min(), w.max()))[0].tolist()
        assert stats["g"]["norm"] == pytest.approx(np.linalg.norm(p.grad.numpy()), rel=1e-6)
        assert stats["change"] == pytest.approx(np.linalg.norm(w - first[name]), rel=1e-6, abs=1e-12)
    assert records[0]["params"]["weight"]["change"] is None  # nothing to compare the first with


def test_lines_cut_short_are_counted_and_a_resumed_run_takes_over(tmp_path):
    model = nn.Linear(2, 2)
    for step in (100, 200):
        record(tmp_path, step, model)
    with open(tmp_path / STATS, "a") as f:
        f.write('{"step": 300, "params": {"weight": {"w": {"norm": "x"\n')  # a crash mid-line
        f.write('{"step": 150, "since": null, "params": {}}\n')  # resumed from step 150's checkpoint
    records, skipped = read_records(tmp_path / STATS)
    assert [r["step"] for r in records] == [100, 150] and skipped == 1


def test_a_layer_joins_its_weight_and_bias_and_its_ratio_is_per_step():
    stats = lambda norm: {"norm": norm, "mean": 0, "std": 0, "lo": 0, "hi": 1, "hist": [1]}  # noqa: E731
    records = [{"step": 100, "since": None, "params": {"a.weight": {"w": stats(3.0), "g": stats(0.3), "change": None},
                                                      "a.bias": {"w": stats(4.0), "g": stats(0.4), "change": None}}},
               {"step": 200, "since": 100, "params": {"a.weight": {"w": stats(3.0), "g": None, "change": 0.3},
                                                       "a.bias": {"w": stats(4.0), "g": stats(0.4), "change": 0.4}}}]
    layer = by_layer(records)["layers"][0]
    assert layer["name"] == "a" and layer["w_norm"] == [5.0, 5.0]
    assert layer["g_norm"][0] == pytest.approx(0.5) and layer["g_norm"][1] is None  # a gradient missing: no norm
    assert layer["ratio"][0] is None and layer["ratio"][1] == pytest.approx(0.5 / 5.0 / 100)


def test_a_run_records_its_layers_at_each_validation(tiny_run):
    from models.translate.explore import open_explorer

    records, skipped = read_records(tiny_run / STATS)
    assert skipped == 0 and [r["step"] for r in records] == [100, 200, 300]
    last = tx.load(tiny_run / "last.npz")["weights"]
    for name, stats in records[-1]["params"].items():
        assert stats["g"] is not None  # the jitted step leaves the gradients it used
        assert stats["w"]["norm"] == pytest.approx(np.linalg.norm(last[name]), rel=1e-6)
    answer = open_explorer(tiny_run).get["/api/layer_stats"]({})
    assert answer["steps"] == [100, 200, 300] and answer["source"].startswith("recorded by train")
    assert len(answer["layers"]) == 24 and all(len(layer["g_norm"]) == 3 for layer in answer["layers"])


def test_a_run_without_the_record_gets_it_from_its_snapshots(tiny_run, tmp_path):
    from models.text.data import PAD_ID
    from models.translate.explore import RunViews
    from models.translate.explore_files import read_run_files
    import tinygrad_tx.functional as F

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / STATS).unlink()
    views = RunViews(read_run_files(run))
    answer = views.layer_stats({})
    assert answer["steps"] == [100, 200, 300] and answer["source"].startswith("computed from the run's snapshots")
    model = Transformer.load(run / "snapshots" / "step_000300.npz")  # the gradient there, rebuilt here
    src, tgt_in, tgt_out = views.batch
    tx.manual_seed(0)
    model.train()
    loss = F.cross_entropy(model(tx.Tensor(src), tx.Tensor(tgt_in)), tgt_out, ignore_index=PAD_ID,
                           label_smoothing=views.files.settings["settings"]["label_smoothing"])
    loss.backward()
    optim.clip_grad_norm(model.parameters(), views.files.settings["settings"]["clip_norm"])
    out = next(layer for layer in answer["layers"] if layer["name"] == "out")
    expected = np.sqrt(np.linalg.norm(model.out.weight.grad.numpy()) ** 2 + np.linalg.norm(model.out.bias.grad.numpy()) ** 2)
    assert out["g_norm"][-1] == pytest.approx(expected, rel=1e-5)
    weights = [Transformer.load(run / "snapshots" / f"step_000{s}.npz").out for s in (200, 300)]
    change = np.sqrt(sum(np.linalg.norm(b.numpy() - a.numpy()) ** 2 for a, b in
                         ((weights[0].weight, weights[1].weight), (weights[0].bias, weights[1].bias))))
    assert out["ratio"][-1] == pytest.approx(change / out["w_norm"][-1] / 100, rel=1e-5)
    json.dumps(answer, allow_nan=False)  # strict JSON for the page
