"""Backward is one plan: `tx.backward_plan` says what the walk will do, and eager backward,
`trace_backward` and a `tx.jit` replay (its record and generated code) all do exactly that.

The graph has every rule of the walk in it: a shared input (x feeds the product and the
square), fan-out (h feeds the bias add and the last product), broadcasting (b (3,) added
to h (2, 3)) and a retained graph (walked twice, the gradients adding up).
"""
import re

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.inspect import trace_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X0, W0, B0 = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 3)), RNG.standard_normal(3)


def loss_of(x, w, b):
    h = x @ w  # (2, 3), used twice below
    u = (h + b).tanh()  # b broadcast over the rows
    return (u * h).sum() + (x * x).sum()  # x used by the product and twice by the square


# The plan, worked out by hand: nodes newest first (the last op made runs first), numbered
# from 1; each route is (input, destination, sum_to); "+=" marks a second arrival at one destination.
EXPECTED = [
    ("Add", [(0, "step 4", None), (1, "step 2", None)]),
    ("Sum", [(0, "step 3", None)]),
    ("Mul", [(0, "leaf x", None), (1, "+= leaf x", None)]),
    ("Sum", [(0, "step 5", None)]),
    ("Mul", [(0, "step 6", None), (1, "step 8", None)]),
    ("Tanh", [(0, "step 7", None)]),
    ("Add", [(0, "+= step 8", None), (1, "leaf b", (3,))]),
    ("MatMul", [(0, "+= leaf x", None), (1, "leaf w", None)]),
]


def leaves():
    return [tx.Tensor(a.copy(), requires_grad=True, name=n) for a, n in ((X0, "x"), (W0, "w"), (B0, "b"))]


def described(plan, leaf_name=lambda t: t.name):
    """The plan's steps as (op, [(input, destination, sum_to)]), in EXPECTED's words."""
    out, n = [], len(plan.nodes)
    for step in plan.steps:
        routes = [(k, ("+= " if adds else "") + (f"leaf {leaf_name(plan.leaves[to - n])}" if to >= n
                                                 else f"step {plan.steps[to].number}"), sum_to)
                  for (k, to, sum_to), adds in zip(step.routes, step.adds)]
        out.append((step.op, routes))
    return out


def torch_grads():
    x, w, b = (torch.tensor(a, requires_grad=True) for a in (X0, W0, B0))
    loss_of(x, w, b).backward()
    return [t.grad.numpy() for t in (x, w, b)]


def test_the_plan_is_the_walk_worked_out_by_hand():
    x, w, b = leaves()
    loss = loss_of(x, w, b)
    plan = tx.backward_plan(loss, retain_graph=True)
    assert described(plan) == EXPECTED
    assert [t.name for t in plan.leaves] == ["x", "b", "w"]  # in the order they first get a route
    assert [step.shape for step in plan.steps][:3] == [(), (), (2, 3)]
    text = str(plan)
    assert "g1 sum_to (3,) -> leaf b" in text and "g0 += step 8 (MatMul)" in text
    assert tx.backward_plan(loss).steps[0].releases and not plan.steps[0].releases


def test_eager_backward_and_trace_backward_follow_the_plan_and_match_torch():
    x, w, b = leaves()
    loss = loss_of(x, w, b)
    plan = tx.backward_plan(loss, retain_graph=True)
    with trace_backward() as trace:
        loss.backward(retain_graph=True)  # walked twice: the second walk adds the same again
        loss.backward()
    first, second = trace.plans
    assert described(first) == described(second) == described(plan) == EXPECTED
    assert [s.node for s in first.steps] == [s.node for s in plan.steps]  # the same nodes, not copies
    assert [s.releases for s in (first.steps[0], second.steps[0])] == [False, True]
    # the steps ran in the plan's order, each gradient sent along its route to its destination
    n = len(plan.steps)
    assert [s.step for s in trace.steps] == [*range(n), *range(n)]
    for ran in trace.steps:
        step = plan.steps[ran.step]
        assert ran.node is step.node and [f.route for f in ran.sent] == list(step.routes)
        for flow in ran.sent:
            _, to, _ = flow.route
            place = plan.leaves[to - n] if to >= n else plan.steps[to]
            assert flow.target is (place if to >= n else place.node)
            assert flow.grad.shape == place.shape
    x_flows = trace.flows_into(x)  # x's three uses in each walk: the first stored, the others added
    x_place = n + next(k for k, t in enumerate(plan.leaves) if t is x)
    assert [f.route[1] for f in x_flows] == [x_place] * 6
    assert [added for step in plan.steps for (_, to, _), added in zip(step.routes, step.adds)
            if to == x_place] == [False, True, True]
    assert [f.arrival for f in x_flows] == [1, 2, 3, 4, 5, 6]
    for got, want in zip((x.grad, w.grad, b.grad), torch_grads()):
        np.testing.assert_allclose(got.numpy(), 2 * want, rtol=1e-12, atol=1e-12)


