"""An array as the page sees it (arrays.py), and a walk step over a big one: its statistics exact
against sums made exactly (math.fsum), its heat-map the array's own cells, and a step's answer small
and ready however big the array behind it is."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx.inspect.explorer import StepRecord, step
from tinygrad_tx.inspect.explorer import strict_json
from tinygrad_tx.inspect.explorer.arrays import BLOCK, HEAT_SIDE, heat, norm, summary


def exact(a: np.ndarray) -> dict:
    """The statistics of `a`'s finite values with every sum exact (fsum), then rounded once: the truth."""
    values = [x for x in np.asarray(a, dtype=np.float64).ravel().tolist() if math.isfinite(x)]
    n = len(values)
    mean = math.fsum(values) / n
    return {"min": min(values), "max": max(values), "mean": mean,
            "std": math.sqrt(math.fsum((x - mean) ** 2 for x in values) / n),
            "norm": math.sqrt(math.fsum(x * x for x in values))}


rng = np.random.default_rng(0)
N = 3 * BLOCK + 17  # several blocks and a part of one


@pytest.mark.parametrize("a", [
    rng.standard_normal(N).astype(np.float32),
    (1e4 + rng.standard_normal((3, N // 3))).astype(np.float32),  # mean 10⁴ × std: std must keep its digits
    rng.standard_normal((7, 5)).astype(np.float16),
    rng.integers(-1000, 1000, size=(4, 9)),
    rng.standard_normal(17) > 0,  # booleans count as 0 and 1
], ids=["float32", "offset", "float16", "int64", "bool"])
def test_statistics_are_exact(a):
    shown, truth = summary(a), exact(a)
    assert shown["shape"] == list(a.shape) and shown["size"] == a.size and (shown["nan"], shown["inf"]) == (0, 0)
    assert (shown["min"], shown["max"]) == (truth["min"], truth["max"])
    for key in ("mean", "std", "norm"):
        assert shown[key] == pytest.approx(truth[key], rel=1e-12, abs=1e-300), key
    assert norm(a) == shown["norm"]  # the update view's norms are the same sums


def test_statistics_count_nan_and_inf_apart():
    a = rng.standard_normal(N).astype(np.float32)
    a[[3, BLOCK + 1, 2 * BLOCK]] = [np.nan, np.inf, -np.inf]
    shown, truth = summary(a), exact(a)
    assert (shown["nan"], shown["inf"]) == (1, 2)
    assert (shown["min"], shown["max"]) == (truth["min"], truth["max"])
    for key in ("mean", "std", "norm"):
        assert shown[key] == pytest.approx(truth[key], rel=1e-12), key
    nothing = summary(np.array([np.nan, np.inf], dtype=np.float32))
    assert (nothing["nan"], nothing["inf"]) == (1, 1) and "mean" not in nothing  # no finite value: no statistics
    assert "mean" not in summary(np.zeros((0, 3)))


def test_heat_map_is_the_arrays_own_cells():
    a = rng.standard_normal((2, 3, 100, 7)).astype(np.float32)
    shown = heat(a)
    stride = math.ceil(100 / HEAT_SIDE)
    assert shown["stride"] == [stride, 1] and shown["where"] == "[0, 0, :, :]"
    assert shown["rows"] == a[0, 0, ::stride].astype(np.float64).tolist()  # every value exactly as it is


def big_logits_loss():
    """A loss over (8, 64, 4096) scores: 2M values, an array as big as an M model's logits are for a batch of 8."""
    logits = tx.Tensor(rng.standard_normal((8, 64, 4096)).astype(np.float32), requires_grad=True, name="logits")
    return F.cross_entropy(logits * 2.0, tx.Tensor(rng.integers(0, 4096, size=(8, 64))))


def test_a_walk_step_over_a_big_array_is_small_and_ready(monkeypatch):
    record = StepRecord(big_logits_loss, (), compiled=False)
    made = []
    monkeypatch.setattr(step, "summary", lambda a: made.append(a.shape) or summary(a))
    for n in range(1, len(record.steps) + 1):
        answer = strict_json.dumps(record.walk_step(n))
        arrays = 1 + len(record.steps[n - 1].sent)
        assert len(answer.encode()) < arrays * 64 * 1024 + 8 * 1024  # each array: its statistics and ≤ 48 × 48 cells
    # the statistics of the 2M-value arrays were made with the record, not when the step is asked for
    assert all(math.prod(shape) < step.BIG for shape in made), made
