"""A record's tape (jit/tape.py, jit/codegen.py): it prints its ops and backward schedule, its
source is the Python a replay runs, names in that source bind the right tensors, and an
error in a replay shows the record's line."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F

from .helpers import chain_step, vec


def test_tape_prints_ops_and_the_backward_schedule():
    step = tx.jit(chain_step)
    x, w = tx.Tensor(np.ones(3), requires_grad=True), tx.Tensor(np.ones(3), requires_grad=True)
    step(x, w)
    text = str(step.tape(x, w))
    assert "Mul" in text and "Tanh" in text and "backward from #4" in text
    assert "leaf arg0" in text and "leaf arg1" in text


def test_tape_source_is_the_python_a_replay_runs():
    """The printed source is what replays execute: compiled from the text alone, it gives
    eager execution's gradients."""
    x, w = tx.Tensor(np.ones(3), requires_grad=True), tx.Tensor(np.full(3, 0.5), requires_grad=True)
    chain_step(x, w)
    eager = [x.grad.numpy(), w.grad.numpy()]
    step = tx.jit(chain_step)
    for _ in range(2):  # a recording, then a replay
        x.grad = w.grad = None
        step(x, w)
    tape = step.tape(x, w)
    source = tape.source()
    assert source.startswith("def run(tensors):")
    assert "#4 Sum" in source and "F[4].backward(G[4]" in source and "sum_to" not in source
    scope = dict(tape.functions[False].__globals__)  # the constants the text names
    exec(source, scope)
    x.grad = w.grad = None
    scope["run"]([x, w])
    np.testing.assert_array_equal(x.grad.numpy(), eager[0])
    np.testing.assert_array_equal(w.grad.numpy(), eager[1])


def test_an_error_in_a_replay_shows_the_line_of_the_record():
    """The replay is generated code; its traceback shows the record's line (op number and
    name), and a record that is evicted takes its lines with it."""
    import gc
    import linecache
    import traceback

    emb = tx.Tensor(np.arange(10.0).reshape(5, 2), requires_grad=True)

    def step(ids):
        loss = F.embedding(ids, emb).sum()
        loss.backward()
        return loss

    jitted = tx.jit(step, max_traces=1)
    jitted(tx.Tensor(np.array([1, 2])))
    known = set(linecache.cache)
    with pytest.raises(IndexError) as error:
        jitted(tx.Tensor(np.array([1, -2])))
    shown = "".join(traceback.format_exception(error.value))
    assert "V[2] = f.forward(" in shown and "# #0 Embedding -> s0" in shown
    del error, shown
    first = {name for name in set(linecache.cache) - known if name.startswith("<tape")}
    assert len(first) == 1  # the lines of the record that failed
    jitted(tx.Tensor(np.array([1, 2, 3])))  # a new shape: the old record is evicted
    jitted(tx.Tensor(np.array([1, 2, 4])))  # and the new one replayed, so compiled
    gc.collect()
    assert not first & set(linecache.cache)


@pytest.mark.parametrize("names", [("w", "w6", "w"), ("w", "w_1", "w"), ("V", "f", "Sink"),
                                   ("None", "class", "__builtins__"), ("t0", "t0", "t0")])
def test_tensors_whose_names_collide_are_each_bound_to_themselves(names):
    """Tensors named "w", "w6", "w" gave eager 111 and every replay 201 (the third "w" became
    "w6")."""
    a, b, c = (vec(v, name=n) for v, n in zip((1.0, 10.0, 100.0), names))

    def f(x):
        return x + a + b + c

    jitted = tx.jit(f)
    for start in (0.0, 1000.0, 2000.0):
        assert jitted(vec(start)).numpy().tolist() == [start + 111.0]
    assert jitted.replays == 2
