"""tx.jit's promise as a class, not case by case: a replay equals eager execution bit for bit,
or the jit refuses with a JitError; never a third outcome.

Hypothesis writes step functions from a vocabulary of what users write in training steps
(ops, layers and dropout, 0-d comparisons and `where`, Python bools, backward, optimizer and
schedule calls, gradient clipping, collectives of a job of one, writes to `.data`, reads on
the host, `train()`/`eval()` and seeds inside, tensors whose names collide, tensors reached
through a global dict, a dict in a closure, a dataclass field and an argument's field, and
changes the step makes itself after using something: a tensor frozen or unfrozen, a field
swapped, dropout's p) and changes made between calls (dropout's p, a layer appended or
replaced, a tensor rebound, the learning rate, the mode, new parameter values, another batch
size, gradients zeroed, a tensor frozen, a tensor the step uses passed as an argument, a
tensor swapped wherever the step reaches it). Each program runs in two worlds
built alike, one eagerly and one under tx.jit, on the same fresh inputs at every call; after
each call the results, every parameter and every gradient must be equal byte for byte. An
error eager raises must be raised by the jit too (or the jit refuses first).

On every device; CI runs the "ci" profile of tests/conftest.py (60 examples); a long search:
    pytest tests/jit/test_differential.py --hypothesis-profile large --hypothesis-show-statistics
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
from tinygrad_tx import nn, optim
from tinygrad_tx.jit import JitError

from .helpers import same

pytestmark = pytest.mark.usefixtures("on_each_device")  # cpu, strict, and cuda where there is a GPU

# names that collide with each other, with the generated code's own names and with its renamings ("w" + a number)
NAMES = ("w", "w5", "w6", "w", "w7", "w8", "w", "w9", "w10", "w_1", "V", "f")
VECTOR, SCALAR, MASK = range(3)  # the three register files of a program
REACH = ("global_dict", "closure_dict", "field", "arg_field")  # where a step finds a tensor (`reached`)
GLOBAL_BOXES: dict[int, dict] = {}  # each world's tensor in a global dict, by the world's number


# -- the vocabulary: one strategy per kind of statement ------------------------------------------

index = st.integers(0, 11)  # taken modulo the register file's length when the statement runs
STATEMENTS = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(["tanh", "relu", "sigmoid", "neg", "abs", "softmax", "detach",
                                                 "retain_grad"]), index),
    st.tuples(st.just("no_grad"), index),  # an op under tx.no_grad()
    st.tuples(st.just("index"), index),  # v[:, [2, 0, 1]]
    st.tuples(st.just("masked_fill"), index, index),
    st.tuples(st.just("binary"), st.sampled_from(["add", "sub", "mul"]), index, index),
    st.tuples(st.just("layer"), index, index),  # model.blocks[k](v)
    st.tuples(st.just("head"), index),
    st.tuples(st.just("dropout"), index),
    st.tuples(st.just("named"), st.lists(index, min_size=1, max_size=4), index),  # v * tensors named "w", "w6", ...
    st.tuples(st.just("reduce"), st.sampled_from(["sum", "mean", "max"]), index),
    st.tuples(st.just("compare"), st.sampled_from([VECTOR, SCALAR]), index, st.sampled_from([-0.5, 0.0, 0.5])),
    st.tuples(st.just("or_true"), index),  # mask | True: a Python bool lifted beside the comparisons
    st.tuples(st.just("where"), index, index, index),
    st.tuples(st.just("backward"), index, st.booleans()),  # retain_graph
    st.tuples(st.just("call"), st.sampled_from(["zero_grad", "step", "schedule", "clip", "model.zero_grad",
                                                "lr_decay"])),
    st.tuples(st.just("collective"), st.sampled_from(["all_reduce", "all_reduce_sum", "broadcast"]),
              st.sampled_from(["vector", "param", "grad", "fresh"]), index),
    st.just(("barrier",)),
    st.tuples(st.just("fresh_optimizer"), st.booleans()),  # an optimizer made in the step (and stepped)
    st.tuples(st.just("write"), st.sampled_from(["sgd", "scale", "replace", "grad_scale", "vector", "setitem",
                                                 "out", "grad_none"]), index),
    st.tuples(st.just("read"), st.sampled_from(["item", "if", "numpy"]), index),
    st.tuples(st.just("mode"), st.booleans()),
    st.tuples(st.just("seed"), st.integers(0, 3)),
    st.tuples(st.just("reach"), st.sampled_from(REACH), index),  # v * a tensor found that way
    st.tuples(st.just("itself"), st.sampled_from(["freeze", "unfreeze", "swap_field", "dropout_p"]), index),
)
CHANGES = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("dropout_p"), st.sampled_from([0.0, 0.25, 0.5])),
    st.just(("append_block",)),
    st.just(("replace_head",)),
    st.tuples(st.just("rebind_named"), index),
    st.tuples(st.just("lr"), st.sampled_from([0.0, 0.05, 0.2])),
    st.tuples(st.just("mode"), st.booleans()),
    st.tuples(st.just("new_values"), index),
    st.tuples(st.just("batch"), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("grad_none"), index),  # p.grad = None between calls: allowed
    st.just(("zero_grad",)),
    st.just(("load_state_dict",)),
    st.tuples(st.just("freeze"), index),  # requires_grad_(False)
    st.tuples(st.just("pass_named"), index),  # y is a tensor the step may use directly too, from now on
    st.tuples(st.just("swap"), st.sampled_from(REACH)),  # another tensor where the step finds one
    st.tuples(st.just("put_back"), st.sampled_from(REACH)),  # the same tensor put back: no change
)


# -- the two worlds ------------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self):
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(3, 3)


@dataclass
class Holder:
    """A plain object with a tensor field (in the world, and as the step's third argument)."""
    w: tx.Tensor


class World(nn.Module):
    """Everything a step reaches: a model, tensors with colliding names, an optimizer, a schedule,
    tensors in a global dict, in a dict, in a dataclass and in an argument's field."""

    def __init__(self, seed: int, adam: bool, number: int):
        tx.manual_seed(seed)  # the same initial values in both worlds
        self.model = Model()
        rng = np.random.default_rng(seed)
        self.named = [tx.Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=i % 2 == 0, name=n)
                      for i, n in enumerate(NAMES)]
        params = self.model.parameters() + [t for t in self.named if t.requires_grad]
        self.opt = optim.Adam(params, lr=0.01) if adam else optim.SGD(params, lr=0.1, momentum=0.5)
        self.sched = tx.schedules.LambdaLR(self.opt, lambda step: 1.0 / step)
        self.number, self.box, self.holder, self.batch = number, {}, Holder(None), Holder(None)
        GLOBAL_BOXES[number] = {}
        for where in REACH:
            self.put(where, tx.Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=where != "field"))

    def reached(self, where: str) -> tx.Tensor:
        return {"global_dict": lambda: GLOBAL_BOXES[self.number]["w"], "closure_dict": lambda: self.box["w"],
                "field": lambda: self.holder.w, "arg_field": lambda: self.batch.w}[where]()

    def put(self, where: str, t: tx.Tensor) -> None:
        if where == "global_dict":
            GLOBAL_BOXES[self.number]["w"] = t
        elif where == "closure_dict":
            self.box["w"] = t
        else:
            setattr(self.holder if where == "field" else self.batch, "w", t)

    def params(self) -> list[tx.Tensor]:
        return [t for _, t in self.named_tensors()] + [self.reached(where) for where in REACH]


