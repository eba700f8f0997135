"""Learning-rate schedules (schedules.py): each against its formula, and resumed exactly from
a state dict."""
import pytest

import tinygrad_tx as tx
from tinygrad_tx import optim, schedules

from ..helpers import param


pytestmark = pytest.mark.usefixtures("on_each_device")


def sgd(lr=0.0):
    return optim.SGD([param([0.0])], lr=lr)


def test_noam_schedule_matches_the_formula():
    d_model, warmup, factor = 512, 400, 2.0
    formula = lambda s: factor * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
    opt = sgd()
    sched = schedules.NoamSchedule(opt, d_model=d_model, warmup=warmup, factor=factor)
    assert opt.lr == pytest.approx(formula(1))  # set for the first step at once
    for s in (1, warmup, 10 * warmup):
        assert sched.lr_at(s) == pytest.approx(formula(s), rel=1e-12)
    assert sched.lr_at(warmup) == pytest.approx(factor * (d_model * warmup) ** -0.5)  # the peak
    lrs = []
    for _ in range(10 * warmup):
        lrs.append(opt.lr)
        sched.step()
    assert lrs[0] == formula(1) and lrs[warmup - 1] == formula(warmup) and lrs[-1] == formula(10 * warmup)
    assert max(lrs) == lrs[warmup - 1]


def test_warmup_cosine_at_its_corners():
    opt = sgd(lr=1e-3)  # the peak: the optimizer's rate, given once
    sched = schedules.WarmupCosine(opt, warmup=10, total_steps=110, lr_min=1e-5)
    assert opt.lr == pytest.approx(1e-4)  # step 1: lr_max / warmup, not 0 (a wasted step)
    assert sched.lr_at(10) == pytest.approx(1e-3)  # end of warm-up
    assert sched.lr_at(60) == pytest.approx(1e-5 + 0.5 * (1e-3 - 1e-5))  # half-way down the cosine
    assert sched.lr_at(110) == pytest.approx(1e-5) and sched.lr_at(500) == pytest.approx(1e-5)
    no_warmup = schedules.WarmupCosine(sgd(lr=1.0), warmup=0, total_steps=10)
    assert no_warmup.lr_at(10) == pytest.approx(0.0, abs=1e-12) and no_warmup.lr_at(1) < 1.0
    with pytest.raises(ValueError):
        schedules.WarmupCosine(sgd(lr=1.0), warmup=10, total_steps=10)


def test_warmup_linear_falls_in_a_straight_line_to_zero():
    opt = sgd(lr=1e-3)
    sched = schedules.WarmupLinear(opt, warmup=10, total_steps=110)
    assert opt.lr == pytest.approx(1e-4)  # the same warm-up as the cosine's
    assert sched.lr_at(10) == pytest.approx(1e-3)
    assert sched.lr_at(35) == pytest.approx(0.75e-3) and sched.lr_at(60) == pytest.approx(0.5e-3)  # a line
    assert sched.lr_at(110) == 0.0 and sched.lr_at(500) == 0.0
    floor = schedules.WarmupLinear(sgd(lr=1.0), warmup=0, total_steps=10, lr_min=0.2)
    assert floor.lr_at(5) == pytest.approx(0.2 + 0.8 * 0.5) and floor.lr_at(10) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="WarmupLinear"):
        schedules.WarmupLinear(sgd(lr=1.0), warmup=10, total_steps=10)


def test_lambda_lr_scales_the_initial_rate():
    opt = optim.SGD([param([0.0])], lr=0.5)
    sched = schedules.LambdaLR(opt, lambda s: 1 / s)
    assert opt.lr == 0.5
    sched.step()
    assert opt.lr == 0.25 and sched.get_lr() == 0.25


@pytest.mark.parametrize("make", [lambda o: schedules.NoamSchedule(o, 64, warmup=4),
                                  lambda o: schedules.WarmupCosine(o, 3, 20, lr_min=0.1),
                                  lambda o: schedules.WarmupLinear(o, 3, 20),
                                  lambda o: schedules.LambdaLR(o, lambda s: 0.9 ** s)],
                         ids=["noam", "cosine", "linear", "lambda"])
def test_schedule_state_dict_resumes_exactly(tmp_path, make):
    opt = optim.SGD([param([0.0])], lr=1.0)
    sched = make(opt)
    for _ in range(6):
        sched.step()
    tx.save({"sched": sched.state_dict()}, tmp_path / "s.npz")
    expected = []
    for _ in range(5):
        sched.step()
        expected.append(opt.lr)

    opt2 = optim.SGD([param([0.0])], lr=1.0)
    resumed = make(opt2)
    resumed.load_state_dict(tx.load(tmp_path / "s.npz")["sched"])
    assert opt2.lr == sched.lr_at(7)
    got = []
    for _ in range(5):
        resumed.step()
        got.append(opt2.lr)
    assert got == expected
