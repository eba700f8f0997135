"""The instruments of `tinygrad_tx.inspect`, tensor and module hooks, and the walkthrough example."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import MultiHeadAttention, Transformer
from tinygrad_tx import Tensor, nn, observers
from tinygrad_tx.inspect import (AnomalyError, attention_maps, detect_anomaly, graph_text, name_parameters, profile,
                                 record_modules, render, retain_grads, tensors_in_graph, to_dot, trace_backward)

ROOT = Path(__file__).resolve().parents[2]


def leaf(values, device="cpu", name=None):
    return Tensor(np.array(values, dtype=np.float64), requires_grad=True, device=device, name=name)


def next_line() -> int:
    """The number of the caller's next line: where the op under test is created."""
    return sys._getframe(1).f_lineno + 1


def small_graph(device="cpu"):
    """A graph with a diamond, a leaf used three times and an intermediate used twice."""
    x = leaf([[0.5, -1.0], [2.0, 0.25]], device, name="x")
    w = leaf([[1.0, 0.5], [-0.5, 2.0]], device, name="w")
    h = (x @ w + x).tanh()  # x used twice here
    y = (h * h + h * x.exp()).sum()  # h used three times, x a third time
    return x, w, h, y


def no_observer_left():
    return observers.active == [] and not nn.hooks.GLOBAL_HOOKS


# -- backward trace ------------------------------------------------------------------------

def test_trace_visits_every_node_in_a_topological_order(device):
    x, w, h, y = small_graph(device)
    with trace_backward() as tr:
        y.backward(retain_graph=True)
    position = {step.node: step.number for step in tr.steps}
    ops = [t.grad_fn for t in tensors_in_graph(y) if t.grad_fn is not None]
    assert sorted(position.values()) == list(range(1, len(ops) + 1)) and set(position) == set(ops)
    for step in tr.steps:  # every node comes before the nodes that made its inputs
        for t in step.node.inputs:
            if t.grad_fn is not None:
                assert position[t.grad_fn] > step.number, (step.op, t.grad_fn.name)
    assert tr.steps[0].node is y.grad_fn and no_observer_left()


def test_trace_gradients_equal_the_final_grads(device):
    x, w, h, y = small_graph(device)
    h.retain_grad()
    with trace_backward() as tr:
        y.backward()
    for t in (x, w, h):
        np.testing.assert_allclose(tr.grad_of(t).numpy(), t.grad.numpy(), rtol=1e-12)
    assert tr.grad_of(y).item() == 1.0


def test_trace_shows_each_use_of_a_fan_out_tensor_as_an_accumulation():
    a = leaf(3.0, name="a")
    b = a + a
    c = b + b  # REFERENCE.md's fan-out case: a.grad must be 4
    with trace_backward() as tr:
        c.backward()
    assert [f.arrival for f in tr.flows_into(b)] == [1, 2]
    assert [f.arrival for f in tr.flows_into(a)] == [1, 2]  # b's node runs once, with both uses summed
    assert [f.grad.item() for f in tr.flows_into(a)] == [2.0, 2.0] and a.grad.item() == 4.0
    table = str(tr)
    assert re.search(r"^\s+1\s+Add", table, re.M) and re.search(r"^\s+2\s+Add", table, re.M)
    assert table.count("+= Add #2") == 1 and table.count("+= a") == 1


def test_trace_under_create_graph_records_tensors():
    x = leaf([0.3, -0.7])
    y = (x * x * x).sum()
    with trace_backward() as tr:
        (gx,) = tx.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(tr.grad_of(x).numpy(), gx.numpy())
    assert not any(isinstance(f.grad, Tensor) for step in tr.steps for f in step.sent)  # arrays: no graph kept
    assert gx.requires_grad and "Mul" in str(tr)


# -- tensor hooks ----------------------------------------------------------------------------

def test_hook_on_an_intermediate_replaces_the_gradient_downstream(device):
    x = leaf([0.5, -1.5, 2.0], device)
    h = x * 3.0
    h.register_hook(lambda g: g * 0.0 + 2.0)  # pretend dL/dh = 2 everywhere
    (h.tanh() * 7.0).sum().backward()  # what flows past h no longer depends on tanh
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 6.0])


