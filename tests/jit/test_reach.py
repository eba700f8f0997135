"""What a step reaches (jit/reach.py): the modules and tensors it finds through globals,
closures, containers, fields of plain objects, callables and helpers are watched, and a
change to any of them, between calls or made by the step itself after using it, records
anew: never a stale replay. Each test failed before its fix."""
import functools
from dataclasses import dataclass

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import nn
from tinygrad_tx.jit import JitError

from .helpers import same, vec


# -- modules in reach ------------------------------------------------------------------------------

def _dropout_model():
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))


def test_the_mode_of_every_submodule_in_reach_is_in_the_signature():
    """A probe of the jit found eval() on a submodule in reach (here in a list in an attribute)
    unseen: its mode was not in the signature."""
    holder = type("Holder", (), {})()
    holder.parts = [_dropout_model()]  # a list in an attribute
    step = tx.jit(lambda x: holder.parts[0](x))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    train = step(x)
    holder.parts[0][1].eval()  # only the submodule
    assert same(step(x), holder.parts[0](x)) and not same(step(x), train)


def test_modules_defined_after_the_decorator_and_jitted_modules_are_watched():
    """A probe of the jit found the modes of a global module defined after the decorator, and of a
    module jitted itself (tx.jit(model)), unwatched."""
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


def test_functools_partial_binds_a_model_whose_mode_is_watched():
    """A probe of the jit found the mode of a model bound with functools.partial unwatched."""
    model = _dropout_model()
    step = tx.jit(functools.partial(lambda m, x: m(x), model))
    x = tx.Tensor(np.ones((2, 4), np.float32))
    step(x)
    model.eval()
    assert same(step(x), model(x))


class _Wrapper:
    """Callable and holding a model, as DataParallel or a user's trainer is."""

    def __init__(self, model):
        self.model = model

    def __call__(self, x):
        return self.model(x)


def test_modules_behind_callables_and_helpers_are_watched_and_eval_inside_is_replayed():
    """A second probe of the jit found modules reached through a callable holder (DataParallel, a
    trainer with __call__) or a helper function unwatched, so eval() went unseen, and eval()
    inside the step not made again by replays."""
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


def test_a_module_out_of_reach_is_guarded_by_its_mode_when_first_called():
    """A third probe of the jit found a step that ends with model.eval(), on a module out of the
    search's reach, replaying train-mode dropout ever after; such a module is guarded by its mode
    when first called."""
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


# -- changes between calls -------------------------------------------------------------------------

def _changes():
    """Changes to a model between two calls of a jitted step, each a function of the model."""
    def dropout_off(m):
        m.drop.p = 0.0

    def append_a_layer(m):
        m.blocks.append(tx.nn.Linear(3, 3))

    def replace_a_layer(m):
        m.blocks.items[0] = tx.nn.Linear(3, 3)

    def replace_a_submodule(m):
        m.head = tx.nn.Linear(3, 2)

    def rebind_a_weight(m):
        m.head.weight = tx.Tensor(np.ones((3, 2), np.float32), requires_grad=True)

    def replace_an_item_of_a_plain_list(m):
        m.extra[0] = tx.Tensor(np.full(3, 5.0, np.float32))

    return [dropout_off, append_a_layer, replace_a_layer, replace_a_submodule, rebind_a_weight,
            replace_an_item_of_a_plain_list]


class _Net(tx.nn.Module):
    def __init__(self):
        self.blocks = tx.nn.ModuleList([tx.nn.Linear(3, 3)])
        self.drop = tx.nn.Dropout(0.5)
        self.head = tx.nn.Linear(3, 2)
        self.extra = [tx.Tensor(np.ones(3, np.float32))]

    def forward(self, x):
        for block in self.blocks:
            x = block(x).tanh()
        return self.head(self.drop(x * self.extra[0]))


