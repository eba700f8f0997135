"""The explorer's JSON endpoints against independent truths: the engine's own trace of backward,
the frames that created each op, `attention_maps`, finite differences and the translate CLI."""
from __future__ import annotations

import inspect
import json
import shutil
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx
from models.text.data import BOS_ID
from models.translate.evaluation import encode_sources
from models.translate.run import open_run
from tinygrad_tx import Tensor
from tinygrad_tx.inspect import attention_maps, trace_backward
from tinygrad_tx.inspect.explorer import StepRecord, explorer_for

from .conftest import REPO, run_cli, serving

sys.path.insert(0, str(REPO / "examples"))
from autograd_walkthrough import inputs, loss_of  # noqa: E402


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# -- the graph and backward views, on the walkthrough's attention example ----------------------

@pytest.fixture(scope="module")
def walkthrough_url():
    x, weights, target = inputs()
    with serving(explorer_for(loss_of, x, *weights, target)) as url:
        yield url


def first_plane(a: np.ndarray) -> np.ndarray:
    """What a heat-map of a small array shows: its last two axes at index 0 of the others."""
    return np.atleast_2d(a[(0,) * max(a.ndim - 2, 0)])


def traced_walkthrough() -> trace_backward:
    """The same computation on fresh tensors, with the engine's own record of its backward."""
    x, weights, target = inputs()
    loss = loss_of(x, *weights, target)
    with trace_backward() as trace:
        loss.backward()
    return trace


def test_backward_steps_are_the_engines_order_and_gradients(walkthrough_url):
    trace = traced_walkthrough()
    status, walk = get(walkthrough_url + "/api/walk")
    assert status == 200
    assert [s["op"] for s in walk["steps"]] == [s.op for s in trace.steps]
    status, graph = get(walkthrough_url + "/api/graph")
    titles = {n["id"]: n["title"] for n in graph["nodes"]}
    numbers = {id(s.node): s.number for s in trace.steps}
    for page, engine in zip(walk["steps"], trace.steps):
        arrays = get(walkthrough_url + f"/api/walk_step?n={page['number']}")[1]
        np.testing.assert_array_equal(arrays["grad"]["heat"]["rows"], first_plane(engine.grad))
        assert arrays["grad"]["norm"] == pytest.approx(np.linalg.norm(engine.grad), rel=1e-12)
        assert len(page["sends"]) == len(engine.sent)
        for send, flow, heat in zip(page["sends"], engine.sent, arrays["sends"]):
            assert send["arrival"] == flow.arrival
            assert titles[send["to"]] == flow.target.name
            if hasattr(flow.target, "inputs"):  # an op: the page's number is the engine's visit number
                assert send["to"] == f"op{numbers[id(flow.target)]}"
            np.testing.assert_array_equal(heat["heat"]["rows"], first_plane(flow.grad))
    adds = sum(s["arrival"] > 1 for step in walk["steps"] for s in step["sends"])
    assert adds == sum(f.arrival > 1 for s in trace.steps for f in s.sent) > 0  # the example has fan-out


def test_broadcast_and_release_are_named():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True, name="x")
    b = Tensor(np.ones(3), requires_grad=True, name="b")

    def square(h):
        return (h * h).sum()

    record = StepRecord(lambda: square(x + b), ())
    walk = record.walk()["steps"]
    add = next(s for s in walk if s["op"] == "Add")
    to_b = next(s for s in add["sends"] if s["to"] == record.node_id(b))
    assert to_b["summed_from"] == [2, 3] and to_b["shape"] == [3]  # summed back over the broadcast axis
    assert next(s for s in add["sends"] if s["to"] == record.node_id(x))["summed_from"] is None
    mul = next(s for s in walk if s["op"] == "Mul")
    assert [s["arrival"] for s in mul["sends"]] == [1, 2]  # h = x + b used twice: the second one is added
    assert all(s["releases"] for s in walk)  # backward without retain_graph frees every node


def test_leaf_gradients_match_finite_differences(walkthrough_url):
    x, weights, target = inputs()
    status, node = get(walkthrough_url + "/api/graph")
    leaf = next(n for n in node["nodes"] if n["title"] == "W_q")
    grad = np.array(get(walkthrough_url + f"/api/node?id={leaf['id']}")[1]["grad"]["heat"]["rows"])
    w = weights[0].data
    numeric = np.zeros_like(w)
    for i in np.ndindex(*w.shape):
        for sign in (1, -1):
            w[i] += sign * 1e-6
            numeric[i] += sign * loss_of(x, *weights, target).item() / 2e-6
            w[i] -= sign * 1e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def made_here(x, w):
    h = x @ w
    return (h.tanh() * h).sum()


def test_node_source_lines_are_the_frames_that_created_them():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    w = Tensor(np.ones((3, 2)), requires_grad=True)
    record = StepRecord(made_here, (x, w))
    first = made_here.__code__.co_firstlineno
    expected = {"MatMul": first + 1, "Tanh": first + 2, "Mul": first + 2, "Sum": first + 2}
    for node in record.graph()["nodes"]:
        if node["kind"] == "op":
            frame = record.node(node["id"])["frames"][0]
            assert (frame["file"], frame["line"], frame["function"]) == (__file__, expected[node["title"]], "made_here")
            assert frame["code"] == inspect.getsource(made_here).splitlines()[frame["line"] - first].strip()