def test_replaced_gradient_flows_through_the_rest_of_the_graph(device):
    def run(scale):
        x = leaf([0.5, -1.5, 2.0], device)
        h = x.exp()
        if scale:
            h.register_hook(lambda g: g * scale)
        (h.tanh() * h).sum().backward()  # the hook scales the whole dL/dh, both uses together
        return x.grad.numpy()

    np.testing.assert_allclose(run(-3.0), -3.0 * run(None), rtol=1e-12)


def test_leaf_hook_sees_the_summed_gradient_and_its_result_is_stored(device):
    x = leaf([1.0, 2.0], device)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy()))  # returns None: keeps the gradient
    x.register_hook(lambda g: g * 10.0)  # runs second, sees the first one's result
    (x * x + x).sum().backward()
    np.testing.assert_allclose(seen[0], [3.0, 5.0])
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 50.0])


def test_post_accumulate_grad_hook_runs_during_backward_with_the_whole_gradient(device):
    """The hook on the last layer's weight runs before the first layer's gradient exists
    (that is what lets data parallelism start sending it early), once, with the sum of both
    uses; a callback queued twice runs once, after every gradient is in place."""
    x = Tensor(np.array([[1.0, -2.0]]), device=device)  # (1, 2), float64 like leaf()
    w1, w2 = leaf([[0.5, -1.0], [2.0, 0.25]], device), leaf([[1.0], [-3.0]], device)
    events = []

    def ready(name):
        def hook(p):
            events.append((name, p.grad.numpy(), w1.grad is None))
            tx.backward.queue_callback(finished)
        return hook

    def finished():
        events.append(("finished", w1.grad is not None and w2.grad is not None))

    w1.register_post_accumulate_grad_hook(ready("w1"))
    w2.register_post_accumulate_grad_hook(ready("w2"))
    h = x @ w1  # (1, 2): [[-3.5, -1.5]]
    ((h @ w2) + (h @ w2)).sum().backward()  # w2 used twice
    assert [e[0] for e in events] == ["w2", "w1", "finished"]
    np.testing.assert_allclose(events[0][1], [[-7.0], [-3.0]])  # 2 hᵀ, by hand
    assert events[0][2], "w2's hook ran only after w1 had its gradient"
    np.testing.assert_allclose(events[1][1], [[2.0, -6.0], [-4.0, 12.0]])  # 2 xᵀ w2ᵀ
    assert events[2] == ("finished", True)
    with pytest.raises(RuntimeError, match="outside backward"):
        tx.backward.queue_callback(finished)
    with pytest.raises(RuntimeError, match="needs a leaf"):
        h.register_post_accumulate_grad_hook(ready("h"))


def test_hooks_run_in_registration_order():
    x = leaf([1.0])
    h = x * 1.0
    h.register_hook(lambda g: g + 1.0)
    h.register_hook(lambda g: g * 10.0)
    h.sum().backward()
    assert x.grad.item() == 20.0  # (1 + 1) * 10, not 1 * 10 + 1


def test_hook_on_a_tensor_without_grad_is_refused():
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor([1.0]).register_hook(lambda g: g)


def test_hook_matches_pytorch(torch):
    values = [0.2, -0.4, 1.1]
    x = leaf(values)
    h = x.tanh()
    h.register_hook(lambda g: g * g)
    (h * h * 3.0).sum().backward()
    tx_ = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    th = tx_.tanh()
    th.register_hook(lambda g: g * g)
    (th * th * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx_.grad.numpy(), rtol=1e-12)


def test_retain_grad_on_a_fan_out_tensor_keeps_the_sum(device):
    x = leaf([1.0, -2.0], device)
    h = x.tanh()
    h.retain_grad()
    h.retain_grad()  # a second call must not count the gradient twice
    (h * 3.0 + h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 3.0 + 2 * np.tanh([1.0, -2.0]), rtol=1e-12)


def test_retain_grad_accumulates_across_backward_calls_like_a_leaf():
    x = leaf([1.0, 2.0])
    h = x * 2.0
    h.retain_grad()
    y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * 2 * np.array([2.0, 4.0]))
    x.retain_grad()  # a leaf keeps its gradient anyway: nothing to do
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * 2 * np.array([2.0, 4.0]))