def test_a_jit_replay_runs_the_same_plan_and_equals_eager_bit_for_bit():
    def step(x, w, b):
        loss = loss_of(x, w, b)
        loss.backward(retain_graph=True)
        loss.backward()
        return loss

    x, w, b = leaves()
    eager_plan = tx.backward_plan(loss_of(x, w, b), retain_graph=True)
    step(x, w, b)
    eager = [t.grad.numpy() for t in (x, w, b)]
    jitted = tx.jit(step)
    for _ in range(3):  # a recording, then replays
        x, w, b = leaves()
        jitted(x, w, b)
        for got, want in zip((x.grad, w.grad, b.grad), eager):
            np.testing.assert_array_equal(got.numpy(), want)
    assert jitted.replays == 2
    tape = jitted.tape(x, w, b)
    walks = [s.plan for s in tape.program if hasattr(s, "plan")]
    assert len(walks) == 2
    arg_names = {0: "x", 1: "w", 2: "b"}
    for walk in walks:  # the record keeps the engine's plan, with op and leaf numbers for its objects
        assert described(walk, lambda k: arg_names[tape.leaves[k][1]]) == described(eager_plan) == EXPECTED
        assert walk.routes == eager_plan.routes
    # and the code a replay runs is that plan written out: each step's backward in the plan's order
    source = tape.source()
    written = [int(op) for op in re.findall(r"gs = F\[(\d+)\]\.backward", source)]
    assert written == [s.node for s in walks[0].steps] + [s.node for s in walks[1].steps]
    assert source.count("sum_to(gt, (3,))") == 2  # b's broadcast, once per walk, and nothing else summed
    for got, want in zip(eager, torch_grads()):
        np.testing.assert_allclose(got, 2 * want, rtol=1e-12, atol=1e-12)


def test_a_plan_through_a_freed_graph_says_so_and_backward_refuses_it():
    x, w, b = leaves()
    loss = loss_of(x, w, b)
    loss.backward()
    plan = tx.backward_plan(loss)
    assert plan.steps[0].freed and "freed by an earlier backward" in str(plan)
    with pytest.raises(RuntimeError, match="a second time"):
        loss.backward()


def test_a_plan_through_a_changed_input_says_so_and_backward_refuses_it_before_any_gradient_moves():
    x, w, b = leaves()
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad))  # w would be delivered early
    loss = loss_of(x, w, b)
    x.data = x.data * 2  # replaced after the product, the square and the matmul used it
    x.bump_version()
    plan = tx.backward_plan(loss)
    changed = {step.op: step.changed for step in plan.steps if step.changed}
    assert changed == {"Mul": (0, 1), "MatMul": (0,)}  # the square (both inputs are x) and x @ w
    assert "input 0, 1 modified after the op used it" in str(plan)
    assert plan.to_dict()["steps"][2]["changed"] == [0, 1]
    with pytest.raises(RuntimeError, match=r"an input of Mul \(shape \(2, 3\)\) was modified"):
        loss.backward()
    assert seen == [] and x.grad is None and w.grad is None and b.grad is None  # nothing delivered
    assert not plan.steps[0].freed and not loss.grad_fn.released  # and nothing freed: fix, then retry


def test_the_printed_plan_numbers_each_step_as_the_explorer_page_and_the_jit_code_do():
    """One numbering: the printed plan once said "step 0 Add" for the node the explorer's page
    (and trace_backward) calls #1, so that every "-> step n" pointed one node off the page's."""
    from tinygrad_tx.inspect.explorer import StepRecord

    plan = tx.backward_plan(loss_of(*leaves()))
    record = StepRecord(loss_of, tuple(leaves()), compiled=False)
    page = record.walk()["steps"]
    printed = re.findall(r"^ +(\d+)  (\w+) ", str(plan), re.M)
    assert printed == [(str(s["number"]), s["op"]) for s in page] and printed[0] == ("1", "Add")
    assert [record.name_of(s["node"]) for s in page] == [f"#{n} {op}" for n, op in printed]  # the graph's "#n"
    steps = plan.to_dict()["steps"]
    assert [s["number"] for s in steps] == list(range(1, len(page) + 1))
    for step, shown in zip(steps, page):  # each route to a step names it by the page's number
        to_ops = [f"op{r['step']}" for r in step["routes"] if "step" in r]
        assert to_ops == [send["to"] for send in shown["sends"] if send["to"].startswith("op")]
        for r in step["routes"]:
            if "step" in r:
                assert f"{'+=' if r['adds'] else '->'} step {r['step']} ({steps[r['step'] - 1]['op']})" in str(plan)

    def step(x, w, b):
        loss_of(x, w, b).backward()

    jitted = tx.jit(step)
    jitted(*leaves())
    comments = re.findall(r"# step (\d+): #\d+ (\w+)", jitted.tape(*leaves()).source())
    assert comments == [(str(s["number"]), s["op"]) for s in page]


def test_a_plain_backward_runs_the_chain_rule_bare_and_adds_only_what_a_walk_asks_for():
    """The loop that runs the plan is the chain rule alone; hooks, tx.grad's captures, the
    observers, releases and early deliveries are installed around it only for a walk that needs them."""
    from tinygrad_tx.backward import Walk, make_plan

    def around(loss, retain_graph=False, targets=None, watching=False):
        plan = make_plan(loss, retain_graph)
        walk = Walk(plan, [None] * (len(plan.nodes) + len(plan.leaves)), tx.Tensor._from_op, False, targets)
        before, after = walk.around(watching)
        return [m.__name__ for m in before], [m.__name__ for m in after]

    x, w, b = leaves()
    assert around(loss_of(x, w, b)) == ([], ["release"])
    assert around(loss_of(x, w, b), retain_graph=True) == ([], [])
    h = x @ w
    h.retain_grad()
    assert around((h * h).sum(), targets=[h], watching=True) == (
        ["node_hooks", "capture", "start_clock"], ["announce", "release"])
    w.register_post_accumulate_grad_hook(lambda t: None)
    assert around(loss_of(x, w, b)) == ([], ["release", "deliver_early"])
