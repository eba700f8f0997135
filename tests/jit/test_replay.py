"""tx.jit's promise: a replayed step equals the eager step bit for bit (dropout, gradients,
hooks, errors and eager's own refusals included).

The truth a replay is checked against is eager execution of the same function
from the same seed (dropout included), and for gradients through a jitted
function, finite differences (tx.gradcheck). What makes a new record is in
test_signature.py and test_reach.py, what the jit refuses in test_refusals.py.
"""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import GPT, Transformer
from tinygrad_tx import nn, optim
from tinygrad_tx.leaf_sink import queue_callback
from tinygrad_tx.jit import JitError

from .helpers import chain_step, same, vec


PAD = 0


def batches(rng, shapes, vocab):
    """(src, tgt_in, tgt_out) id batches with padded tails, one per (B, S, T) in `shapes`."""
    out = []
    for B, S, T in shapes:
        src, tgt = rng.integers(1, vocab, (B, S)), rng.integers(1, vocab, (B, T + 1))
        for row in range(0, B, 2):
            src[row, rng.integers(1, S):] = PAD
            tgt[row, rng.integers(2, T + 1):] = PAD
        out.append((src, tgt[:, :-1], tgt[:, 1:]))
    return out


def transformer_run(device, data, use_jit, cuda_graph=False):
    """Losses and final parameters of Adam steps on `data`, from seed 0, with dropout."""
    tx.manual_seed(0)
    model = Transformer(13, 13, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=32, dropout=0.2, max_len=16).to(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    params = model.parameters()

    def step(src, tgt_in, tgt_out):
        loss = F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm(params, 1.0)
        opt.step()
        return loss

    run = tx.jit(step, cuda_graph=cuda_graph) if use_jit else step
    losses = [run(*(tx.Tensor(a, device=device) for a in batch)).item() for batch in data]
    return losses, [p.numpy() for p in params], run


def gpt_run(device, data, use_jit):
    tx.manual_seed(0)
    model = GPT(13, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.2, max_len=16).to(device)
    opt = optim.AdamW(model.parameters(), lr=1e-2)

    def step(ids, targets):
        loss = F.cross_entropy(model(ids), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    run = tx.jit(step) if use_jit else step
    losses = [run(tx.Tensor(ids, device=device), tx.Tensor(tgt, device=device)).item()
              for _, ids, tgt in data]
    return losses, [p.numpy() for p in model.parameters()], run


@pytest.mark.parametrize("make", [transformer_run, gpt_run], ids=["Transformer", "GPT"])
def test_50_adam_steps_replayed_equal_eager_exactly(device, make):
    # two shapes, so the jit also switches between records; dropout 0.2 everywhere
    data = batches(np.random.default_rng(1), [(4, 7, 6), (4, 7, 6), (3, 5, 8)] * 17, 13)[:50]
    eager_losses, eager_params, _ = make(device, data, use_jit=False)
    jit_losses, jit_params, run = make(device, data, use_jit=True)
    assert (run.traces, run.replays) == (2, 48)  # each shape recorded once, then replayed
    assert jit_losses == eager_losses
    for a, b in zip(jit_params, eager_params):
        np.testing.assert_array_equal(a, b)


def test_the_first_call_records_and_later_calls_replay():
    """DESIGN.md's contract: the Python of `fn` runs once per signature; `verify=True` runs it
    twice and compares the two records."""
    for verify, eager_calls in ((False, 1), (True, 2)):
        ran = []

        def f(x):
            ran.append(True)
            return (x * 2).sum()

        jitted, x = tx.jit(f, verify=verify), tx.Tensor(np.ones(3))
        results = [jitted(x).item() for _ in range(4)]
        assert results == [6.0] * 4 and len(ran) == eager_calls
        assert (jitted.traces, jitted.replays) == (eager_calls, 4 - eager_calls)


def test_replays_dropout_with_fresh_masks():
    x = tx.Tensor(np.ones((64,), np.float32))
    drop = tx.jit(lambda x: F.dropout(x, 0.5))
    drop(x)  # recorded
    first, second = drop(x).numpy(), drop(x).numpy()
    assert drop.replays == 2 and not np.array_equal(first, second)


def test_gradient_accumulates_into_existing_grad_like_eager():
    x = tx.Tensor(np.arange(4.0), requires_grad=True)
    w = tx.Tensor(np.ones(4), requires_grad=True)
    step = tx.jit(chain_step)
    for _ in range(3):  # .grad is never zeroed: each call adds, the replays as well
        step(x, w)
    xe, we = tx.Tensor(np.arange(4.0), requires_grad=True), tx.Tensor(np.ones(4), requires_grad=True)
    for _ in range(3):
        chain_step(xe, we)
    np.testing.assert_array_equal(x.grad.numpy(), xe.grad.numpy())


def test_masks_made_from_input_ids_follow_each_call():
    # the padding mask is made with Tensor ops from the ids, so a replay with other padding uses it
    emb = tx.Tensor(np.random.default_rng(0).standard_normal((5, 3)), requires_grad=True)

    def masked_sum(ids):
        keep = ids.ne(PAD)
        return F.embedding(ids, emb).sum(axis=-1).masked_fill(~keep, 0.0).sum()

    f = tx.jit(masked_sum)
    f(tx.Tensor(np.array([1, 2, 0])))
    ids = np.array([0, 3, 4])
    assert f(tx.Tensor(ids)).item() == pytest.approx(masked_sum(tx.Tensor(ids)).item(), abs=0)


def test_gradcheck_through_a_jitted_function(device):
    w = tx.Tensor(np.random.default_rng(2).standard_normal((3, 2)), requires_grad=True, device=device)

    def f(x):  # broadcast (bias) and fan-out (x used twice) inside
        return (x @ w).tanh() * x.sum(axis=-1, keepdims=True) + w[0]

    jitted = tx.jit(f)
    x = tx.Tensor(np.random.default_rng(3).standard_normal((4, 3)), device=device)
    jitted(x.astype(np.float64).requires_grad_())  # record; gradcheck's calls then replay
    assert tx.gradcheck(jitted, [x])
    assert jitted.replays > 0
    assert jitted(x.astype(np.float64).requires_grad_()).grad_fn.name == "Replayed"


def test_two_backwards_retained_graph_and_a_leaf_root_replay_like_eager(device):
    """Each backward is its own recorded walk: one through a retained graph, a second one
    over it (gradients add up), and one from a leaf, where there is no graph at all."""
    rng = np.random.default_rng(4)
    w = tx.Tensor(rng.standard_normal((3, 3)), requires_grad=True, device=device)
    b = tx.Tensor(rng.standard_normal(3), requires_grad=True, device=device)

    def f(x):
        h = (x @ w + b).tanh()
        h.sum().backward(retain_graph=True)
        (h * h).sum().backward()
        b.backward(tx.Tensor(np.ones(3), device=device))
        return h

    def grads_after(run, x):
        w.grad = b.grad = None
        out = run(x)
        return [out.numpy(), w.grad.numpy(), b.grad.numpy()]

    x = tx.Tensor(rng.standard_normal((4, 3)), device=device)
    eager = grads_after(f, x)
    jitted = tx.jit(f)
    for _ in range(4):
        for got, want in zip(grads_after(jitted, x), eager):
            np.testing.assert_array_equal(got, want)
    assert jitted.replays == 3


def test_post_accumulate_grad_hooks_run_in_a_replay_as_in_eager():
    """What DataParallel relies on: each parameter's hook fires once its gradient is final, in
    eager backward's order (the last layer first), and a callback queued from a hook runs
    when the walk ends."""
    rng = np.random.default_rng(5)
    w1, w2 = (tx.Tensor(rng.standard_normal((3, 3)), requires_grad=True) for _ in range(2))
    events = []

    def ready(name):
        def hook(p):
            events.append((name, p.grad.numpy().copy()))
            queue_callback(end)
        return hook

    def end():
        events.append(("end", None))

    w1.register_post_accumulate_grad_hook(ready("w1"))
    w2.register_post_accumulate_grad_hook(ready("w2"))

    def f(x):
        ((x @ w1).tanh() @ w2 + (x @ w1)).sum().backward()

    x, jitted, runs = tx.Tensor(rng.standard_normal((4, 3))), tx.jit(f), []
    for run in (f, jitted, jitted, jitted, jitted):
        w1.grad = w2.grad = None
        events.clear()
        run(x)
        runs.append(list(events))
    assert jitted.replays == 3
    assert [name for name, _ in runs[0]] == ["w2", "w1", "end"]
    source = jitted.tape(x).source()  # w2 (used last by #2) is delivered before #1's backward runs
    assert source.index("sink.deliver(") < source.index("F[1].backward(")
    for got in runs[1:]:
        assert [name for name, _ in got] == ["w2", "w1", "end"]
        for (_, g), (_, want) in zip(got[:2], runs[0][:2]):
            np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("use", ["embedding", "cross_entropy", "index"])
def test_a_replay_checks_each_calls_ids_as_eager_does(device, use):
    """A replay wrapped a negative id around silently where eager refused it. Ids are values, so a record cannot have proved them in range: a negative one would
    wrap around silently in NumPy (any bad one in CuPy). Each replay refuses them as eager does."""
    weight = tx.Tensor(np.arange(10.0).reshape(5, 2), requires_grad=True, device=device)
    uses = {"embedding": lambda ids: F.embedding(ids, weight).sum(),
            "cross_entropy": lambda ids: F.cross_entropy(weight, ids, ignore_index=PAD),
            "index": lambda ids: weight[:, ids[:2]].sum()}
    jitted = tx.jit(uses[use])
    size = {"embedding": 5, "cross_entropy": 2, "index": 2}[use]
    good = tx.Tensor(np.array([1, 0, 1, 1, 0]), device=device)
    assert jitted(good).item() == uses[use](good).item()  # recorded
    for bad in (-size - 1 if use == "index" else -1, size):
        ids = tx.Tensor(np.array([1, bad, 1, 1, 0]) if use != "index" else np.array([bad, 0, 1, 1, 0]),
                        device=device)
        with pytest.raises(IndexError) as eager:
            uses[use](ids)
        with pytest.raises(IndexError) as replayed:
            jitted(ids)
        message = str(eager.value).split(": ", 1)[1]  # after "Embedding on inputs of shape ...: "
        assert message.endswith(f"{bad} is out of range for {'axis 1 of ' if use == 'index' else ''}size {size}")
        assert str(replayed.value).endswith(message)
    assert jitted(good).item() == uses[use](good).item()  # a refused call leaves the record usable
    assert jitted.traces == 1 and jitted.replays == 3


# -- what a call returns ---------------------------------------------------------------------------

def test_a_result_with_a_graph_keeps_the_structure_around_it():
    """A probe of the jit found replays returning the bare tensor where the step returned a tuple or
    dict around a result with a graph."""
    w = tx.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)

    def f(x):
        y = x * w
        return y, {"sum": x.sum()}  # no backward inside: y still has a graph

    jitted = tx.jit(f)
    for scale in (1.0, 2.0, 3.0):
        x = tx.Tensor(np.full((2, 3), scale, np.float32))
        w.grad = None
        eager = f(x)
        eager[0].sum().backward()
        want = w.grad.numpy()
        w.grad = None
        got = jitted(x)
        assert same(eager, got)
        got[0].sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), want)
    assert jitted.replays == 2