@pytest.mark.parametrize("change", _changes(), ids=lambda f: f.__name__)
def test_a_model_changed_between_calls_is_recorded_anew(change):
    """Dropout.p = 0.0, ModuleList.append(...), a replaced submodule went
    unnoticed; the replays ran the old graph."""
    def run(jitted: bool):
        tx.manual_seed(0)
        model = _Net()
        step = tx.jit(lambda x: model(x).sum()) if jitted else (lambda x: model(x).sum())
        out = []
        for i in range(4):
            if i == 2:
                change(model)
            tx.manual_seed(i)
            out.append(step(tx.Tensor(np.full((2, 3), i + 1.0, np.float32))).numpy().tobytes())
        return out, step

    (eager, _), (jitted, step) = run(False), run(True)
    assert jitted == eager
    assert step.replays == 2  # calls 1 and 3: the change made call 2 record anew


def test_a_global_rebound_between_calls_is_recorded_anew():
    """The same class: a model bound to a global again between calls went unnoticed, and
    replays ran the old one."""
    global _GLOBAL_MODEL
    _GLOBAL_MODEL = tx.nn.Linear(2, 1)

    def f(x):
        return _GLOBAL_MODEL(x)

    jitted, x = tx.jit(f), vec(1.0, 2.0)
    jitted(x)
    _GLOBAL_MODEL = tx.nn.Linear(2, 1)
    assert jitted(x).numpy().tobytes() == f(x).numpy().tobytes()
    assert jitted.replays == 0 and jitted.traces == 2


# -- a tensor swapped between calls, wherever the step reaches it ----------------------------------

@dataclass
class Batch:
    """A plain object holding a tensor (an argument, or reached through a global)."""
    w: tx.Tensor


class Holder:
    def __init__(self, w):
        self.parts = {"w": [w]}


PARAMS = {"w": vec(0.0)}
HOLDER = Holder(vec(0.0))
CONFIG = Batch(vec(0.0))


def _from_globals_dict(x, batch):
    return x * PARAMS["w"]


def _from_a_plain_object(x, batch):
    return x * CONFIG.w


def _deep_in_an_object(x, batch):
    return x * HOLDER.parts["w"][0]


def _through_a_helper(x, batch):
    return _from_globals_dict(x, batch) + 0.0


def _method_of_the_argument(x, batch):
    return x * batch.w


REACHED = {  # how the step reaches the tensor, and how a call puts another one there
    "a global dict's item": (_from_globals_dict, lambda w, batch: PARAMS.__setitem__("w", w)),
    "a field of a global dataclass": (_from_a_plain_object, lambda w, batch: setattr(CONFIG, "w", w)),
    "an item of a list in a dict in an attribute": (_deep_in_an_object,
                                                    lambda w, batch: HOLDER.parts["w"].__setitem__(0, w)),
    "a global of a helper function": (_through_a_helper, lambda w, batch: PARAMS.__setitem__("w", w)),
    "a field of a dataclass argument": (_method_of_the_argument, lambda w, batch: setattr(batch, "w", w)),
}


@pytest.mark.parametrize("case", sorted(REACHED))
def test_a_tensor_swapped_between_calls_is_never_replayed_stale(case):
    """`PARAMS["w"]` replaced between calls gave eager 0, 3, 6, 9 and the jit
    0, 0, 0, 0 (a dataclass argument's field too): only the globals themselves were compared. Now
    every way the record's tensors were reached is checked before each replay."""
    step, swap = REACHED[case]
    batch, jitted = Batch(vec(0.0)), tx.jit(step)
    for i in range(4):
        swap(vec(float(i)), batch)
        assert jitted(vec(3.0), batch).numpy().tolist() == step(vec(3.0), batch).numpy().tolist() == [3.0 * i]
    assert jitted.traces == 4


def test_a_tensor_left_where_it_was_is_replayed():
    batch, jitted = Batch(vec(2.0)), tx.jit(_method_of_the_argument)
    for i in range(3):
        CONFIG.w = CONFIG.w  # the same tensor put back: no change
        assert jitted(vec(float(i)), batch).numpy().tolist() == [2.0 * i]
    assert jitted.traces == 1 and jitted.replays == 2