def change(world: World, what: tuple, rng: np.random.Generator) -> None:
    """A change made between two calls (the same in both worlds)."""
    kind = what[0]
    tx.manual_seed(int(rng.integers(2 ** 16)))  # a new layer's initial values: the same in both worlds
    if kind == "dropout_p":
        world.model.drop.p = what[1]
    elif kind == "append_block":
        world.model.blocks.append(nn.Linear(3, 3))
    elif kind == "replace_head":
        world.model.head = nn.Linear(3, 3)
    elif kind == "rebind_named":
        k = what[1] % len(world.named)
        world.named[k] = tx.Tensor(rng.standard_normal(3).astype(np.float32), name=NAMES[k])
    elif kind == "lr":
        world.opt.lr = what[1]
    elif kind == "mode":
        world.model.train(what[1])
    elif kind == "new_values":
        p = world.params()[what[1] % len(world.params())]
        p.data = p.backend.from_host(rng.standard_normal(p.shape).astype(p.dtype))
    elif kind == "grad_none":
        world.params()[what[1] % len(world.params())].grad = None
    elif kind == "zero_grad":
        world.opt.zero_grad()
    elif kind == "load_state_dict":
        world.load_state_dict({k: v * 0.5 for k, v in world.state_dict().items()})
    elif kind == "freeze":
        world.params()[what[1] % len(world.params())].requires_grad_(False)
    elif kind == "swap":
        world.put(what[1], tx.Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True))
    elif kind == "put_back":
        world.put(what[1], world.reached(what[1]))