def test_returned_arguments_stay_themselves_and_a_retained_graph_can_be_walked_again():
    """A probe of the jit found arguments returned by the step not coming back as themselves, and a
    graph retained inside not walkable again after the call."""
    w = vec(1.0, 2.0).requires_grad_()

    def f(x):
        loss = (x * w).sum()
        loss.backward(retain_graph=True)
        return x, loss

    jitted = tx.jit(f)
    for _ in range(3):
        x = vec(3.0, 4.0).requires_grad_()
        w.grad = None
        back, loss = jitted(x)
        assert back is x
        loss.backward()  # the second walk, as eager allows with retain_graph
        np.testing.assert_array_equal(w.grad.numpy(), [6.0, 8.0])


def test_walking_a_graph_freed_inside_gives_eagers_message():
    """A probe of the jit found walking a graph freed inside the step raising an AttributeError
    after a replay, where eager says "a second time"."""
    w = vec(1.0, 2.0).requires_grad_()

    def f(x):
        h = x * w
        h.sum().backward()
        return h * 2

    jitted = tx.jit(f)
    for run in (f, jitted, jitted):
        with pytest.raises(RuntimeError, match="a second time"):
            run(vec(1.0, 1.0)).sum().backward()


def test_a_detached_copy_of_the_result_with_a_graph_stays_detached():
    """A second probe of the jit found `return loss, loss.detach()` returning the Replayed node
    twice: a doubled gradient for a caller using the copy as a constant."""
    w = vec(1.0, 2.0).requires_grad_()
    jitted = tx.jit(lambda x: (lambda loss: (loss, loss, loss.detach()))((x * w).sum()))
    for _ in range(3):
        loss, again, logged = jitted(vec(3.0, 4.0))
        assert again is loss and logged.requires_grad is False and loss.requires_grad