def test_a_tensor_found_no_way_the_jit_can_look_again_is_refused():
    import weakref

    w = vec(2.0)
    ref = weakref.ref(w)  # the step reaches w only through a weak reference

    with pytest.raises(JitError, match="found in no place the jit looks again"):
        tx.jit(lambda x: x * ref())(vec(1.0))


# -- what the step itself changes, after the record relied on it -----------------------------------

def test_a_step_that_stops_a_tensor_requiring_grad_after_using_it_records_anew():
    """A step calling `p.requires_grad_(False)` after using p replayed with gradients to
    p, where eager raises at the next call: the record's checks were taken as the step left them,
    not as the record used them."""
    def run(make):
        p = tx.Tensor(np.ones(2, np.float32), requires_grad=True)

        def step(x):
            loss = (x * p).sum()
            loss.backward()
            p.requires_grad_(False)
            return loss

        outcomes = []
        for _ in range(3):
            try:
                make(step)(vec(1.0, 2.0))
                outcomes.append(p.grad.numpy().tolist())
            except RuntimeError as e:
                outcomes.append(str(e).split(":")[0])
        return outcomes

    jitted = {}
    assert run(lambda step: jitted.setdefault("f", tx.jit(step))) == run(lambda step: step)


def _changed_after_use():
    """Ways a step changes, after using it, something its record relied on."""
    model, spare = tx.nn.Sequential(tx.nn.Linear(2, 2), tx.nn.Dropout(0.5)), tx.nn.Linear(2, 2)
    box = {"w": vec(1.0, 1.0)}
    return [
        ("requires_grad_(True)", lambda x: ((x * box["w"]).sum(), box["w"].requires_grad_(True))[0]),
        ("Dropout.p", lambda x: (model(x).sum(), setattr(model[1], "p", 0.0))[0]),
        ("a submodule", lambda x: (model(x).sum(), model.layers.__setitem__(0, spare))[0]),
        ("a tensor in a dict", lambda x: ((x * box["w"]).sum(), box.__setitem__("w", box["w"] * 2.0))[0]),
    ]


@pytest.mark.parametrize("case", range(4), ids=[name for name, _ in _changed_after_use()])
def test_what_the_step_changes_after_its_record_used_it_records_anew(case):
    results = {}
    for world in ("eager", "jit"):
        tx.manual_seed(0)
        name, step = _changed_after_use()[case]
        run = tx.jit(step) if world == "jit" else step
        results[world] = []
        for call in range(4):
            tx.manual_seed(call)
            out = run(tx.Tensor(np.ones((3, 2), np.float32)))
            results[world].append((out.numpy().tobytes(), out.requires_grad))
    assert results["jit"] == results["eager"]


def test_a_step_that_changes_what_it_reads_at_every_call_records_each_call_and_says_so():
    """The other side of the same rule: a counter the step increments is a change at every call, so
    every call records (and the counter counts as in eager); a warning says so, once."""
    class Counting(tx.nn.Module):
        def __init__(self):
            self.lin, self.calls, self.mode = tx.nn.Linear(2, 2), 0, "on"

        def forward(self, x):
            self.calls += 1
            self.mode = "on"  # the same value every time: a change at the first call only
            return self.lin(x)

    model = Counting()
    jitted = tx.jit(lambda x: model(x).sum())
    with pytest.warns(RuntimeWarning, match=r"changes what it reads from outside at every call \(Counting.calls\)"):
        for _ in range(4):
            jitted(vec(1.0, 2.0))
    assert jitted.replays == 0 and model.calls == 4
    model.forward = lambda x: model.lin(x)  # no more counting: recorded once more, then replayed
    for _ in range(3):
        jitted(vec(1.0, 2.0))
    assert jitted.replays == 2
