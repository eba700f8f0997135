"""Optimizers and gradient clipping (optim.py): hand-computed steps, trajectories against
torch.optim, the step counter, state dicts, and the in-place / dtype / version contract.
What they refuse up front is in test_optim_refusals.py, the schedules in test_schedules.py."""
import math

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor, nn, optim, schedules

from ..helpers import param


pytestmark = pytest.mark.usefixtures("on_each_device")


def set_grad(p, values):
    p.grad = Tensor(np.broadcast_to(np.asarray(values, dtype=p.dtype), p.shape).copy())


# -- Adam by hand ----------------------------------------------------------------------------------

# One scalar parameter p0 = 1, gradients 0.5, -1, 2; lr = 0.1, β1 = 0.9, β2 = 0.999, eps = 1e-8.
#   t=1: m = 0.1·0.5             = 0.05        v = 0.001·0.25               = 0.00025
#        m̂ = 0.05 / (1 - 0.9)    = 0.5         v̂ = 0.00025 / (1 - 0.999)    = 0.25
#   t=2: m = 0.9·0.05 + 0.1·(-1) = -0.055      v = 0.999·0.00025 + 0.001·1  = 0.00124975
#        m̂ = -0.055 / 0.19                     v̂ = 0.00124975 / 0.001999
#   t=3: m = 0.9·(-0.055) + 0.1·2 = 0.1505     v = 0.999·0.00124975 + 0.001·4 = 0.00524850025
#        m̂ = 0.1505 / 0.271                    v̂ = 0.00524850025 / 0.002997001
#   each step: p -= 0.1 · m̂ / (√v̂ + 1e-8)
GRADS = [0.5, -1.0, 2.0]
M = [0.05, -0.055, 0.1505]
V = [0.00025, 0.00124975, 0.00524850025]
BIAS1 = [0.1, 0.19, 0.271]  # 1 - 0.9^t
BIAS2 = [0.001, 0.001999, 0.002997001]  # 1 - 0.999^t


def hand_adam_trajectory(p0=1.0, lr=0.1, eps=1e-8):
    p, out = p0, []
    for m, v, b1, b2 in zip(M, V, BIAS1, BIAS2):
        m_hat, v_hat = m / b1, v / b2
        p = p - lr * m_hat / (math.sqrt(v_hat) + eps)
        out.append(p)
    return out


def test_adam_first_three_steps_match_hand_computation():
    p = param([1.0])
    opt = optim.Adam([p], lr=0.1)
    for t, (g, expected) in enumerate(zip(GRADS, hand_adam_trajectory())):
        set_grad(p, g)
        opt.step()
        np.testing.assert_allclose(p.backend.to_host(opt.state[0]["m"]), [M[t]], rtol=1e-12)
        np.testing.assert_allclose(p.backend.to_host(opt.state[0]["v"]), [V[t]], rtol=1e-12)
        np.testing.assert_allclose(p.numpy(), [expected], rtol=1e-12)


def test_step_counter_advances_once_per_step_for_all_params():
    """Two (and more) parameters must all see t = 1, 2, 3 — not 1, 2 then 3, 4 …"""
    a, b = param([1.0]), param([[1.0, 1.0], [1.0, 1.0]])
    idle = param([5.0])  # never gets a gradient: skipped, not counted
    opt = optim.Adam([a, b, idle], lr=0.1)
    for t, (g, expected) in enumerate(zip(GRADS, hand_adam_trajectory()), start=1):
        set_grad(a, g)
        set_grad(b, g)
        opt.step()
        assert opt.t == t
        np.testing.assert_allclose(a.numpy(), [expected], rtol=1e-12)
        np.testing.assert_allclose(b.numpy(), np.full((2, 2), expected), rtol=1e-12)
    assert idle.numpy()[0] == 5.0 and 2 not in opt.state


# -- trajectories against torch.optim --------------------------------------------------------------

CONFIGS = [
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, betas=(0.85, 0.995), weight_decay=0.3)),
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.5, weight_decay=1e-2)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
]


def mlp_float64(seed=0):
    tx.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), nn.Linear(16, 3))
    for p in model.parameters():
        p.data = p.data.astype(np.float64)
    return model


