"""Graph views (inspect/graph.py): graph_text, to_dot and render, with gradients after
backward, numbered in backward's order, without recursion on deep graphs, and collapsed to
one box per module call."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import Transformer
from tinygrad_tx import Tensor, nn
from tinygrad_tx.inspect import graph_text, profile, record_modules, render, retain_grads, to_dot, trace_backward

from ..helpers import leaf, no_observer_left
from .helpers import chain, small_graph


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