def make_step(world: World, program: list[tuple]):
    """The step function a user would have written for `program` (its Python depends on the
    program and on shapes and graph structure only, never on tensor values)."""

    box, number = world.box, world.number  # reached through a closure cell, and a global dict

    def step(x, y, batch):
        regs = {VECTOR: [x, y], SCALAR: [], MASK: []}
        for statement in program:
            if statement[0] == "reach":  # each way written out, as a user would
                t = {"global_dict": lambda: GLOBAL_BOXES[number]["w"], "closure_dict": lambda: box["w"],
                     "field": lambda: world.holder.w, "arg_field": lambda: batch.w}[statement[1]]()
                regs[VECTOR].append(pick(regs, VECTOR, statement[2]) * t)
            else:
                run(world, statement, regs)
        return tuple(r[-1] for r in regs.values() if r)

    return step


def pick(regs: dict, kind: int, i: int) -> tx.Tensor | None:
    return regs[kind][i % len(regs[kind])] if regs[kind] else None


def run(world: World, s: tuple, regs: dict) -> None:
    kind, vec = s[0], regs[VECTOR]
    params = world.params()
    if kind == "unary":
        v = pick(regs, VECTOR, s[2])
        if s[1] == "retain_grad":
            v.retain_grad()
        else:
            vec.append(-v if s[1] == "neg" else getattr(v, s[1])())
    elif kind == "no_grad":
        with tx.no_grad():
            vec.append(pick(regs, VECTOR, s[1]) * 2.0)
    elif kind == "index":
        vec.append(pick(regs, VECTOR, s[1])[:, [2, 0, 1]])
    elif kind == "masked_fill" and regs[MASK]:
        m = pick(regs, MASK, s[1])
        if m.ndim == 2:  # a (B, 3) mask: the 0-d ones would not fit masked_fill's shape rule
            vec.append(pick(regs, VECTOR, s[2]).masked_fill(m, 0.0))
    elif kind == "binary":
        a, b = pick(regs, VECTOR, s[2]), pick(regs, VECTOR, s[3])
        vec.append(a + b if s[1] == "add" else a - b if s[1] == "sub" else a * b)
    elif kind == "layer":
        vec.append(world.model.blocks[s[1] % len(world.model.blocks)](pick(regs, VECTOR, s[2])))
    elif kind == "head":
        vec.append(world.model.head(pick(regs, VECTOR, s[1])))
    elif kind == "dropout":
        vec.append(world.model.drop(pick(regs, VECTOR, s[1])))
    elif kind == "named":
        v = pick(regs, VECTOR, s[2])
        for k in s[1]:
            v = v * world.named[k % len(world.named)]
        vec.append(v)
    elif kind == "reduce":
        regs[SCALAR].append(getattr(pick(regs, VECTOR, s[2]), s[1])())
    elif kind == "compare" and regs[s[1]]:
        t = pick(regs, s[1], s[2])
        regs[MASK].append(t > s[3])
    elif kind == "or_true" and regs[MASK]:
        regs[MASK].append(pick(regs, MASK, s[1]) | True)
    elif kind == "where" and regs[MASK]:
        vec.append(tx.where(pick(regs, MASK, s[1]), pick(regs, VECTOR, s[2]), pick(regs, VECTOR, s[3])))
    elif kind == "backward" and regs[SCALAR]:
        loss = pick(regs, SCALAR, s[1])
        if loss.requires_grad:  # the graph's structure, the same at every call
            loss.backward(retain_graph=s[2])
    elif kind == "call":
        {"zero_grad": world.opt.zero_grad, "step": world.opt.step, "schedule": world.sched.step,
         "clip": lambda: optim.clip_grad_norm(params, 0.5), "model.zero_grad": world.zero_grad,
         "lr_decay": lambda: setattr(world.opt, "lr", world.opt.lr * 0.5)}[s[1]]()
    elif kind == "collective":
        p = params[s[3] % len(params)]
        fresh = s[2] == "fresh" and tx.Tensor(np.full(2, float(vec[0].shape[0]), np.float32))  # a count
        t = {"vector": pick(regs, VECTOR, s[3]), "param": p, "grad": p.grad, "fresh": fresh}[s[2]]
        if s[1] == "broadcast":
            dist.broadcast(t)
        else:
            dist.all_reduce(t, op="sum" if s[1] == "all_reduce_sum" else "mean")
    elif kind == "write":
        p = params[s[2] % len(params)]
        if s[1] == "sgd":
            p.data -= 0.1 * p.grad.data
        elif s[1] == "scale":
            p.data *= 0.5
        elif s[1] == "replace":
            p.data = p.data * 0.5
        elif s[1] == "grad_scale":
            p.grad.data *= 0.5
        elif s[1] == "setitem":
            p.data[...] = p.data * 0.5
        elif s[1] == "out":
            np.multiply(p.grad.data, 0.5, out=p.grad.data)
        elif s[1] == "grad_none":
            p.grad = None
        else:
            pick(regs, VECTOR, s[2]).data += 1.0
    elif kind == "read" and regs[SCALAR]:
        t = pick(regs, SCALAR, s[2])
        if s[1] == "item":
            vec.append(vec[-1] * t.item())
        elif s[1] == "if":
            vec.append(vec[-1] * 2.0 if t else vec[-1])
        else:
            vec.append(vec[-1] + float(t.numpy()))
    elif kind == "barrier":
        dist.barrier()
    elif kind == "fresh_optimizer":
        opt = optim.SGD(world.opt.params, lr=0.1, momentum=0.9)
        if s[1]:
            opt.step()
    elif kind == "mode":
        world.model.train(s[1])
    elif kind == "seed":
        tx.manual_seed(s[1])
    elif kind == "itself":  # a change the step makes after using what it changes
        t = params[s[2] % len(params)]
        if s[1] in ("freeze", "unfreeze"):
            t.requires_grad_(s[1] == "unfreeze")
        elif s[1] == "swap_field":
            world.holder.w = (world.holder.w * 0.5).detach()
        else:
            world.model.drop.p = 0.25


