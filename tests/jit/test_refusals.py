"""What tx.jit refuses with a JitError (jit/record.py, jit/watch.py), where a replay could
only repeat the recording call: control flow on values, values leaving the graph outside
ops, writes a replay would not make again, hooks added after a record, two recordings that
differ. Beside each refusal, what still replays."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import nn, optim
from tinygrad_tx.jit import JitError

from ..helpers import no_observer_left
from .helpers import same, vec


# -- values a replay could only repeat -------------------------------------------------------------

@pytest.mark.parametrize("positive", [lambda t: t.item() > 0, lambda t: t.numpy().sum() > 0,
                                      lambda t: bool(t > 0), lambda t: "-" not in str(t), lambda t: float(t) > 0],
                         ids=["item", "numpy", "if", "print", "float"])
def test_control_flow_on_values_is_refused(positive):
    def step(x):
        y = (x * 2).sum()
        return y * 2 if positive(y) else y  # a replay could not take the other branch

    with pytest.raises(tx.JitError, match="read .* while recording"):
        tx.jit(step)(tx.Tensor(np.ones(3)))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(tx.Tensor(np.ones(3)) > 0)  # ambiguous: refused eagerly too


def test_two_recordings_that_differ_are_refused():
    # with verify, the second call of a signature records again; a branch on raw .data shows up as other ops
    def branchy(x):
        return (x * 2).sum() if x.data.sum() > 0 else (x + 1).sum()

    f = tx.jit(branchy, verify=True)
    f(tx.Tensor(np.ones(3)))
    with pytest.raises(tx.JitError, match="different ops"):
        f(tx.Tensor(-np.ones(3)))

    def masked(x):  # a mask computed on raw arrays: a replay would keep the first one
        return x.masked_fill(x.data > 0, 0.0).sum()

    g = tx.jit(masked, verify=True)
    g(tx.Tensor(np.array([1.0, -1.0])))
    with pytest.raises(tx.JitError, match="computed outside ops"):
        g(tx.Tensor(np.array([-1.0, 1.0])))


def test_arguments_the_jit_cannot_follow_are_refused():
    with pytest.raises(tx.JitError, match="pass a Tensor"):
        tx.jit(lambda x: x)(np.ones(3))
    outside = tx.Tensor(np.ones(3), requires_grad=True) * 2  # a graph made outside the function
    with pytest.raises(tx.JitError, match="outside the function"):
        tx.jit(lambda x: (x * outside).sum().backward())(tx.Tensor(np.ones(3), requires_grad=True))


def test_an_argument_with_a_graph_is_refused_even_after_a_leaf_was_recorded():
    """A probe of the jit found an argument with a graph (a non-leaf) missing from the signature:
    once a leaf had been recorded, such a call was replayed."""
    w = vec(1.0, 2.0).requires_grad_()

    def f(x):
        (x * w).sum().backward()

    jitted, u = tx.jit(f), vec(1.0, 1.0).requires_grad_()
    jitted(vec(3.0, 4.0).requires_grad_())
    with pytest.raises(JitError, match="computed outside the function with a graph"):
        jitted(u * 3)


def _optimizer_made_per_call(w):
    def f(x):
        loss = (x * w).sum()
        loss.backward()
        optim.clip_grad_norm((p for p in [w]), 1.0)  # a generator: used up after one call
    return f


REFUSED = {  # each: what a replay would have kept fixed at the recording call's value, and the message
    "astype to int": (lambda w: lambda x: F.embedding(x.astype(np.int64), w), "astype"),
    "Tensor(x, dtype)": (lambda w: lambda x: tx.Tensor(x, dtype=np.float64) * 2, "Tensor"),
    "tx.randn": (lambda w: lambda x: x + tx.randn(2), "randn"),
    "a parameter read": (lambda w: lambda x: x * 2 if w.numpy()[0, 0] > 0 else x, "read on the host"),
    "a gradient in an op": (lambda w: lambda x: ((x @ w).sum().backward(), (w.grad * 1).sum())[1], "grad"),
    "a boolean mask": (lambda w: lambda x: x[x > 1].sum(), "boolean mask"),
    "attention weights": (lambda w: lambda x: F.scaled_dot_product_attention(
        x[None], x[None], x[None], return_weights=True)[1].sum(), "return_weights"),
    "an iterator": (_optimizer_made_per_call, "iterator"),
    "a leaf made inside": (lambda w: lambda x: (lambda leaf: ((leaf * w[0]).sum().backward(), x.sum())[1])(
        (x * 1).detach().requires_grad_()), "requires grad"),
    # changes outside ops, which a replay would not make again
    ".data replaced (an EMA)": (lambda w: lambda x: (setattr(w, "data", (w * 0.9).data), x.sum())[1], ".data"),
    "nn.init inside": (lambda w: lambda x: nn.init.normal_(tx.zeros(2)) + x, "host generator"),
    "a weight re-initialised": (lambda w: lambda x: (nn.init.zeros_(w), x.sum())[1], ".data"),
    "a hook registered inside": (lambda w: lambda x: (w.register_hook(lambda g: g * 0.5), x.sum())[1], "hook"),
    "a post-accumulate hook registered inside": (
        lambda w: lambda x: (w.register_post_accumulate_grad_hook(print), x.sum())[1], "hook"),
    "an instrument turned on inside": (lambda w: lambda x: _sum_watched(x), "turned on"),
    "a tensor made outside ops returned": (lambda w: lambda x: (x.sum(), tx.Tensor(np.float32(3))), "made outside ops"),
}


def _sum_watched(x):
    with tx.inspect.detect_anomaly():
        return x.sum()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_values_a_replay_could_only_repeat_are_refused(case):
    """Probes of the jit found each of these replayed with the value the recording call had: values
    leaving the graph outside ops, an iterator used up, and changes made outside ops (.data
    replaced, nn.init, a hook or an instrument turned on inside). Each is refused while
    recording."""
    w = tx.Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    make, message = REFUSED[case]
    x = vec(0.0, 1.0)
    make(w)(x)  # eager runs
    w.grad = None
    with pytest.raises(JitError, match=message):
        tx.jit(make(w))(x)


def test_an_instrument_refused_inside_a_recording_is_left_off_entirely():
    """record_modules registers global module hooks as it turns on; refused by the recording
    (a replay would show it nothing), it once left those hooks registered, which then slowed
    every module call and made every later record refuse to replay."""
    layer = nn.Linear(2, 2)

    def f(x):
        with tx.inspect.record_modules():
            return layer(x).sum()

    with pytest.raises(JitError, match="record_modules turned on"):
        tx.jit(f)(vec(1.0, 2.0))
    assert no_observer_left()


def test_verify_compares_tensors_made_outside_ops():
    """A probe of the jit found verify=True comparing the two recordings' ops but not the tensors
    made outside ops, which a replay keeps as the first recording's."""
    def f(x):
        return x + tx.Tensor(x.data * 2)  # raw arrays: a constant of the record

    jitted = tx.jit(f, verify=True)
    jitted(vec(1.0))
    with pytest.raises(JitError, match="made outside ops"):
        jitted(vec(2.0))


