"""A record per signature (jit/__init__.py): the arguments' shapes, dtypes, identities and
values that a replay could not follow, the modes of the modules, and a cache that evicts the
least recently used record."""
import numpy as np
import pytest

import tinygrad_tx as tx

from .helpers import chain_step, same, vec


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


def test_train_eval_mode_is_part_of_the_signature():
    tx.manual_seed(0)
    model = tx.nn.Sequential(tx.nn.Linear(4, 4), tx.nn.Dropout(0.5))
    f = tx.jit(lambda x: model(x))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    f(x)
    model.eval()
    np.testing.assert_array_equal(f(x).numpy(), model(x).numpy())  # no dropout: a second record
    assert f.traces == 2


def test_the_same_tensor_passed_twice_is_a_signature_of_its_own():
    """A probe of the jit found one tensor passed twice missing from the signature; now f(x, x) and
    f(x, y) are two signatures."""
    def f(a, b):
        return a - b

    jitted, x, y = tx.jit(f), vec(1.0, 2.0), vec(10.0, 20.0)
    for a, b in ((x, x), (x, y), (y, y), (y, x), (x, x.detach())):
        assert same(jitted(a, b), f(a, b))


def test_a_parameter_given_another_shape_or_dtype_records_anew():
    """A probe of the jit found a parameter given another shape or dtype between calls replayed with
    the old record (mean's 1/count a constant of it); each call checks them now."""
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


def test_dict_order_and_the_sign_of_zero_are_in_the_signature():
    """A probe of the jit found dict order and -0.0 against 0.0 missing from the signature."""
    def f(d, s):
        first = list(d.values())[0]
        return first / s

    jitted, a, b = tx.jit(f), vec(1.0), vec(-2.0)
    for d, s in (({"a": a, "b": b}, 0.0), ({"b": b, "a": a}, 0.0), ({"a": a, "b": b}, -0.0)):
        with np.errstate(divide="ignore"):
            assert same(jitted(d, s), f(d, s))
    assert jitted.traces == 3


def test_a_slice_argument_is_in_the_signature_by_value():
    """A third probe of the jit found a slice argument missing from the signature by value."""
    jitted, x = tx.jit(lambda x, part: x[part] * 2), vec(1.0, 2.0, 3.0)
    for part in (slice(0, 2), slice(0, 2), slice(1, 3), slice(0, 2)):
        assert same(jitted(x, part), x[part] * 2)
    assert (jitted.traces, jitted.replays) == (2, 2)