@pytest.mark.parametrize("retain_first", [True, False])
def test_retained_gradient_is_the_one_that_flowed_on_whatever_the_order(torch, retain_first):
    """Hardening round 3, item 4: with `h.retain_grad(); h.register_hook(lambda g: g * 2)`, h.grad
    was the gradient before the hook (1x) while x.grad got 2x. PyTorch keeps the one that flowed on."""
    values = [0.3, -1.2, 0.7]
    x, tx_ = leaf(values), torch.tensor(values, dtype=torch.float64, requires_grad=True)
    h, th = x.tanh(), tx_.tanh()
    for t in (h, th):
        if retain_first:
            t.retain_grad()
        t.register_hook(lambda g: g * 2)
        if not retain_first:
            t.retain_grad()
    (h * 3.0).sum().backward()
    (th * 3.0).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.grad.numpy(), 6.0)
    np.testing.assert_allclose(x.grad.numpy(), tx_.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("on_leaf", [True, False])
@pytest.mark.parametrize("change", ["shape", "broadcast", "dtype"])
def test_a_hook_that_changes_the_gradients_shape_or_dtype_is_refused(on_leaf, change):
    """Hardening round 3, item 8: a leaf hook returning `g.sum()` made `.grad` one number, which SGD
    then broadcast over the weight. A hook may change values only; the error names the tensor and
    both shapes."""
    x = Tensor(np.ones((2, 3)), requires_grad=True, name="weight")
    t = x if on_leaf else x * 2.0
    replace = {"shape": lambda g: g.sum(), "broadcast": lambda g: g.sum(axis=0, keepdims=True),
               "dtype": lambda g: g.astype(np.float32)}[change]
    t.register_hook(replace)
    with pytest.raises(RuntimeError, match=r"hook on .*(weight|Mul).*shape .*\(2, 3\)"):
        (t * t).sum().backward()
    assert x.grad is None


# -- module hooks ------------------------------------------------------------------------------

def test_forward_hooks_record_activations_and_can_be_removed():
    tx.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    seen = []
    handle = model[0].register_forward_hook(lambda m, args, out: seen.append((args[0].shape, out.numpy())))
    x = Tensor(np.ones((5, 3), dtype=np.float32))
    model(x)
    assert seen[0][0] == (5, 3)
    np.testing.assert_allclose(seen[0][1], model[0](x).numpy())
    handle.remove()
    model(x)
    assert len(seen) == 2  # the direct call above was recorded; the call after remove() was not
    assert not model[0]._hooks


def test_forward_hooks_can_change_inputs_and_outputs():
    layer = nn.Linear(2, 2)
    x = Tensor(np.ones((1, 2), dtype=np.float32))
    plain = layer(x).numpy()
    with layer.register_forward_pre_hook(lambda m, args: (args[0] * 2.0,)):
        with layer.register_forward_hook(lambda m, args, out: out + 1.0):
            changed = layer(x).numpy()
    np.testing.assert_allclose(changed, layer(x * 2.0).numpy() + 1.0, rtol=1e-6)
    np.testing.assert_allclose(layer(x).numpy(), plain)  # both handles left their `with`


def test_backward_pre_hook_sees_and_replaces_the_output_gradient():
    tx.manual_seed(0)
    first, second = nn.Linear(3, 4), nn.Linear(4, 1)
    x = Tensor(np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32))

    def grads(hook=None):
        first.zero_grad()
        handle = first.register_full_backward_pre_hook(hook) if hook else None
        h = first(x)
        h.retain_grad()
        second(h).sum().backward()
        if handle:
            handle.remove()
        return h.grad.numpy(), first.weight.grad.numpy()

    plain_h, plain_w = grads()
    seen = []
    hooked_h, hooked_w = grads(lambda m, grad_output: seen.append((m, grad_output)) or (grad_output[0] * 2.0,))
    assert seen[0][0] is first and len(seen[0][1]) == 1
    np.testing.assert_allclose(seen[0][1][0].numpy(), plain_h)
    np.testing.assert_allclose(hooked_w, 2 * plain_w, rtol=1e-6)