def run_both(torch, name, kwargs, steps=50, schedule=None, biases_not_decayed=False):
    """Train our MLP and torch's copy of it on the same batches; return both loss lists.
    biases_not_decayed: ours gets the biases as no_decay, torch a parameter group of them with
    weight_decay 0."""
    model = mlp_float64()
    biases = [p for p in model.parameters() if p.ndim == 1]
    ours = getattr(optim, name)(model.parameters(), **kwargs, **({"no_decay": biases} if biases_not_decayed else {}))
    w1, b1, w2, b2 = [torch.tensor(p.numpy(), requires_grad=True) for p in model.parameters()]
    groups = ([{"params": [w1, w2]}, {"params": [b1, b2], "weight_decay": 0.0}] if biases_not_decayed
              else [w1, b1, w2, b2])
    theirs = getattr(torch.optim, name)(groups, **kwargs)
    sched = schedule(ours) if schedule else None
    rng = np.random.default_rng(1)
    our_losses, torch_losses = [], []
    for _ in range(steps):
        x, y = rng.standard_normal((8, 4)), rng.standard_normal((8, 3))
        l1, l2 = model.layers
        loss = ((l2(l1(Tensor(x)).tanh()) - Tensor(y)) ** 2).mean()
        ours.zero_grad()
        loss.backward()
        ours.step()
        our_losses.append(loss.item())

        tl = ((torch.tanh(torch.from_numpy(x) @ w1 + b1) @ w2 + b2 - torch.from_numpy(y)) ** 2).mean()
        theirs.zero_grad()
        tl.backward()
        for group in theirs.param_groups:
            group["lr"] = sched.get_lr() if sched else group["lr"]  # the rate ours just used
        theirs.step()
        torch_losses.append(tl.item())
        if sched:
            sched.step()
    for p, tp in zip(model.parameters(), [w1, b1, w2, b2]):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-9)
    return np.array(our_losses), np.array(torch_losses)


def max_relative_difference(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_trajectory_matches_torch(torch, name, kwargs):
    ours, theirs = run_both(torch, name, kwargs)
    assert ours[-1] < ours[0]  # it did train
    assert max_relative_difference(ours, theirs) < 1e-5


@pytest.mark.parametrize("name,kwargs", [c for c in CONFIGS if c[1].get("weight_decay")],
                         ids=[n for n, k in CONFIGS if k.get("weight_decay")])
def test_no_decay_matches_a_torch_group_without_weight_decay(torch, name, kwargs):
    ours, theirs = run_both(torch, name, kwargs, biases_not_decayed=True)
    assert max_relative_difference(ours, theirs) < 1e-5
    decayed, _ = run_both(torch, name, kwargs)  # and the exemption changes the trajectory
    assert max_relative_difference(ours, decayed) > 1e-4


def test_no_decay_is_saved_and_checked():
    a, b = param([1.0, 2.0]), param([[1.0]])
    opt = optim.AdamW([a, b], lr=0.1, weight_decay=0.5, no_decay=[a])
    set_grad(a, np.zeros(2))
    set_grad(b, np.zeros((1, 1)))
    opt.step()  # zero gradients: only the decay moves a weight
    np.testing.assert_allclose(a.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(b.numpy(), [[1.0 - 0.1 * 0.5]])
    fresh = optim.AdamW([a, b], lr=0.1, weight_decay=0.5)
    fresh.load_state_dict(opt.state_dict())
    assert fresh.no_decay == (0,)
    old = opt.state_dict()
    del old["hyperparameters"]["no_decay"]  # a state saved before no_decay existed decayed everything
    exempting = optim.AdamW([a, b], lr=0.1, weight_decay=0.5, no_decay=[a])
    exempting.load_state_dict(old)
    assert exempting.no_decay == ()
    with pytest.raises(ValueError, match="AdamW: a no_decay tensor .* is not among the parameters"):
        optim.AdamW([b], no_decay=[a])


def test_trajectory_with_schedule_matches_torch(torch):
    """A schedule changes `optimizer.lr`, and the next step uses it: here the rate for step s
    is also handed to torch, so a schedule applied at the wrong step would show."""
    schedule = lambda opt: schedules.WarmupCosine(opt, warmup=5, total_steps=30, lr_min=1e-3)
    ours, theirs = run_both(torch, "Adam", dict(lr=3e-2), steps=30, schedule=schedule)
    assert max_relative_difference(ours, theirs) < 1e-5


# -- the contract of step() ------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
                                  lambda ps: optim.Adam(ps, weight_decay=0.1), lambda ps: optim.AdamW(ps)],
                         ids=["SGD", "Adam", "AdamW"])
