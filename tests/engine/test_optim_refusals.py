"""What the optimizers (optim.py) refuse up front, changing nothing: hyperparameters that are
not finite or out of range, and state dicts that do not fit the optimizer."""
import pytest

from tinygrad_tx import optim

from ..helpers import leaf


@pytest.mark.parametrize("make, match", [
    (lambda p: optim.SGD(p, lr=float("nan")), "lr must be a finite number"),
    (lambda p: optim.Adam(p, lr=float("inf")), "lr must be a finite number"),
    (lambda p: optim.Adam(p, eps=-1e-8), "eps must be"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=-0.9), "momentum must be"),
    (lambda p: optim.AdamW(p, weight_decay=-0.01), "weight_decay must be"),
    (lambda p: optim.Adam(p, betas=(0.9,)), "betas must be two numbers"),
])
def test_optimizer_refuses_bad_hyperparameters(make, match):
    """lr=nan or inf, a negative eps, momentum or weight_decay, and betas=(0.9,) are refused; they
    were accepted."""
    with pytest.raises(ValueError, match=match):
        make([leaf([1.0])])


def _trained_adam_state():
    p = leaf([1.0, 2.0])
    adam = optim.Adam([p])
    (p * p).sum().backward()
    adam.step()
    return p, adam.state_dict()


@pytest.mark.parametrize("damage, match", [
    (lambda s: s["state"].update({"5": s["state"]["0"]}), "state for parameter '5'"),
    (lambda s: s.pop("t"), "has no t"),
    (lambda s: s["state"]["0"].pop("v"), r"has state \['m'\], Adam keeps \['m', 'v'\]"),
])
def test_optimizer_load_state_dict_names_what_is_wrong(damage, match):
    """A state dict with an out-of-range key, no step count, or state holding only `m` is refused
    with what is wrong; it failed later with a KeyError or IndexError."""
    p, state = _trained_adam_state()
    damage(state)
    fresh = optim.Adam([p])
    with pytest.raises(ValueError, match=match):
        fresh.load_state_dict(state)
    assert fresh.t == 0 and not fresh.state  # nothing changed