def test_a_refusal_by_verify_holds_for_later_calls():
    """A third probe of the jit found a refusal by verify=True undone by two later calls that
    happened to agree, which confirmed one branch for all."""
    def f(x):
        return x * 2 if x.data[0] > 0 else x * 3  # a branch on raw .data, unseen by the recorder

    jitted = tx.jit(f, verify=True)
    jitted(vec(1.0))
    with pytest.raises(JitError):
        jitted(vec(-1.0))
    for value in (1.0, 1.0, -1.0):  # two agreeing calls must not confirm one branch for all
        with pytest.raises(JitError):
            jitted(vec(value))


def test_a_module_hook_registered_after_recording_is_refused():
    """A probe of the jit found a module hook registered after a recording ignored by its replays;
    the next call refuses."""
    model = nn.Linear(2, 2)
    step = tx.jit(lambda x: model(x))
    x = tx.Tensor(np.ones((1, 2), np.float32))
    step(x)
    handle = model.register_forward_hook(lambda m, args, out: out * 10)
    with pytest.raises(JitError, match="module hook"):
        step(x)
    handle.remove()
    assert same(step(x), model(x))


# -- writes a replay would not make again ----------------------------------------------------------

def test_textbook_sgd_through_data_is_refused_with_what_to_write_instead():
    """`p.data -= lr * p.grad.data` ran only while recording; replays never
    updated the weights."""
    p = tx.Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)

    def step(x):
        loss = (p * x).sum()
        loss.backward()
        p.data -= 0.1 * p.grad.data
        return loss

    with pytest.raises(JitError, match=r"optim\.SGD"):
        tx.jit(step)(vec(1.0, 1.0))