def test_node_panel_has_the_ops_forward_and_backward(walkthrough_url):
    graph = get(walkthrough_url + "/api/graph")[1]
    softmax = next(n for n in graph["nodes"] if n["title"] == "Softmax")
    node = get(walkthrough_url + f"/api/node?id={softmax['id']}")[1]
    from tinygrad_tx.function import REGISTRY
    assert node["op"]["backward"]["code"] == inspect.getsource(REGISTRY["Softmax"].backward)
    assert node["op"]["forward"]["code"] == inspect.getsource(REGISTRY["Softmax"].forward)
    assert [s["name"] for s in node["saved"]] == list(REGISTRY["Softmax"].saved)
    assert node["value"]["shape"] == node["shape"] == [2, 3, 3]


def test_compiled_lines_are_linked_to_the_graph_nodes_of_their_ops(walkthrough_url):
    graph = get(walkthrough_url + "/api/graph")[1]
    titles = {n["id"]: n["title"] for n in graph["nodes"]}
    compiled = get(walkthrough_url + "/api/compiled")[1]
    forward = [line for line in compiled["lines"] if "f.forward(" in line["text"]]
    assert len(forward) == sum(n["kind"] == "op" for n in graph["nodes"])  # every op of this step reaches the loss
    assert sorted(line["node"] for line in forward) == sorted(n["id"] for n in graph["nodes"] if n["kind"] == "op")
    for line in compiled["lines"]:
        if line["node"] is not None:
            assert re.search(r"# #\d+ (\w+)", line["text"])[1] == titles[line["node"]]  # "# #3 MatMul": the same op
    profile = get(walkthrough_url + "/api/profile")[1]["rows"]
    assert {r["op"]: r["calls"] for r in profile} == {t: list(titles.values()).count(t) for t in
                                                      {n["title"] for n in graph["nodes"] if n["kind"] == "op"}}


def test_module_calls_fold_into_boxes(run_explorer):
    graph = run_explorer.get["/api/graph"]({})
    calls = {c["id"]: c for c in graph["calls"]}
    names = {c["name"] for c in graph["calls"]}
    assert {"encoder", "decoder", "encoder.layers.0", "decoder.layers.0.cross_attn"} <= names
    for node in graph["nodes"]:  # each op's scope is a chain of calls, outermost first
        for outer, inner in zip(node["scope"], node["scope"][1:]):
            assert calls[inner]["parent"] == outer


# -- translate and training, on a tiny trained run ---------------------------------------------

def test_beam_tree_winner_is_the_cli_translation(run_url, tiny_run):
    sentence = "abcdefghij"
    for beam in (1, 3):
        cli = run_cli("translate", "--run", str(tiny_run), "--beam", str(beam), sentence)
        assert cli.returncode == 0, cli.stderr
        status, page = post(run_url + "/api/translate", {"sentence": sentence, "beam": beam})
        assert status == 200
        assert page["output"] == cli.stdout.strip()
        nodes = {n["id"]: n for n in page["tree"]}
        winner = [nodes[i] for i in page["winner"]]
        assert winner[-1]["piece"] == "<eos>" and winner[-1]["state"] == "finished"
        assert "".join(n["piece"] for n in winner[:-1]) == cli.stdout.strip()  # the reverse task's tokens are characters
        for parent, child in zip(["root"] + page["winner"], page["winner"]):
            assert nodes[child]["parent"] == parent
        finals = [n["final"] for n in page["tree"] if n["state"] == "finished"]
        assert winner[-1]["final"] == max(finals)  # the search returns its best finished hypothesis
        assert max(n["step"] for n in page["tree"]) <= len(sentence) * 2 + 10
        for step in range(1, max(n["step"] for n in page["tree"]) + 1):
            assert sum(n["step"] == step and n["state"] == "live" for n in page["tree"]) <= beam


