"""Collectives inside a jitted step (jit/record.py with tinygrad_tx.distributed): made again
at each replay on that call's tensors, the identity in a job of one, and refused where a
replay could only repeat them. (The same across real ranks: tests/distributed.)"""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.jit import JitError

from .helpers import vec


class _JobOfTwo:
    """A stand-in for the process group of a job of two whose other rank holds what this one
    holds (so a sum doubles) and whose rank 1 broadcasts sevens; it notes each collective."""

    size = 2

    def __init__(self):
        self.seen = []

    def communicator(self, backend):
        return self

    def all_reduce(self, array, backend):
        self.seen.append(("all_reduce", array.tolist()))
        array *= 2
        return self

    def broadcast(self, array, backend, root):
        self.seen.append(("broadcast", root, array.tolist()))
        array[...] = 7
        return self

    def wait(self):
        pass


def test_collectives_inside_are_made_again_at_each_replay_on_that_calls_tensors(monkeypatch):
    """dist.all_reduce / broadcast ran only while recording; replays skipped them,
    and the ranks' weights drifted apart."""
    import tinygrad_tx.distributed as dist
    from tinygrad_tx.distributed import collectives

    job = _JobOfTwo()
    monkeypatch.setattr(collectives, "group", lambda: job)
    p = tx.Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = tx.optim.SGD([p], lr=0.1)

    def step(x, y):
        loss = (p * x).sum()
        opt.zero_grad()
        loss.backward()
        dist.all_reduce(p.grad)  # the gradient of this call (a mean: doubled, then halved)
        dist.all_reduce(p.grad, op="sum")
        dist.broadcast(y, root=1)  # an argument of this call
        z = dist.all_reduce(x * 3, op="sum")  # an op's result, reduced in place, then used
        opt.step()
        return loss + z.sum() + y.sum()

    def run(f):
        p.data[...] = [1.0, 2.0]
        job.seen.clear()
        out = [f(vec(1.0, float(i)), vec(5.0, 6.0)).numpy().tobytes() for i in range(3)]
        return out, list(job.seen), p.numpy().tobytes()

    jitted = tx.jit(step)
    assert run(jitted) == run(step)
    assert jitted.replays == 2 and len(job.seen) == 12


def test_collectives_of_one_process_replay_as_the_identity():
    import tinygrad_tx.distributed as dist

    w = tx.Tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)

    def step(x):
        y = dist.all_reduce(x * w)
        dist.broadcast(w)
        return dist.all_reduce(y.sum(), op="sum")

    jitted = tx.jit(step)
    for i in range(3):
        x = vec(float(i), 3.0)
        assert jitted(x).numpy().tobytes() == step(x).numpy().tobytes()
    assert jitted.replays == 2
    assert "all_reduce(Wrap(V[" in jitted.tape(x).source()


@pytest.mark.parametrize("call", [lambda x, dist: dist.all_reduce(x.data),
                                  lambda x, dist: dist.all_reduce(float(x.shape[0]))])
def test_collectives_of_raw_arrays_and_numbers_inside_are_refused(call):
    """The same class: a collective of a raw array or a Python number inside the step
    would run only while recording; no replay can make it again, so it is refused."""
    import tinygrad_tx.distributed as dist

    def step(x):
        call(x, dist)
        return x * 2

    with pytest.raises(JitError, match="raw array|Python number"):
        tx.jit(step)(vec(1.0, 2.0))


def test_a_collective_on_a_tensor_made_inside_outside_ops_is_refused(monkeypatch):
    """The same class: a count made with tx.Tensor(...) and summed over the ranks: each
    replay summed the recording's tensor again (0.5, 0.25, 0.125, ... where eager gives 0.5 at
    every call)."""
    import tinygrad_tx.distributed as dist
    from tinygrad_tx.distributed import collectives

    monkeypatch.setattr(collectives, "group", lambda: _JobOfTwo())
    w = tx.Tensor(np.ones(2, np.float32), requires_grad=True)

    def step(x):
        n = tx.Tensor(np.array([float(x.shape[0])], np.float32))
        dist.all_reduce(n, op="sum")
        return (x * w).sum() / n

    with pytest.raises(JitError, match="made in the function outside ops"):
        tx.jit(step)(vec(1.0, 1.0))