@pytest.mark.parametrize("write", [
    lambda p, g: setattr(p.grad, "data", p.grad.data * 0.5),  # a gradient scaled by hand
    lambda p, g: setattr(p, "data", p.data - 0.1 * p.grad.data),  # SGD writing a new array
    lambda p, g: setattr(g, "data", g.data + 1),  # an intermediate result changed after it was made
])
def test_every_write_to_data_inside_a_jitted_step_is_refused(write):
    """As a class: every write to .data inside a recording (a gradient scaled by
    hand, SGD writing a new array, an intermediate changed after it was made) ran only while
    recording; each is refused as it happens."""
    p = tx.Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = tx.optim.SGD([p], lr=0.1)

    def step(x):
        y = p * x
        loss = y.sum()
        opt.zero_grad()
        loss.backward()
        write(p, y)
        opt.step()
        return loss

    with pytest.raises(JitError, match=r"\.data"):
        tx.jit(step)(vec(1.0, 1.0))
    assert "data" not in vars(tx.Tensor)  # the watch on .data ends with the recording


@pytest.mark.parametrize("write", [
    lambda p: p.data.__setitem__(Ellipsis, p.data * 0.5),  # p.data[...] = p.data * 0.5
    lambda p: np.multiply(p.grad.data, 0.5, out=p.grad.data),  # gradient scaled in place
    lambda p: np.clip(p.data, -0.5, 0.5, out=p.data),
    lambda p: setattr(p, "grad", None),  # zero_grad by hand
])
def test_writes_that_assign_no_data_are_refused_too(write):
    """Found by the differential test: writes that assign no .data (`p.data[...] =
    v`, `out=` into an array read through .data, `p.grad = None` by hand) ran only while
    recording too."""
    p = tx.Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = tx.optim.SGD([p], lr=0.1)

    def step(x):
        loss = (p * x).sum()
        loss.backward()
        write(p)
        opt.step()
        return loss

    with pytest.raises(JitError, match=r"in place|\.grad = "):
        tx.jit(step)(vec(1.0, 1.0))
    assert tx.Tensor.grad is None  # the class default again once the recording ends


def test_sgd_with_an_optimizer_still_replays_and_data_reads_are_free():
    p = tx.Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    opt = tx.optim.SGD([p], lr=0.1)

    def step(x):
        loss = (p * x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, p.data.shape

    jitted = tx.jit(step)
    losses = [jitted(vec(1.0, 1.0))[0].item() for _ in range(3)]
    assert losses == pytest.approx([3.0, 2.8, 2.6]) and jitted.replays == 2


def test_an_optimizer_made_inside_is_refused():
    """Like a write to .data: eager makes a fresh optimizer (momentum 0) at each call; a replay
    kept the recording's."""
    w = tx.Tensor(np.ones(2, np.float32), requires_grad=True)

    def step(x):
        opt = tx.optim.SGD([w], lr=0.1, momentum=0.9)
        loss = (x * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    with pytest.raises(JitError, match="made inside the function"):
        tx.jit(step)(vec(1.0, 1.0))


def test_an_optimizer_attribute_written_inside_is_refused_and_a_schedule_is_replayed():
    """Like a write to .data: `opt.lr *= 0.5` in the step ran only while recording: the replays
    kept the second lr."""
    w = tx.Tensor(np.ones(2, np.float32), requires_grad=True)
    opt = tx.optim.SGD([w], lr=0.1)

    def decayed(x):
        loss = (x * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        opt.lr *= 0.5
        return loss

    with pytest.raises(JitError, match=r"SGD's 'lr'"):
        tx.jit(decayed)(vec(1.0, 1.0))

    def run(jit):
        w = tx.Tensor(np.ones(2, np.float32), requires_grad=True)
        opt = tx.optim.SGD([w], lr=0.1)
        schedule = tx.schedules.LambdaLR(opt, lambda step: 0.5 ** step)

        def scheduled(x):
            loss = (x * w).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            return loss

        step = tx.jit(scheduled) if jit else scheduled
        return [step(vec(1.0, 1.0)).item() for _ in range(4)], getattr(step, "replays", 3)

    assert run(True) == run(False)
