"""tx.jit at the edges of what it can follow: each case runs a function eagerly and jitted on
the same calls and checks they agree bit for bit, or that the jit refuses with a JitError
(never a replay that silently computes something else). Found by probing the jit as a user
would; each test failed before its fix.
"""
import functools

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import nn, optim
from tinygrad_tx.jit import JitError


def same(a, b) -> bool:
    """Bit-for-bit equality of nested results (structure, types, dtypes and bytes)."""
    if isinstance(a, tx.Tensor) or isinstance(b, tx.Tensor):
        return (isinstance(a, tx.Tensor) and isinstance(b, tx.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and a.numpy().tobytes() == b.numpy().tobytes())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def vec(*values) -> tx.Tensor:
    return tx.Tensor(np.array(values, dtype=np.float32))


def test_a_result_with_a_graph_keeps_the_structure_around_it():
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


def test_the_same_tensor_passed_twice_is_a_signature_of_its_own():
    def f(a, b):
        return a - b

    jitted, x, y = tx.jit(f), vec(1.0, 2.0), vec(10.0, 20.0)
    for a, b in ((x, x), (x, y), (y, y), (y, x), (x, x.detach())):
        assert same(jitted(a, b), f(a, b))


def test_a_jitted_function_called_while_another_records_is_recorded_with_it():
    inner = tx.jit(lambda x: x * 2)
    outer = tx.jit(lambda x: inner(x) + 1)
    inner(vec(0.0))  # inner has a record of this signature before outer records
    for v in (1.0, 5.0, 9.0):
        assert same(outer(vec(v)), vec(2 * v + 1))
    assert outer.replays == 2


def test_an_argument_with_a_graph_is_refused_even_after_a_leaf_was_recorded():
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
    w = tx.Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    make, message = REFUSED[case]
    x = vec(0.0, 1.0)
    make(w)(x)  # eager runs
    w.grad = None
    with pytest.raises(JitError, match=message):
        tx.jit(make(w))(x)


def test_verify_compares_tensors_made_outside_ops():
    def f(x):
        return x + tx.Tensor(x.data * 2)  # raw arrays: a constant of the record

    jitted = tx.jit(f, verify=True)
    jitted(vec(1.0))
    with pytest.raises(JitError, match="made outside ops"):
        jitted(vec(2.0))


def test_a_parameter_given_another_shape_or_dtype_records_anew():
    w = tx.Tensor(np.ones((2, 2), np.float32), requires_grad=True)

    def f(x):
        return (x @ w).mean()

    jitted, x = tx.jit(f), tx.Tensor(np.ones((1, 2), np.float32))
    assert same(jitted(x), f(x)) and same(jitted(x), f(x))
    w.data = np.ones((2, 4), np.float32)  # mean's 1/count is a constant of the old record
    assert same(jitted(x), f(x)) and jitted.traces == 2
    w.data = np.ones((2, 4), np.float64)
    with pytest.raises(TypeError, match="dtype mismatch"):  # as eager, not a mixed-precision replay
        jitted(x)


def _dropout_model():
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))


def test_the_mode_of_every_submodule_in_reach_is_in_the_signature():
    holder = type("Holder", (), {})()
    holder.parts = [_dropout_model()]  # a list in an attribute
    step = tx.jit(lambda x: holder.parts[0](x))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    train = step(x)
    holder.parts[0][1].eval()  # only the submodule
    assert same(step(x), holder.parts[0](x)) and not same(step(x), train)


def test_modules_defined_after_the_decorator_and_jitted_modules_are_watched():
    global later_model

    @tx.jit
    def predict(x):
        return later_model(x)

    later_model = _dropout_model()
    x = tx.Tensor(np.ones((2, 4), np.float32))
    predict(x)
    later_model.eval()
    assert same(predict(x), later_model(x))

    model = _dropout_model()
    model.fn = "a module attribute"  # named like the jit's own: not copied onto it
    jitted = tx.jit(model)
    jitted(x)
    model.eval()
    assert same(jitted(x), model(x))


def test_module_zero_grad_inside_is_made_again_at_each_replay():
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


def test_a_module_hook_registered_after_recording_is_refused():
    model = nn.Linear(2, 2)
    step = tx.jit(lambda x: model(x))
    x = tx.Tensor(np.ones((1, 2), np.float32))
    step(x)
    handle = model.register_forward_hook(lambda m, args, out: out * 10)
    with pytest.raises(JitError, match="module hook"):
        step(x)
    handle.remove()
    assert same(step(x), model(x))