def test_a_returned_gradient_is_the_gradient_the_replay_left():
    """Returning w.grad from a step was refused ("no op or argument made"); it is that tensor's
    .grad as the replay leaves it, as in eager."""
    def twins():
        tx.manual_seed(0)
        layer = nn.Linear(3, 2)
        return layer, optim.Adam(layer.parameters(), lr=0.1)

    def step_of(layer, opt):
        def step(x):
            opt.zero_grad()
            loss = (layer(x) ** 2).sum()
            loss.backward()
            opt.step()
            return loss, layer.weight.grad, x.grad
        return step

    (a, opt_a), (b, opt_b) = twins(), twins()
    eager, jitted = step_of(a, opt_a), tx.jit(step_of(b, opt_b))
    for i in range(4):
        x = tx.Tensor(np.random.default_rng(i).standard_normal((4, 3)).astype(np.float32), requires_grad=True)
        x2 = tx.Tensor(x.numpy(), requires_grad=True)
        want, got = eager(x), jitted(x2)
        assert same(want, got) and got[1] is b.weight.grad and got[2] is x2.grad
    assert jitted.replays == 3


def test_an_error_in_a_replay_names_the_op_and_shapes_as_eager_does():
    """An error in a replayed op came out as NumPy's bare words, or, when the result had a graph,
    named 'Replayed'; a replay gives eager's message."""
    table = nn.Embedding(10, 4)
    ids = lambda *values: tx.Tensor(np.array(values))
    for with_graph in (True, False):
        jitted = tx.jit(lambda i: table(i).sum())
        with tx.enable_grad() if with_graph else tx.no_grad():
            jitted(ids(1, 2, 3))
            jitted(ids(1, 2, 4))
            with pytest.raises(IndexError) as eager:
                table(ids(1, 2, 12))
            with pytest.raises(IndexError) as replayed:
                jitted(ids(1, 2, 12))
        assert jitted.replays == 2
        assert str(replayed.value) == str(eager.value) and str(eager.value).startswith(
            "Embedding on inputs of shape (10, 4), (3,): ")