# -- comparing -----------------------------------------------------------------------------------

def state(world: World) -> list:
    """Every tensor's values and gradient (None or values), in order."""
    return [(p.numpy().tobytes(), None if p.grad is None else p.grad.numpy().tobytes()) for p in world.params()]


def outcome(step, *args) -> tuple:
    try:
        return "ok", step(*args)
    except JitError as e:
        return "refused", e
    except Exception as e:  # noqa: BLE001 - an error eager raises is part of what must be matched
        return "error", type(e)


CALLS = st.lists(st.one_of(st.just(("none",)), CHANGES), min_size=2, max_size=6)  # mostly no change


@settings(max_examples=max(60, settings.default.max_examples))  # CI: 60; --hypothesis-profile large: more
@given(program=st.lists(STATEMENTS, min_size=1, max_size=14), changes=CALLS, seed=st.integers(0, 2 ** 16),
       adam=st.booleans(), verify=st.booleans())
@example(program=[("named", [0, 4, 3], 0)], changes=[("none",)] * 3, seed=0, adam=False, verify=False)  # names collide
@example(program=[("reduce", "sum", 0), ("reduce", "sum", 1), ("compare", SCALAR, 0, 0.0), ("compare", SCALAR, 1, 0.0),
                  ("where", 0, 0, 1), ("where", 1, 1, 0)], changes=[("none",)] * 3, seed=0, adam=False, verify=False)