def test_forward_hooks_record_attention_maps_of_multi_head_attention():
    tx.manual_seed(0)
    mha = MultiHeadAttention(8, num_heads=2)
    maps = []

    def ask(module, args, kwargs):
        return args, {**kwargs, "return_weights": True}

    def keep(module, args, kwargs, output):
        maps.append(output[1].numpy())
        return output[0]

    mha.register_forward_pre_hook(ask, with_kwargs=True)
    mha.register_forward_hook(keep, with_kwargs=True)
    x = Tensor(np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32))
    out = mha(x, causal=True)
    assert out.shape == (2, 5, 8) and maps[0].shape == (2, 2, 5, 5)
    np.testing.assert_allclose(maps[0].sum(-1), 1.0, rtol=1e-6)
    assert np.all(np.triu(maps[0], k=1) == 0)  # causal: no weight on later keys


def test_attention_maps_of_a_transformer_leave_its_output_unchanged():
    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=1, d_ff=32,
                        dropout=0.0)
    src, tgt = np.array([[3, 4, 5, 0]]), np.array([[1, 6, 7]])  # one padded source position
    plain = model(src, tgt).numpy()
    with attention_maps(model) as maps:
        logits = model(src, tgt)
    np.testing.assert_array_equal(logits.numpy(), plain)
    assert sorted(maps) == ["decoder.layers.0.cross_attn", "decoder.layers.0.self_attn",
                            "encoder.layers.0.self_attn", "encoder.layers.1.self_attn"]
    cross = maps["decoder.layers.0.cross_attn"][0].numpy()
    assert cross.shape == (1, 2, 3, 4)
    assert np.all(cross[..., 3] == 0)  # the padded source position gets no attention
    assert all(not m._hooks for m in model.modules())


def test_global_module_hooks_see_every_call():
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    called = []
    with nn.register_module_forward_hook(lambda m, args, out: called.append(type(m).__name__)):
        model(Tensor(np.ones((1, 2), dtype=np.float32)))
    assert called == ["Linear", "LayerNorm", "Sequential"] and no_observer_left()


# -- anomaly mode ------------------------------------------------------------------------------

def test_anomaly_names_log_of_zero_in_forward_and_its_line(device):
    x = leaf([1.0, 0.0], device)
    with pytest.raises(AnomalyError) as error, detect_anomaly(), np.errstate(divide="ignore"):
        line = next_line()
        x.log()
    message = str(error.value)
    assert message.startswith("Log produced Inf in forward") and "(2,) float64" in message
    assert f"{__file__}:{line}" in message and "x.log()" in message
    assert no_observer_left()


def test_anomaly_names_sqrt_at_zero_in_backward_and_the_line_that_made_it(device):
    x = leaf([0.0, 4.0], device)
    with pytest.raises(AnomalyError) as error, detect_anomaly(), np.errstate(divide="ignore", invalid="ignore"):
        line = next_line()
        y = x.sqrt()  # fine in forward: sqrt(0) = 0
        (y * 2.0).sum().backward()  # 0.5 / sqrt(0) = inf
    message = str(error.value)
    assert message.startswith("Sqrt produced Inf in backward") and "for input 0" in message
    assert f"{__file__}:{line}" in message and "y = x.sqrt()" in message


def test_anomaly_finds_nan_from_a_where_that_computes_both_branches():
    x = leaf([-1.0, 4.0])
    with pytest.raises(AnomalyError, match="Sqrt produced NaN in forward"), detect_anomaly(), \
            np.errstate(invalid="ignore"):
        tx.where(x.data > 0, x.sqrt(), 0.0)  # sqrt(-1) is computed even though it is not picked


def test_anomaly_says_when_an_op_was_made_outside_it():
    x = leaf([0.0])
    y = x.sqrt()
    with pytest.raises(AnomalyError, match="outside detect_anomaly"), detect_anomaly(), \
            np.errstate(divide="ignore"):
        y.sum().backward()


def test_anomaly_mode_passes_finite_computations_and_is_off_by_default():
    x, w, h, y = small_graph()
    with detect_anomaly():
        y.backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    with np.errstate(divide="ignore"):
        assert leaf([0.0]).log().item() == -np.inf  # off: NaN and Inf pass silently
    assert observers.active == []