def test_a_result_whose_inputs_the_step_then_changed_refuses_backward_at_every_replay_as_eager():
    """The step returns a loss with its graph, then updates w in place: eager's
    loss.backward() refuses (w changed after Mul used it); replays after the first ran it on the
    recording's values and gave w.grad = x, silently."""
    w = tx.Tensor(np.ones(3, np.float32), requires_grad=True)
    opt = tx.optim.SGD([w], lr=0.1)

    def step(x):
        loss = (w * x).sum()
        opt.step()
        return loss

    jitted = tx.jit(step)
    for _ in range(4):
        for f in (step, jitted):
            w.grad = vec(1.0, 1.0, 1.0)
            loss = f(vec(0.0, 1.0, 2.0))
            with pytest.raises(RuntimeError, match=r"an input of Mul \(shape \(3,\)\) was modified"):
                loss.backward()
    assert jitted.replays == 3 and w.grad.numpy().tolist() == [1.0, 1.0, 1.0]


# -- what the record holds -------------------------------------------------------------------------

def test_two_zero_d_comparisons_are_not_mixed_up():
    """Recorded with x=[1,2], y=[3,4], called with x=[-1,-2]: eager [4, 6], replay
    [2, 2] (both comparisons gave NumPy's one np.True_, and the record told arrays apart by id)."""
    def f(x, y):
        a = x.sum() > 0
        b = y.sum() > 0
        return tx.where(a, x, y) + tx.where(b, y, x)

    jitted = tx.jit(f)
    for x, y in ((vec(1, 2), vec(3, 4)), (vec(-1, -2), vec(3, 4)), (vec(1, 2), vec(-3, -4))):
        try:
            got = jitted(x, y)
        except JitError as e:
            assert "cannot tell their results apart" in str(e)
            continue
        assert got.numpy().tobytes() == f(x, y).numpy().tobytes()


def test_a_zero_d_comparison_beside_a_python_bool_is_not_mixed_up():
    """The same class: a Python True lifted into the graph is NumPy's shared
    np.True_ too, and must not be taken for the comparison's result."""
    def f(x, y):
        a = x.sum() > 0
        return tx.where(a | True, x, y)  # the lifted True is NumPy's np.True_ too

    jitted = tx.jit(f)
    for x, y in ((vec(1, 2), vec(3, 4)), (vec(-1, -2), vec(3, 4)), (vec(1, 2), vec(-3, -4))):
        try:
            got = jitted(x, y)
        except JitError:
            continue
        assert got.numpy().tobytes() == f(x, y).numpy().tobytes()