def test_updates_in_place_keep_float32_and_bump_version(make):
    p = param(np.ones((3, 2)), dtype=np.float32)
    data = p.data
    opt = make([p])
    set_grad(p, 0.5)
    opt.step()
    state_arrays = {k: v for k, v in opt.state[0].items()}
    set_grad(p, -0.25)
    version = p._version
    opt.step()
    assert p.data is data and p.dtype == np.float32  # updated in place, still float32
    assert p._version == version + 1
    for name, array in opt.state[0].items():
        assert array is state_arrays[name] and array.dtype == np.float32  # allocated once


def test_graph_that_saw_old_values_refuses_backward_after_step():
    p = param([1.0, 2.0])
    y = (p * p).sum()  # saved p for backward
    set_grad(p, [1.0, 1.0])
    optim.SGD([p], lr=0.1).step()
    with pytest.raises(RuntimeError, match="modified"):
        y.backward()


def test_step_never_writes_into_gradients():
    """Gradients can be shared between tensors (a + b gives both the same array)."""
    a, b = param([1.0, 2.0]), param([3.0, 4.0])
    ((a + b) * Tensor([1.0, 2.0], dtype=np.float64)).sum().backward()
    before = a.grad.numpy()
    opt = optim.Adam([a, b], weight_decay=0.5)
    opt.step()
    opt.step()
    np.testing.assert_array_equal(a.grad.numpy(), before)
    np.testing.assert_array_equal(b.grad.numpy(), before)


def test_zero_grad_sets_none_and_skipped_params_stay():
    a, b = param([1.0]), param([2.0])
    opt = optim.SGD([a, b], lr=0.5)
    set_grad(a, 1.0)
    opt.step()
    assert a.numpy()[0] == 0.5 and b.numpy()[0] == 2.0
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_lr_attribute_is_read_at_every_step():
    p = param([1.0])
    opt = optim.SGD([p], lr=0.5)
    set_grad(p, 1.0)
    opt.lr = 0.25
    opt.step()
    assert p.numpy()[0] == 0.75


def test_params_accept_generators_and_deduplicate():
    a, b = param([1.0]), param([2.0])
    opt = optim.Adam(p for p in [a, b, a])
    assert len(opt.params) == 2 and opt.params[0] is a and opt.params[1] is b
    set_grad(a, 1.0)
    optim.SGD([a, a], lr=1.0).step()  # a tied parameter listed twice is updated once
    assert a.numpy()[0] == 0.0


