"""tx.jit: a replayed step equals the eager step bit for bit, and the jit refuses what it cannot replay.

The truth a replay is checked against is eager execution of the same function
from the same seed (dropout included), and for gradients through a jitted
function, finite differences (tx.gradcheck).
"""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import GPT, Transformer
from tinygrad_tx import optim
from tinygrad_tx.backward import queue_callback

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


def transformer_run(device, data, use_jit):
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

    run = tx.jit(step) if use_jit else step
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


def chain_step(x, w):
    loss = ((x * w + x).tanh() * w).sum()
    loss.backward()
    return loss


def test_new_shape_records_anew_and_old_shapes_replay(device):
    step = tx.jit(chain_step)
    for shape in [(2, 3), (2, 3), (2, 3), (4, 3), (4, 3), (2, 3), (4, 3)]:
        x = tx.Tensor(np.random.default_rng(0).standard_normal(shape), requires_grad=True, device=device)
        w = tx.Tensor(np.full(shape, 0.5), requires_grad=True, device=device)
        xe, we = (tx.Tensor(t.numpy(), requires_grad=True, device=device) for t in (x, w))
        assert step(x, w).item() == chain_step(xe, we).item()
        np.testing.assert_array_equal(x.grad.numpy(), xe.grad.numpy())
        np.testing.assert_array_equal(w.grad.numpy(), we.grad.numpy())
    assert (step.traces, step.replays) == (2, 5)


def test_least_recently_used_record_is_evicted():
    step = tx.jit(chain_step, max_traces=2)

    def call(n):
        step(tx.Tensor(np.ones((n,)), requires_grad=True), tx.Tensor(np.ones((n,)), requires_grad=True))

    for n in (1, 2, 1, 3):  # 2 is now the least recently used: evicted when 3 arrives
        call(n)
    assert len(step.tapes) == 2 and (step.traces, step.replays) == (3, 1)
    call(1)
    assert (step.traces, step.replays) == (3, 2)  # kept
    call(2)
    assert step.traces == 4  # evicted, so recorded anew
    assert step.memory() >= 0


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


def test_train_eval_mode_is_part_of_the_signature():
    tx.manual_seed(0)
    model = tx.nn.Sequential(tx.nn.Linear(4, 4), tx.nn.Dropout(0.5))
    f = tx.jit(lambda x: model(x))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    f(x)
    model.eval()
    np.testing.assert_array_equal(f(x).numpy(), model(x).numpy())  # no dropout: a second record
    assert f.traces == 2


def test_tape_prints_ops_and_the_backward_schedule():
    step = tx.jit(chain_step)
    x, w = tx.Tensor(np.ones(3), requires_grad=True), tx.Tensor(np.ones(3), requires_grad=True)
    step(x, w)
    text = str(step.tape(x, w))
    assert "Mul" in text and "Tanh" in text and "backward from #4" in text
    assert "leaf arg0" in text and "leaf arg1" in text


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
    """Ids are values, so a record cannot have proved them in range: a negative one would
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