@example(program=[("dropout", 0), ("layer", 0, 2)], changes=[("none",), ("none",), ("dropout_p", 0.0), ("none",)],
         seed=0, adam=True, verify=False)  # a model changed between calls
@example(program=[("reduce", "sum", 0), ("named", [0], 0), ("reduce", "mean", 2), ("backward", 1, False),
                  ("write", "sgd", 5), ("write", "setitem", 0), ("call", "step")], changes=[("none",)] * 3,
         seed=0, adam=False, verify=False)  # writes to .data inside the step
@example(program=[("named", [0], 1)], changes=[("pass_named", 0), ("pass_named", 2), ("none",)], seed=0, adam=False,
         verify=False)  # f(b) where f also uses b, then f(c)
@example(program=[("fresh_optimizer", False)], changes=[("none",), ("freeze", 0)], seed=0, adam=False,
         verify=False)  # found by the search: a tensor frozen between calls, checked by Python in the step
@example(program=[("reach", "global_dict", 0), ("reach", "arg_field", 2), ("reach", "field", 3),
                  ("reach", "closure_dict", 4), ("reduce", "sum", 5), ("backward", 0, False)],
         changes=[("none",), ("swap", "global_dict"), ("swap", "arg_field"), ("swap", "field"),
                  ("swap", "closure_dict"), ("put_back", "field")], seed=0, adam=False, verify=False)  # swapped tensors
@example(program=[("layer", 0, 0), ("reduce", "sum", 2), ("backward", 0, False), ("itself", "freeze", 0),
                  ("dropout", 1), ("itself", "dropout_p", 0), ("reach", "field", 0), ("itself", "swap_field", 0)],
         changes=[("none",)] * 4, seed=0, adam=False, verify=False)  # changed by the step itself
def test_a_replay_equals_eager_or_the_jit_refuses(program, changes, seed, adam, verify):
    eager_world, jit_world = World(seed, adam, 0), World(seed, adam, 1)
    eager, jitted = make_step(eager_world, program), tx.jit(make_step(jit_world, program), verify=verify)
    batch, named = 2, None
    for call, what in enumerate(changes):
        if what[0] == "batch":
            batch = what[1]
        if what[0] == "pass_named":
            named = what[1] % len(NAMES)
        for world in (eager_world, jit_world):
            change(world, what, np.random.default_rng(seed + call))
        rng = np.random.default_rng([seed, call])
        x, y = (rng.standard_normal((batch, 3)).astype(np.float32) for _ in range(2))

        def second(world):  # from the first "pass_named" on, y is a tensor the step may use directly too
            return tx.Tensor(y) if named is None else world.named[named]

        tx.manual_seed(call)
        want = outcome(eager, tx.Tensor(x), second(eager_world), eager_world.batch)
        tx.manual_seed(call)
        got = outcome(jitted, tx.Tensor(x), second(jit_world), jit_world.batch)
        if got[0] == "refused":
            event(f"refused: {str(got[1]).split(';')[0][:70]}")
            return  # the promise's other half; the worlds part ways here
        assert got[0] == want[0], f"call {call}: eager gave {want}, the jit {got}"
        if want[0] == "error":
            assert got[1] is want[1], f"call {call}: eager raised {want[1]}, the jit {got[1]}"
            event(f"both raised {want[1].__name__}")
            return
        assert same(got[1], want[1]), f"call {call}: the results differ"
        assert state(jit_world) == state(eager_world), f"call {call}: parameters or gradients differ"
    event(f"equal over {len(changes)} calls, {jitted.replays} replayed")