def test_dict_order_and_the_sign_of_zero_are_in_the_signature():
    def f(d, s):
        first = list(d.values())[0]
        return first / s

    jitted, a, b = tx.jit(f), vec(1.0), vec(-2.0)
    for d, s in (({"a": a, "b": b}, 0.0), ({"b": b, "a": a}, 0.0), ({"a": a, "b": b}, -0.0)):
        with np.errstate(divide="ignore"):
            assert same(jitted(d, s), f(d, s))
    assert jitted.traces == 3


def test_returned_arguments_stay_themselves_and_a_retained_graph_can_be_walked_again():
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
    w = vec(1.0, 2.0).requires_grad_()

    def f(x):
        h = x * w
        h.sum().backward()
        return h * 2

    jitted = tx.jit(f)
    for run in (f, jitted, jitted):
        with pytest.raises(RuntimeError, match="a second time"):
            run(vec(1.0, 1.0)).sum().backward()


def test_functools_partial_binds_a_model_whose_mode_is_watched():
    model = _dropout_model()
    step = tx.jit(functools.partial(lambda m, x: m(x), model))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    step(x)
    model.eval()
    assert same(step(x), model(x))


def test_a_detached_copy_of_the_result_with_a_graph_stays_detached():
    w = vec(1.0, 2.0).requires_grad_()
    jitted = tx.jit(lambda x: (lambda loss: (loss, loss, loss.detach()))((x * w).sum()))
    for _ in range(3):
        loss, again, logged = jitted(vec(3.0, 4.0))
        assert again is loss and logged.requires_grad is False and loss.requires_grad


class _Wrapper:
    """Callable and holding a model, as DataParallel or a user's trainer is."""

    def __init__(self, model):
        self.model = model

    def __call__(self, x):
        return self.model(x)


def test_modules_behind_callables_and_helpers_are_watched_and_eval_inside_is_replayed():
    wrapped = _Wrapper(_dropout_model())
    model = _dropout_model()

    def helper(x):  # the step reaches `model` only through this function
        return model(x)

    x = tx.Tensor(np.ones((2, 4), np.float32))
    for step, net in ((tx.jit(lambda x: wrapped(x)), wrapped.model), (tx.jit(lambda x: helper(x)), model)):
        step(x)
        net.eval()
        assert same(step(x), net(x))

    def evaluate(x):  # switches the mode itself, as an evaluation helper does
        model.eval()
        out = model(x)
        model.train()
        return out

    model.train()
    jitted, want = tx.jit(evaluate), evaluate(x)
    for _ in range(3):
        model.eval()  # the caller's mode, which evaluate() must leave as train, as eager does
        assert same(jitted(x), want) and model.training


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


def test_a_module_out_of_reach_is_guarded_by_its_mode_when_first_called():
    from types import SimpleNamespace

    holder = SimpleNamespace(inner=SimpleNamespace(model=_dropout_model()))  # out of the search's reach

    def f(x):
        out = holder.inner.model(x)
        holder.inner.model.eval()  # leaves it in eval mode, as the caller's next call finds it
        return out

    model, x = holder.inner.model, tx.Tensor(np.ones((2, 4), np.float32))
    jitted = tx.jit(f)
    jitted(x)  # recorded in train mode
    assert same(jitted(x), model(x)) and not model.training  # eval now: recorded anew, not replayed
    assert jitted.traces == 2


class _Trainer:
    def __init__(self, scale):
        self.w = tx.Tensor(np.full(2, scale, np.float32))

    @tx.jit
    def step(self, x):
        return x * self.w


def test_jit_on_a_method_binds_the_instance():
    a, b, x = _Trainer(2.0), _Trainer(3.0), vec(1.0, 2.0)
    for _ in range(2):
        assert same(a.step(x), vec(2.0, 4.0)) and same(b.step(x), vec(3.0, 6.0))
    assert _Trainer.step.replays == 2


def test_a_refusal_by_verify_holds_for_later_calls():
    def f(x):
        return x * 2 if x.data[0] > 0 else x * 3  # a branch on raw .data, unseen by the recorder

    jitted = tx.jit(f, verify=True)
    jitted(vec(1.0))
    with pytest.raises(JitError):
        jitted(vec(-1.0))
    for value in (1.0, 1.0, -1.0):  # two agreeing calls must not confirm one branch for all
        with pytest.raises(JitError):
            jitted(vec(value))


def test_a_slice_argument_is_in_the_signature_by_value():
    jitted, x = tx.jit(lambda x, part: x[part] * 2), vec(1.0, 2.0, 3.0)
    for part in (slice(0, 2), slice(0, 2), slice(1, 3), slice(0, 2)):
        assert same(jitted(x, part), x[part] * 2)
    assert (jitted.traces, jitted.replays) == (2, 2)


def test_a_returned_gradient_is_the_gradient_the_replay_left():
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
