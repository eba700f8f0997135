"""End to end: the models learn small tasks, in seconds, to near-perfect held-out accuracy."""
import importlib.util
import time
from pathlib import Path

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import EncoderClassifier, beam_search, greedy_decode
from tinygrad_tx import optim, schedules

PAD = 0


def sorted_or_not(rng, n, lengths=(4, 8)):
    """Sequences of 4-8 digits (ids 1-9, right-padded): one third sorted, one third shuffled,
    one third sorted with one adjacent swap (the hard negatives). Label 1 = non-decreasing."""
    ids = np.full((n, lengths[1]), PAD)
    for row in ids:
        length = rng.integers(lengths[0], lengths[1] + 1)
        x = np.sort(rng.integers(1, 10, length))
        kind = rng.integers(3)
        if kind == 1:
            rng.shuffle(x)
        elif kind == 2:
            i = rng.integers(length - 1)
            x[i], x[i + 1] = x[i + 1], x[i]
        row[:length] = x
    labels = np.array([np.all(np.diff(row[row != PAD]) >= 0) for row in ids], dtype=np.int64)
    return ids, labels


def test_encoder_classifier_learns_is_sorted():
    tx.manual_seed(0)
    rng = np.random.default_rng(0)
    model = EncoderClassifier(10, 2, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=8)
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    schedule = schedules.WarmupCosine(optimizer, warmup=30, total_steps=900)
    for _ in range(900):
        ids, labels = sorted_or_not(rng, 64)
        loss = F.cross_entropy(model(ids), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    ids, labels = sorted_or_not(np.random.default_rng(99), 2000)
    with tx.no_grad():
        accuracy = (model.eval()(ids).numpy().argmax(-1) == labels).mean()
    print(f"is-sorted classifier: held-out accuracy {accuracy:.2%} (positives {labels.mean():.0%})")
    assert accuracy >= 0.98


def test_copy_task_reaches_exact_match():
    path = Path(__file__).resolve().parents[2] / "examples" / "copy_task.py"
    spec = importlib.util.spec_from_file_location("copy_task", path)
    copy_task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy_task)
    start = time.perf_counter()
    model = copy_task.train()
    accuracy = copy_task.exact_match(model)
    elapsed = time.perf_counter() - start
    print(f"copy task: exact match {accuracy:.1%} (greedy) in {elapsed:.1f} s")
    assert accuracy >= 0.99
    src, _, _ = copy_task.make_batch(np.random.default_rng(5), 64)
    L, BOS, EOS = copy_task.LENGTH + 1, copy_task.BOS, copy_task.EOS
    np.testing.assert_array_equal(beam_search(model, src, L, BOS, EOS, beam_size=1),
                                  greedy_decode(model, src, L, BOS, EOS))
    assert copy_task.exact_match(model, n=200, beam_size=4) >= 0.99