def test_attention_is_attention_maps(run_url, tiny_run):
    status, page = post(run_url + "/api/translate", {"sentence": "abcdef", "beam": 2})
    assert status == 200
    run = open_run(tiny_run)
    src = encode_sources(["abcdef"], run.src_vocab, run.tokenizers[0], run.model.config.max_len)
    out = run.tgt_vocab.encode(run.tokenizers[1].encode(page["output"]))
    with tx.no_grad(), attention_maps(run.model) as maps:
        run.model(src, np.array([[BOS_ID, *out]]))
    assert [layer["name"] for layer in page["attention"]] == list(maps)
    for layer in page["attention"]:
        np.testing.assert_allclose(layer["heads"], maps[layer["name"]][0].numpy()[0], rtol=1e-6, atol=1e-7)
        assert (len(layer["rows"]), len(layer["cols"])) == np.shape(layer["heads"])[1:]  # a label per row and column
    cross = maps["decoder.layers.0.cross_attn"][0].numpy()[0]
    np.testing.assert_allclose(page["alignment"], cross.mean(axis=0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("sentence, says", [("", "empty"), ("   ", "empty"), ("ABC!?", "none of its pieces"),
                                            ("a" * 300, "longer than the model's maximum"), ("a" * 3000, "at most")])
def test_a_sentence_it_cannot_translate_gets_a_clear_message(run_url, sentence, says):
    status, answer = post(run_url + "/api/translate", {"sentence": sentence, "beam": 2})
    assert status == 200 and says in answer["problem"] and list(answer) == ["problem"]


def test_a_sentence_that_is_not_text_is_a_bad_request(run_url):
    status, answer = post(run_url + "/api/translate", {"sentence": 12, "beam": 2})
    assert status == 400 and "give a sentence" in answer["error"]


def test_training_curves_are_the_runs_metrics(run_url, tiny_run):
    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    status, page = get(run_url + "/api/metrics")
    snapshots = [f"snapshots/step_{step:06d}.npz" for step in (100, 200, 300)]  # train --snapshots, every 100 steps
    assert status == 200 and page["records"] == records and page["checkpoints"] == [*snapshots, "last.npz", "best.npz"]
    with urllib.request.urlopen(run_url + "/api/events/metrics", timeout=30) as stream:
        first = json.loads(stream.readline().decode().removeprefix("data: "))
    assert first == {"from": 0, "records": records}
    status, page = get(run_url + "/api/checkpoint_attention?name=last.npz&sentence=abc")
    assert status == 200 and len(page["map"]["heads"]) == 2
    status, last_snapshot = get(run_url + f"/api/checkpoint_attention?name={snapshots[-1]}&sentence=abc")
    assert status == 200 and last_snapshot["map"] == page["map"]  # step 300's weights are last.npz's
    for name in ("snapshots/../run.json", "run.json", "snapshots/step_000150.npz"):
        status, answer = get(run_url + f"/api/checkpoint_attention?name={name}&sentence=abc")
        assert status == 400 and "one this run kept" in answer["error"]


def test_curves_update_live_while_a_run_trains(tiny_run, tmp_path):
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with serving(open_explorer(run)) as url, urllib.request.urlopen(url + "/api/events/metrics", timeout=30) as stream:
        first = json.loads(stream.readline().decode().removeprefix("data: "))
        stream.readline()  # the blank line that ends an event
        new = [{"step": 10_000, "loss": 0.5, "lr": 1e-4, "tokens_per_s": 1},
               {"step": 10_010, "loss": float("nan"), "lr": 1e-4, "tokens_per_s": 1}]  # a run that diverged
        with open(run / "metrics.jsonl", "a") as f:  # as the trainer appends
            f.write("".join(json.dumps(record) + "\n" for record in new))
        started = time.perf_counter()
        second = json.loads(stream.readline().decode().removeprefix("data: "))
        assert second == {"from": len(first["records"]), "records": [new[0], {**new[1], "loss": None}]}
        assert time.perf_counter() - started < 5


def test_recording_the_beam_search_does_not_change_it():
    from models import Transformer, beam_search
    from models.beam_tree import BeamTree

    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32).eval()
    src = np.random.default_rng(0).integers(3, 12, size=(3, 6))
    for beam in (1, 2, 5):
        tree = BeamTree()
        recorded = beam_search(model, src, 9, 1, 2, beam_size=beam, record=tree)
        np.testing.assert_array_equal(recorded, beam_search(model, src, 9, 1, 2, beam_size=beam))
        for row in range(3):
            ids = [int(t) for t in recorded[row] if t != 0]
            path = tree.path(ids, row)
            assert len(path) == len(ids)  # the output is a path of the tree, from its root


# -- the command line --------------------------------------------------------------------------

def test_a_missing_or_damaged_run_is_one_line_and_exit_2(tmp_path, tiny_run):
    missing = run_cli("explore", str(tmp_path / "nothing"), timeout=60)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "does not exist" in missing.stderr
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_run, damaged)
    (damaged / "vocab.json").write_text("{")
    done = run_cli("explore", str(damaged), timeout=60)
    assert done.returncode == 2 and "vocab.json" in done.stderr and done.stderr.count("\n") == 1


def test_the_command_serves_then_ctrl_c_stops_it(tiny_run):
    process = subprocess.Popen([sys.executable, "-m", "models", "explore", str(tiny_run)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("explorer at http://127.0.0.1:")
        url = line.split()[2].rstrip("/")
        assert get(url + "/api/info")[1]["views"] == ["graph", "translate", "training", "compiled"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert "explorer stopped" in process.stdout.read() and process.stderr.read() == ""
    finally:
        process.kill()


def test_another_host_prints_a_warning(tiny_run):
    process = subprocess.Popen([sys.executable, "-m", "models", "explore", str(tiny_run), "--host", "0.0.0.0"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().startswith("explorer at")
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        assert "warning: serving on 0.0.0.0" in process.stderr.read()
    finally:
        process.kill()