# -- graph views ------------------------------------------------------------------------------

def chain(x, w, n_ops):
    """The benchmark's chain: n_ops ops of (mul, add, tanh), then a sum."""
    y = x
    for _ in range(n_ops // 3):
        y = (y * w + x).tanh()
    return y.sum()


def dot_nodes_and_edges(dot: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A structural parse of our DOT: balanced braces, every edge between declared nodes."""
    assert dot.count("{") == dot.count("}") == 1 and dot.startswith("digraph")
    nodes = re.findall(r"^\s+(\w+) \[label=", dot, re.M)
    edges = re.findall(r"^\s+(\w+) -> (\w+);", dot, re.M)
    assert len(set(nodes)) == len(nodes)
    assert {end for edge in edges for end in edge} <= set(nodes)
    return nodes, edges


def test_dot_has_one_node_per_op_and_parses():
    x, w = leaf(np.ones((3, 3)), name="x"), leaf(np.eye(3) * 0.5, name="W")
    with profile() as p:
        y = chain(x, w, 30)
    dot = to_dot(y)
    nodes, edges = dot_nodes_and_edges(dot)
    ops = [n for n in nodes if n.startswith("op")]
    assert len(ops) == sum(s.calls for s in p.stats.values()) == 31
    assert sorted(n for n in nodes if n.startswith("leaf")) == ["leaf32", "leaf33"]  # x and W once each
    assert sum(1 for a, b in edges if a in ("leaf32", "leaf33")) == 21  # but used by 21 ops
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg"], input=dot, text=True, check=True, capture_output=True)


def test_graph_text_shows_ops_shapes_names_and_shared_nodes_once():
    x, w, h, y = small_graph()
    text = graph_text(y)
    assert text.splitlines()[0] == "#1 Sum  () float64"
    assert text.count(" Tanh  (2, 2) float64") == 1 and text.count("↑ #") >= 3  # h and x appear once each
    assert "x  leaf  (2, 2) float64" in text and "w  leaf" in text


def test_graph_views_show_every_gradient_after_backward_with_retained_graph():
    x, w, h, y = small_graph()
    retain_grads(y)
    y.backward(retain_graph=True)
    text = graph_text(y)
    assert f"Tanh  (2, 2) float64  grad norm {np.linalg.norm(h.grad.numpy()):.4g}" in text
    assert f"x  leaf  (2, 2) float64  grad norm {np.linalg.norm(x.grad.numpy()):.4g}" in text
    assert "grad norm" in to_dot(y)


def test_graph_views_explain_a_released_graph():
    x, w, h, y = small_graph()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        graph_text(y)


def test_op_numbers_are_the_order_backward_visits():
    x, w, h, y = small_graph()
    text = graph_text(y)
    with trace_backward() as tr:
        y.backward()
    for step in tr.steps:
        assert f"#{step.number} {step.op}  " in text


def test_graph_of_a_10000_op_chain_needs_no_recursion():
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = y * 1.0
    assert len(graph_text(y, max_depth=50).splitlines()) < 200
    assert to_dot(y).count("[label=\"#") == 10_000


def test_name_parameters_uses_paths_and_keeps_given_names():
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))
    model[1].bias.name = "beta"
    name_parameters(model)
    assert [p.name for p in model.parameters()] == ["0.weight", "0.bias", "1.weight", "beta"]


def test_collapsed_views_of_a_transformer_step_are_small_and_named():
    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32)
    src, tgt = np.array([[3, 4, 5, 6]]), np.array([[1, 6, 7, 8]])
    with record_modules() as rec:
        loss = F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:])
    assert rec.calls[0].module is model and rec.calls[1].path == "encoder"
    assert model.encoder.layers[0].self_attn.w_q.weight.name == "encoder.layers.0.self_attn.w_q.weight"
    layers = graph_text(loss, collapse=2)
    assert "encoder.layers.1  EncoderLayer" in layers and "decoder.layers.0  DecoderLayer" in layers
    nodes, _ = dot_nodes_and_edges(to_dot(loss, collapse=1))
    assert len(nodes) < 10 and sum(n.startswith("module") for n in nodes) == 3  # encoder, decoder, out
    full, _ = dot_nodes_and_edges(to_dot(loss))
    assert len(full) > 200
    assert no_observer_left()


def test_a_layer_and_the_op_it_runs_are_told_apart():
    """nn.Linear (a module box) runs the Linear op: pictures and the profiler must not mix them up."""
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    with record_modules(), profile() as p:
        out = model(Tensor(np.ones((4, 2), dtype=np.float32), requires_grad=True)).sum()
    assert "0  nn.Linear" in graph_text(out, collapse=1)
    full = graph_text(out)
    assert "Linear" in full and "nn.Linear" not in full  # uncollapsed: only ops
    assert p.table().split()[0] == "op" and "Linear" in p.stats and "nn.Linear" not in p.stats


def test_collapse_needs_recorded_module_calls():
    layer = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="record_modules"):
        graph_text(layer(Tensor(np.ones((1, 2), dtype=np.float32))).sum(), collapse=1)


def test_render_without_graphviz_writes_dot_and_says_how_to_install(tmp_path, monkeypatch):
    x, w, h, y = small_graph()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="apt-get install graphviz"):
        written = render(y, tmp_path / "graph.svg")
    assert written == tmp_path / "graph.dot" and written.read_text() == to_dot(y)
    assert not (tmp_path / "graph.svg").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_render_with_graphviz_writes_the_picture(tmp_path):
    x, w, h, y = small_graph()
    written = render(y, tmp_path / "graph.svg")
    assert written == tmp_path / "graph.svg" and "<svg" in written.read_text()


# -- profiler ---------------------------------------------------------------------------------

def test_profiler_counts_every_op_executed(device):
    x, w = leaf(np.ones((4, 4)), device), leaf(np.eye(4), device)
    with profile() as p:
        chain(x, w, 30).backward()
        with tx.no_grad():
            x * 2.0  # executed, so counted, but no node is kept
    stats = p.stats
    assert {name: s.calls for name, s in stats.items()} == {"Mul": 11, "Add": 10, "Tanh": 10, "Sum": 1}
    assert {name: s.backward_calls for name, s in stats.items()} == {"Mul": 10, "Add": 10, "Tanh": 10, "Sum": 1}
    assert stats["Tanh"].held_bytes == 10 * 4 * 4 * 8  # each Tanh keeps its (4, 4) float64 input
    table = p.table().splitlines()
    assert table[0].split()[:2] == ["op", "calls"] and table[-1].split()[:2] == ["total", "32"]
    totals = [float(line.split()[4]) for line in table[1:-1]]
    assert totals == sorted(totals, reverse=True)


def test_profiler_on_a_transformer_step_counts_its_fused_ops():
    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32)
    src, tgt = np.array([[3, 4, 5, 6]]), np.array([[1, 6, 7, 8]])
    with profile() as p:
        F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:]).backward()
    attention, norms = p.stats["Attention"], p.stats["LayerNorm"]
    assert attention.calls == attention.backward_calls == 6  # 2 encoder self, 2 decoder self, 2 cross
    assert norms.calls == norms.backward_calls == 2 * 2 + 3 * 2  # post-LN: one per residual block
    assert p.stats["CrossEntropy"].calls == 1 and attention.held_bytes > 0


def test_instruments_compose_and_clean_up_after_errors():
    x, w, h, y = small_graph()
    with profile() as p, trace_backward() as tr:
        y.backward()
    assert len(tr.steps) == sum(s.backward_calls for s in p.stats.values())
    with pytest.raises(ZeroDivisionError), profile():
        1 / 0
    assert no_observer_left()


# -- the walkthrough ------------------------------------------------------------------------------

def test_walkthrough_runs_and_writes_its_pictures(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "autograd_walkthrough.py"), "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for step in range(1, 11):
        assert f"[{step}]" in result.stdout
    assert "adds up to each leaf's .grad: True" in result.stdout
    assert "Log produced Inf in forward" in result.stdout
    assert (tmp_path / "graph.dot").exists() and (tmp_path / "attention.png").exists()