def test_bad_params_are_refused_clearly():
    with pytest.raises(ValueError, match="requires_grad=False"):
        optim.SGD([Tensor([1.0])], lr=0.1)
    with pytest.raises(TypeError, match="not a Tensor"):
        optim.SGD([np.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(ValueError, match="leaf"):
        optim.Adam([param([1.0]) * 2])
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([param([1.0])], lr=0.1, nesterov=True)


# -- state dicts -----------------------------------------------------------------------------------

def train_steps(model, opt, steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        loss = (model(Tensor(rng.standard_normal((4, 4)))) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("name,kwargs", [("Adam", dict(lr=1e-2)), ("AdamW", dict(lr=1e-2)),
                                         ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True))])
def test_state_dict_round_trip_resumes_exactly(tmp_path, name, kwargs):
    model = mlp_float64()
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    train_steps(model, opt, 3, seed=0)
    tx.save({"model": model.state_dict(), "optim": opt.state_dict()}, tmp_path / "ckpt.npz")
    train_steps(model, opt, 3, seed=1)

    ckpt = tx.load(tmp_path / "ckpt.npz")
    resumed = mlp_float64(seed=5)
    resumed.load_state_dict(ckpt["model"])
    opt2 = getattr(optim, name)(resumed.parameters(), lr=123.0)
    opt2.load_state_dict(ckpt["optim"])
    assert opt2.lr == kwargs["lr"] and opt2.t == 3
    train_steps(resumed, opt2, 3, seed=1)
    for p, q in zip(model.parameters(), resumed.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_state_dict_is_a_copy():
    p = param([1.0])
    opt = optim.Adam([p])
    set_grad(p, 1.0)
    opt.step()
    saved = opt.state_dict()
    m = saved["state"]["0"]["m"].copy()
    opt.step()
    np.testing.assert_array_equal(saved["state"]["0"]["m"], m)


def test_load_state_dict_errors_and_changes_nothing():
    p, q = param([1.0, 2.0]), param([3.0])
    opt = optim.Adam([p, q], lr=0.1)
    set_grad(p, 1.0)
    opt.step()
    good = opt.state_dict()

    other = optim.Adam([param([0.0, 0.0])], lr=0.5)
    with pytest.raises(ValueError, match="2 parameters"):
        other.load_state_dict(good)
    wrong_shape = optim.Adam([param([0.0, 0.0, 0.0]), param([0.0])], lr=0.5)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        wrong_shape.load_state_dict(good)
    assert wrong_shape.lr == 0.5 and wrong_shape.t == 0 and wrong_shape.state == {}
    with pytest.raises(ValueError, match="Adam"):
        optim.SGD([param([0.0, 0.0]), param([0.0])], lr=0.1).load_state_dict(good)


# -- gradient clipping -----------------------------------------------------------------------------

@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(torch, max_norm):
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4,), (2, 2, 2)]]
    ours = [param(np.zeros_like(g), dtype=np.float32) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, t, g in zip(ours, theirs, grads):
        p.grad, t.grad = Tensor(g.copy()), torch.from_numpy(g.copy())
    skipped = param([1.0], dtype=np.float32)  # no grad: ignored
    norm = optim.clip_grad_norm(ours + [skipped], max_norm)
    torch_norm = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm == pytest.approx(torch_norm.item(), rel=1e-6)
    for p, t in zip(ours, theirs):
        assert p.grad.dtype == np.float32
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_of_float16_gradients_does_not_overflow():
    """Squares of float16 summed in float16 overflow past 65504 (a norm of 256): inf would
    zero every gradient. The norm is summed in float32 and more; hand-computed truth."""
    g = np.full(100, 300.0)  # norm 3000
    p = param(np.zeros(100), dtype=np.float16)
    p.grad = Tensor(g.astype(np.float16))
    assert optim.clip_grad_norm([p], max_norm=30.0) == pytest.approx(3000.0)
    np.testing.assert_allclose(p.grad.numpy(), np.full(100, 3.0), rtol=1e-3)


def test_clip_grad_norm_scales_shared_gradients_once():
    """`a + b` hands both leaves the same gradient array: scaling it in place twice would be wrong."""
    a, b = param([3.0, 0.0]), param([0.0, 4.0])
    (a + b).sum().backward()
    norm = optim.clip_grad_norm([a, b], max_norm=1.0)
    assert norm == pytest.approx(2.0)
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [0.5, 0.5], rtol=1e-6)


# -- the GPU's fused update (fused_adam.py) ----------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls, kwargs", [(optim.Adam, {}), (optim.Adam, {"weight_decay": 0.1}),
                                         (optim.AdamW, {"weight_decay": 0.1})])
def test_fused_adam_is_the_readable_update_bit_for_bit(on_each_device, monkeypatch, cls, kwargs, dtype):
    """On CuPy, Adam's update is one kernel a parameter, doing the readable update's operations in
    the same order and rounding: 5 steps of both give the same bits (elsewhere both are the readable
    code, and the test is trivially true)."""
    from tinygrad_tx import optim as optim_module

    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 17)).astype(dtype)
    grads = [rng.normal(size=(3, 17)).astype(dtype) * 10.0 ** k for k in range(-2, 3)]

    def trajectory() -> list:
        p = Tensor(start.copy(), requires_grad=True)
        opt = cls([p], lr=1e-2, betas=(0.9, 0.98), eps=1e-9, **kwargs)
        out = []
        for g in grads:
            p.grad = Tensor(g)
            opt.step()
            out.append(p.numpy().copy())
        return out

    fused = trajectory()
    monkeypatch.setattr(optim_module, "adam_kernel", lambda xp, dtype: None)
    readable = trajectory()
    for a, b in zip(fused, readable):
        assert a.dtype == np.dtype(dtype) and np.array_equal(a, b)
