"""tx.jit against issue 22's five defects (items 1-5) and others of their classes: each case
runs a function eagerly and jitted on the same calls and checks that every replay equals eager
bit for bit, or that the jit refuses with a JitError. Each test failed before its fix.
(test_jit_differential.py looks for more of them at random.)
"""
from dataclasses import dataclass

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.jit import JitError


def vec(*values, name=None) -> tx.Tensor:
    return tx.Tensor(np.array(values, dtype=np.float32), name=name)


# -- item 5: names in the generated code -------------------------------------------------------

@pytest.mark.parametrize("names", [("w", "w6", "w"), ("w", "w_1", "w"), ("V", "f", "Sink"),
                                   ("None", "class", "__builtins__"), ("t0", "t0", "t0")])
def test_tensors_whose_names_collide_are_each_bound_to_themselves(names):
    # item 5: "w", "w6", "w" gave eager 111 and every replay 201 (the third "w" became "w6")
    a, b, c = (vec(v, name=n) for v, n in zip((1.0, 10.0, 100.0), names))

    def f(x):
        return x + a + b + c

    jitted = tx.jit(f)
    for start in (0.0, 1000.0, 2000.0):
        assert jitted(vec(start)).numpy().tolist() == [start + 111.0]
    assert jitted.replays == 2


# -- item 2: two values the record must tell apart ---------------------------------------------

def test_two_zero_d_comparisons_are_not_mixed_up():
    # item 2: recorded with x=[1,2], y=[3,4], called with x=[-1,-2]: eager [4, 6], replay [2, 2]
    # (both comparisons gave NumPy's one np.True_, and the record told arrays apart by id)
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
    # f(b) where f also uses b: the record read b from the argument's slot, so a later call
    # f(other) replayed other + 10 * other instead of b + 10 * other
    b = vec(1.0, 2.0)

    def f(x, y):
        return x * 10 + b + y

    jitted = tx.jit(f)
    first = b if passed == "itself" else b.detach()
    for x, y in ((first, vec(0.0, 0.0)), (vec(5.0, 5.0), b), (vec(7.0, 7.0), vec(1.0, 1.0)), (first, b)):
        assert jitted(x, y).numpy().tobytes() == f(x, y).numpy().tobytes()


# -- item 3: writes a replay would not make again ----------------------------------------------

def test_textbook_sgd_through_data_is_refused_with_what_to_write_instead():
    # item 3: `p.data -= lr * p.grad.data` ran only while recording; replays never updated the weights
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
    # eager makes a fresh optimizer (momentum 0) at each call; a replay kept the recording's
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


def test_a_result_whose_inputs_the_step_then_changed_refuses_backward_at_every_replay_as_eager():
    # the step returns a loss with its graph, then updates w in place: eager's loss.backward()
    # refuses (w changed after Mul used it); replays after the first ran it on the recording's
    # values and gave w.grad = x, silently
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


def test_an_optimizer_attribute_written_inside_is_refused_and_a_schedule_is_replayed():
    # `opt.lr *= 0.5` in the step ran only while recording: the replays kept the second lr
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


# -- item 1: collectives inside a step ---------------------------------------------------------

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
    # item 1: dist.all_reduce / broadcast ran only while recording; replays skipped them, and the
    # ranks' weights drifted apart
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
    import tinygrad_tx.distributed as dist

    def step(x):
        call(x, dist)
        return x * 2

    with pytest.raises(JitError, match="raw array|Python number"):
        tx.jit(step)(vec(1.0, 2.0))


def test_a_collective_on_a_tensor_made_inside_outside_ops_is_refused(monkeypatch):
    # a count made with tx.Tensor(...) and summed over the ranks: each replay summed the recording's
    # tensor again (0.5, 0.25, 0.125, ... where eager gives 0.5 at every call)
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


# -- item 4: changes between calls -------------------------------------------------------------

def _changes():
    """Changes to a model between two calls of a jitted step (item 4), each a function of the model."""
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
    # item 4: Dropout.p = 0.0, ModuleList.append(...), a replaced submodule went unnoticed; the
    # replays ran the old graph
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
    global _GLOBAL_MODEL
    _GLOBAL_MODEL = tx.nn.Linear(2, 1)

    def f(x):
        return _GLOBAL_MODEL(x)

    jitted, x = tx.jit(f), vec(1.0, 2.0)
    jitted(x)
    _GLOBAL_MODEL = tx.nn.Linear(2, 1)
    assert jitted(x).numpy().tobytes() == f(x).numpy().tobytes()
    assert jitted.replays == 0 and jitted.traces == 2


# -- issue 32 item 2: a tensor swapped between calls, wherever the step reaches it ----------------

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
    """Issue 32 item 2: `PARAMS["w"]` replaced between calls gave eager 0, 3, 6, 9 and the jit
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


# -- issue 32 "Also": what the step itself changes, after the record relied on it ---------------

def test_a_step_that_stops_a_tensor_requiring_grad_after_using_it_records_anew():
    """Issue 32: a step calling `p.requires_grad_(False)` after using p replayed with gradients to
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
