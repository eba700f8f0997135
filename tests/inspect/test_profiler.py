"""profile (inspect/profiler.py): every op executed counted, forward and backward, with the
memory each holds for backward; the calls outside ops timed; the host reads counted."""
import io

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import Transformer
from tinygrad_tx.inspect import profile

from ..helpers import leaf
from .helpers import chain


def test_profiler_counts_every_op_executed(device):
    x, w = leaf(np.ones((4, 4)), device), leaf(np.eye(4), device)
    with profile() as p:
        chain(x, w, 30).backward()
        with tx.no_grad():
            x * 2.0  # executed, so counted, but no node is kept
    stats = p.stats
    assert {name: s.calls for name, s in stats.items()} == {"Mul": 11, "Add": 10, "Tanh": 10, "Sum": 1}
    assert {name: s.backward_calls for name, s in stats.items()} == {"Mul": 10, "Add": 10, "Tanh": 10, "Sum": 1}
    assert stats["Tanh"].held_bytes == 10 * 4 * 4 * 8  # each Tanh keeps its (4, 4) float64 input
    table = p.table().splitlines()
    assert table[0].split()[:2] == ["op", "calls"] and table[-1].split()[:2] == ["total", "32"]
    totals = [float(line.split()[4]) for line in table[1:-1]]
    assert totals == sorted(totals, reverse=True)


def test_profiler_on_a_transformer_step_counts_its_fused_ops():
    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32)
    src, tgt = np.array([[3, 4, 5, 6]]), np.array([[1, 6, 7, 8]])
    with profile() as p:
        F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:]).backward()
    attention, norms = p.stats["Attention"], p.stats["LayerNorm"]
    assert attention.calls == attention.backward_calls == 6  # 2 encoder self, 2 decoder self, 2 cross
    assert norms.calls == norms.backward_calls == 2 * 2 + 3 * 2  # post-LN: one per residual block
    assert p.stats["CrossEntropy"].calls == 1 and attention.held_bytes > 0


def test_profiler_times_the_calls_outside_ops_and_counts_the_host_reads():
    """A step's time outside its ops (an optimizer's step, clipping, a schedule's step) has a
    row per call, in total only; the values read on the host (each a wait for a GPU) are counted."""
    x, w = leaf(np.ones((4, 4))), leaf(np.eye(4))
    opt = tx.optim.SGD([w], lr=0.1)
    schedule = tx.schedules.LambdaLR(opt, lambda step: 0.5)
    with profile() as p:
        for _ in range(3):
            loss = chain(x, w, 6)
            loss.backward()
            tx.optim.clip_grad_norm([w], 1.0)
            opt.step()
            schedule.step()
            opt.zero_grad()
            if loss.item() > 0:  # a read on the host; printing the tensor is another
                print(loss, file=io.StringIO())
    rows = {name: (s.calls, s.forward_s, s.backward_s, s.call_s) for name, s in p.stats.items()}
    for name in ("SGD.step()", "SGD.zero_grad()", "LambdaLR.step()", "clip_grad_norm()"):
        calls, forward_s, backward_s, call_s = rows[name]
        assert calls == 3 and forward_s == backward_s == 0 and call_s > 0
        assert p.stats[name].total_s == call_s
    assert p.reads == {"read on the host (item())": 3, "read on the host (numpy() or print)": 3}
    assert p.table().splitlines()[-1] == ("values read outside the graph: read on the host (item()) ×3, "
                                         "read on the host (numpy() or print) ×3")