@pytest.mark.parametrize("passed", ["itself", "detached"])
def test_a_tensor_from_outside_passed_as_an_argument_too_is_read_from_each_call(passed):
    """Found by the differential test (test_differential.py): f(b) where f also uses b: the record
    read b from the argument's slot, so a later call f(other) replayed other + 10 * other instead
    of b + 10 * other."""
    b = vec(1.0, 2.0)

    def f(x, y):
        return x * 10 + b + y

    jitted = tx.jit(f)
    first = b if passed == "itself" else b.detach()
    for x, y in ((first, vec(0.0, 0.0)), (vec(5.0, 5.0), b), (vec(7.0, 7.0), vec(1.0, 1.0)), (first, b)):
        assert jitted(x, y).numpy().tobytes() == f(x, y).numpy().tobytes()


def test_a_jitted_function_called_while_another_records_is_recorded_with_it():
    """A probe of the jit found a jitted function called while another recorded invisible to the
    outer record, which kept its result as a constant."""
    inner = tx.jit(lambda x: x * 2)
    outer = tx.jit(lambda x: inner(x) + 1)
    inner(vec(0.0))  # inner has a record of this signature before outer records
    for v in (1.0, 5.0, 9.0):
        assert same(outer(vec(v)), vec(2 * v + 1))
    assert outer.replays == 2


def test_module_zero_grad_inside_is_made_again_at_each_replay():
    """A probe of the jit found Module.zero_grad inside a step made only while recording; it is a
    replayable call now."""
    def run(use_jit):
        tx.manual_seed(0)
        model = nn.Linear(2, 1)
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            model.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        step = tx.jit(step) if use_jit else step
        return [step(tx.Tensor(np.ones((3, 2), np.float32))).item() for _ in range(4)]

    assert run(True) == run(False)


def test_manual_seed_inside_is_made_again_at_each_replay():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))

    def f(x):
        tx.manual_seed(123)  # the same dropout mask at every call
        return model(x)

    jitted, x = tx.jit(f), tx.Tensor(np.ones((3, 4), np.float32))
    want = f(x)
    after = nn.Dropout(0.5)(x)  # the generator as eager leaves it
    for _ in range(3):
        assert same(jitted(x), want)
    assert same(nn.Dropout(0.5)(x), after) and jitted.replays == 2


def test_another_threads_eager_work_stays_out_of_the_record():
    """A third probe of the jit found another thread's eager work, done while a call recorded,
    replayed as part of the step."""
    import threading

    w, other = (tx.Tensor(np.ones(3, np.float32), requires_grad=True) for _ in range(2))
    recording, done = threading.Event(), threading.Event()

    def f(x):
        recording.set()
        done.wait(10)  # the other thread works while this call records
        loss = (x * w).sum()
        loss.backward()
        return loss

    def eager_elsewhere():
        recording.wait(10)
        sgd = optim.SGD([other], lr=0.1)
        (other * 2).sum().backward()
        sgd.step()
        done.set()

    thread = threading.Thread(target=eager_elsewhere)
    thread.start()
    jitted, x = tx.jit(f), vec(1.0, 2.0, 3.0)
    jitted(x)
    thread.join()
    np.testing.assert_array_equal(other.numpy(), np.float32([0.8, 0.8, 0.8]))
    done.set()
    for _ in range(2):  # replays make f's ops only: `other` is not stepped again
        w.grad = None
        jitted(x)
    np.testing.assert_array_equal(other.numpy(), np.float32([0.8, 0.8, 0.8]))
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])


class _Trainer:
    def __init__(self, scale):
        self.w = tx.Tensor(np.full(2, scale, np.float32))

    @tx.jit
    def step(self, x):
        return x * self.w


def test_jit_on_a_method_binds_the_instance():
    """A third probe of the jit found @tx.jit on a method not binding the instance."""
    a, b, x = _Trainer(2.0), _Trainer(3.0), vec(1.0, 2.0)
    for _ in range(2):
        assert same(a.step(x), vec(2.0, 4.0)) and same(b.step(x), vec(3.0, 6.0))
    assert _Trainer.step.replays == 2
