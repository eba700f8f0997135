"""The explorer's JSON endpoints against independent truths: the engine's own trace of backward,
the frames that created each op, `attention_maps`, finite differences, PyTorch's attention, and
the translate CLI; a run watched while it trains (live), and one that diverged (strict JSON)."""
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

import numpy as np
import pytest

import tinygrad_tx as tx
from models.text.data import BOS_ID
from models.translate.evaluation import encode_sources
from models.translate.run import open_run
from tinygrad_tx import Tensor
from tinygrad_tx.inspect import attention_maps, trace_backward
from tinygrad_tx.inspect.explorer import StepRecord, explorer_for
from tinygrad_tx.inspect.explorer.step import op_text

from .conftest import REPO, run_cli, serving, strict

sys.path.insert(0, str(REPO / "examples"))
from autograd_walkthrough import inputs, loss_of  # noqa: E402


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, strict(r.read())
    except urllib.error.HTTPError as e:
        return e.code, strict(e.read())


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, strict(r.read())
    except urllib.error.HTTPError as e:
        return e.code, strict(e.read())


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
            assert (send["arrival"], send["input"]) == (flow.arrival, flow.route[0])  # route: (input, to, sum_to)
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


def test_node_source_lines_are_the_users_frames_and_only_those():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    w = Tensor(np.ones((3, 2)), requires_grad=True)
    record = StepRecord(made_here, (x, w))
    first = made_here.__code__.co_firstlineno
    expected = {"MatMul": first + 1, "Tanh": first + 2, "Mul": first + 2, "Sum": first + 2}
    for node in record.graph()["nodes"]:
        if node["kind"] == "op":
            frames = record.node(node["id"])["frames"]
            assert len(frames) == 1  # not this test, nor pytest, nor the explorer that called made_here
            frame = frames[0]
            assert (frame["file"], frame["line"], frame["function"]) == (__file__, expected[node["title"]], "made_here")
            assert frame["code"] == inspect.getsource(made_here).splitlines()[frame["line"] - first].strip()


def test_the_run_graph_shows_no_frame_of_the_explorer_or_the_command_line(run_explorer):
    graph = run_explorer.get["/api/graph"]({})
    for node in graph["nodes"]:
        if node["kind"] == "op":
            files = [f["file"] for f in run_explorer.get["/api/node"]({"id": node["id"]})["frames"]]
            assert not any(f.endswith(("cli.py", "runpy.py", "__main__.py")) or "/_pytest/" in f or "/pluggy/" in f
                           for f in files), files
            functions = [f["function"] for f in run_explorer.get["/api/node"]({"id": node["id"]})["frames"]
                         if f["file"].endswith("translate/explore.py")]
            assert functions in ([], ["_training_loss"])  # the loss line: the one line of the explorer's in the step


def test_tensors_are_named_by_the_parameters_they_were_passed_as():
    x = Tensor(np.ones((2, 3)))  # a constant the user did not name
    w = Tensor(np.ones((3, 2)), requires_grad=True)
    titles = {n["title"] for n in StepRecord(made_here, (x, w)).graph()["nodes"] if n["kind"] != "op"}
    assert titles == {"x", "w"}


def test_the_runs_targets_are_named(run_explorer):
    constants = {n["title"]: n for n in run_explorer.get["/api/graph"]({})["nodes"] if n["kind"] == "const"}
    for name in ("source ids", "decoder input ids", "target ids"):
        assert constants[name]["shape"][0] == 4 and constants[name]["dtype"] == "int64"
    assert "constant" not in constants  # the positional table is named by its module, the ids by the step


def softmax_class() -> type:
    """The op class of a softmax, found as the graph finds it (the engine's module layout may change)."""
    t = Tensor(np.ones((2, 3)), requires_grad=True).softmax(axis=-1)
    return type(t.grad_fn)


def test_node_panel_has_the_ops_text_forward_and_backward(walkthrough_url):
    graph = get(walkthrough_url + "/api/graph")[1]
    softmax = next(n for n in graph["nodes"] if n["title"] == "Softmax")
    node = get(walkthrough_url + f"/api/node?id={softmax['id']}")[1]
    cls = softmax_class()
    # the op's own methods, as written, not the decorator's wrapper around them (in_float32)
    assert node["op"]["backward"]["code"] == inspect.getsource(inspect.unwrap(cls.backward))
    assert node["op"]["forward"]["code"] == inspect.getsource(inspect.unwrap(cls.forward))
    assert "def forward(self, x, axis" in node["op"]["forward"]["code"]
    assert node["op"]["doc"] == inspect.cleandoc(cls.__doc__)
    assert [s["name"] for s in node["saved"]] == list(cls.saved)
    assert [p["name"] for p in node["params"]] == ["axis"] and node["params"][0]["repr"] == "-1"
    assert node["value"]["shape"] == node["shape"] == [2, 3, 3]


def test_an_op_without_a_docstring_does_not_show_its_base_classes():
    quiet = type("Quiet", (softmax_class(),), {"__module__": __name__}, register=False)  # no docstring of its own
    assert op_text(quiet)["doc"] == ""


def test_compiled_lines_are_in_the_graphs_numbers_and_linked(walkthrough_url):
    graph = get(walkthrough_url + "/api/graph")[1]
    ops = {n["id"]: n for n in graph["nodes"] if n["kind"] == "op"}
    titles = {n["id"]: n["title"] for n in graph["nodes"]}
    compiled = get(walkthrough_url + "/api/compiled")[1]
    for kind, pattern in (("forward", r"# #(\d+) (\w+) ->"), ("backward", r"# backward #(\d+) (\w+)$")):
        lines = [line for line in compiled["lines"] if line["kind"] == kind]
        assert sorted(line["node"] for line in lines) == sorted(ops)  # every op of this step reaches the loss
        for line in lines:
            number, op = re.search(pattern, line["text"]).groups()
            assert (f"op{number}", op) == (line["node"], ops[line["node"]]["title"])  # "#k Op" as the graph names it
    backward = [line["node"] for line in compiled["lines"] if line["kind"] == "backward"]
    assert backward == [f"op{k}" for k in range(1, len(ops) + 1)]  # backward runs #1, #2, ... as the walk does
    fetches = [line["text"] for line in compiled["lines"] if line["kind"] == "fetch"]
    tape = re.match(r"Tape: (\d+) argument array\(s\), (\d+) captured", compiled["summary"])
    args, captured = map(int, tape.groups())
    assert len(fetches) == args + captured == 8  # six arguments, two constants
    assert all(re.fullmatch(r"\s*V\[\d+\] = \S+\.data.*", t) for t in fetches)
    assert not any(re.search(r"\bstep \d+:", line["text"]) for line in compiled["lines"])  # no second numbering
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

def test_the_page_decodes_as_the_run_chose_on_its_validation_set(run_url, tiny_run):
    """The beam width shown first, and the length penalty used, are the run's (run.json), as for `translate`."""
    chosen = json.loads((tiny_run / "run.json").read_text())["decoding"]
    assert get(run_url + "/api/info")[1]["beam"] == chosen["beam"]
    cli = run_cli("translate", "--run", str(tiny_run), "--beam", "3", "abcdefghij")
    status, page = post(run_url + "/api/translate", {"sentence": "abcdefghij", "beam": 3})
    assert status == 200 and page["output"] == cli.stdout.strip()


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
        assert "".join(n["piece"] for n in winner[:-1]) == cli.stdout.strip()  # the reverse task's tokens: characters
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
    assert status == 200 and says in answer["problem"] and set(answer) == {"problem", "shows"}


def test_a_sentence_that_is_not_text_is_a_bad_request(run_url):
    status, answer = post(run_url + "/api/translate", {"sentence": 12, "beam": 2})
    assert status == 400 and "sentence must be text" in answer["error"]


def test_training_curves_are_the_runs_metrics(run_url, tiny_run):
    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    status, page = get(run_url + "/api/metrics")
    snapshots = [f"snapshots/step_{step:06d}.npz" for step in (100, 200, 300)]  # train --snapshots, every 100 steps
    kept = [*snapshots, "last.npz", "best.npz"]
    assert status == 200 and page["records"] == records and page["checkpoints"] == kept
    with urllib.request.urlopen(run_url + "/api/events/metrics", timeout=30) as stream:
        first = strict(stream.readline().decode().removeprefix("data: "))
    assert (first["from"], first["records"], first["checkpoints"]) == (0, records, kept)
    status, page = get(run_url + "/api/checkpoint_attention?name=last.npz&sentence=abc")
    assert status == 200 and len(page["map"]["heads"]) == 2 and page["shows"] == {"checkpoint": "last.npz", "step": 300}
    status, last_snapshot = get(run_url + f"/api/checkpoint_attention?name={snapshots[-1]}&sentence=abc")
    assert status == 200 and last_snapshot["map"] == page["map"]  # step 300's weights are last.npz's
    assert last_snapshot["shows"] == {"checkpoint": snapshots[-1], "step": 300}
    for name in ("snapshots/../run.json", "run.json", "snapshots/step_000150.npz"):
        status, answer = get(run_url + f"/api/checkpoint_attention?name={name}&sentence=abc")
        assert status == 400 and "one this run kept" in answer["error"]


def test_the_checkpoint_view_names_unknown_pieces(run_url):
    status, page = get(run_url + "/api/checkpoint_attention?name=best.npz&sentence=ab%21c")
    assert status == 200 and [(p["piece"], p["known"]) for p in page["pieces"]] == [
        ("a", True), ("b", True), ("!", False), ("c", True)]


def test_curves_update_live_while_a_run_trains(tiny_run, tmp_path):
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with serving(open_explorer(run)) as url, urllib.request.urlopen(url + "/api/events/metrics", timeout=30) as stream:
        first = strict(stream.readline().decode().removeprefix("data: "))
        stream.readline()  # the blank line that ends an event
        new = [{"step": 10_000, "loss": 0.5, "lr": 1e-4, "tokens_per_s": 1},
               {"step": 10_010, "loss": float("nan"), "lr": 1e-4, "tokens_per_s": 1}]  # a run that diverged
        with open(run / "metrics.jsonl", "a") as f:  # as the trainer appends
            f.write("".join(json.dumps(record) + "\n" for record in new))
        started = time.perf_counter()
        second = strict(stream.readline().decode().removeprefix("data: "))
        assert second["from"] == len(first["records"])
        assert second["records"] == [new[0], {**new[1], "loss": "NaN"}]  # NaN shown as such, in strict JSON
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


# -- attention opened into its parts -----------------------------------------------------------

def test_attention_parts_give_the_fused_ops_output_and_gradients(run_explorer):
    """Every attention node of the run (padding masks, a causal mask, dropout in training mode)."""
    graph = run_explorer.get["/api/graph"]({})
    attention = [n["id"] for n in graph["nodes"] if n["title"] == "Attention"]
    assert len(attention) == 3
    for nid in attention:
        parts = run_explorer.get["/api/parts"]({"id": nid})
        assert [c["what"] for c in parts["check"]] == ["output", "gradient of q", "gradient of k", "gradient of v"]
        assert all(c["max_abs_diff"] < 1e-5 for c in parts["check"]), parts["check"]
        roles = set(parts["roles"].values())
        assert {"scores = q kᵀ", "scaled = scores · scale", "masked", "weights = softmax(masked)",
                "out = weights @ v"} <= roles
        walk = parts["walk"]["steps"]
        assert [s["node"] for s in walk] == [f"op{k}" for k in range(1, len(walk) + 1)]  # stepped like any graph
    with pytest.raises(ValueError, match="not an attention node"):
        run_explorer.get["/api/parts"]({"id": "op1"})


def test_attention_parts_against_pytorch():
    torch = pytest.importorskip("torch")
    import tinygrad_tx.functional as F

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 2, 5, 4)) for _ in range(3))
    keep = rng.random((2, 1, 1, 5)) > 0.3
    keep[..., 0] = True  # every query keeps a key
    g = rng.normal(size=(2, 2, 5, 4))

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, mask=keep, causal=True)

    leaves = [Tensor(a, requires_grad=True, name=n) for a, n in zip((q, k, v), "qkv")]
    record = StepRecord(lambda q, k, v: attend(q, k, v) * Tensor(g), leaves)
    from tinygrad_tx.inspect.explorer.parts import attention_parts

    node = next(nid for nid, n in record.nodes.items() if n["title"] == "Attention")
    parts = attention_parts(record, node)["record"]
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    mask = torch.tensor(keep) & torch.ones(5, 5, dtype=torch.bool).tril()
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask)
    (out * torch.tensor(g)).sum().backward()  # the gradient the walk brings to the attention node: g
    np.testing.assert_allclose(parts.tensor(parts.root).data, out.detach().numpy(), rtol=1e-10, atol=1e-12)
    for leaf, truth in zip(("q", "k", "v"), (tq, tk, tv)):
        nid = next(i for i, n in parts.nodes.items() if n["title"] == leaf)
        np.testing.assert_allclose(parts.tensor(nid).grad.data, truth.grad.numpy(), rtol=1e-9, atol=1e-12)


# -- live: the run as it is on disk now --------------------------------------------------------

def run_without_checkpoints(tiny_run, where) -> object:
    """A copy of the tiny run as it is before its first validation: no checkpoint, no snapshot."""
    run = where / "young"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("*.npz", "snapshots"))
    (run / "metrics.jsonl").write_text("")
    return run


def cli_translation(run, sentence: str, beam: int = 4) -> str:
    """What `python -m models translate` prints for `sentence` with the run as it is now, in-process:
    the same code (open_run, which loads best.npz, and translate, with the run's chosen length penalty)."""
    from models.translate.evaluation import translate

    opened = open_run(run)
    return translate(opened.model, [sentence], opened.src_vocab, opened.tgt_vocab, opened.tokenizers, beam,
                     length_penalty=opened.decoding()[1])[0]


def test_a_run_without_a_checkpoint_is_served_and_fills_in_as_checkpoints_appear(tiny_run, tmp_path):
    from models.translate.explore import open_explorer

    run = run_without_checkpoints(tiny_run, tmp_path)
    explorer = open_explorer(run)  # before: a RunError (best.npz missing), `explore` exited 2
    for path in ("/api/graph", "/api/walk", "/api/compiled", "/api/tour"):
        assert "first validation" in explorer.get[path]({})["waiting"]
    assert "first validation" in explorer.post["/api/translate"]({"sentence": "abc"})["waiting"]
    assert explorer.get["/api/metrics"]({})["checkpoints"] == []
    shutil.copytree(tiny_run / "snapshots", run / "snapshots")
    shutil.copy(tiny_run / "last.npz", run / "last.npz")
    snapshots = [f"snapshots/step_{s:06d}.npz" for s in (100, 200, 300)]
    assert explorer.get["/api/metrics"]({})["checkpoints"] == [*snapshots, "last.npz"]
    graph = explorer.get["/api/graph"]({})
    assert graph["shows"] == {"checkpoint": "last.npz", "step": 300, "mode": "training mode: no dropout (its rates are 0)"}
    assert len(graph["nodes"]) > 100
    assert "first validation" in explorer.post["/api/translate"]({"sentence": "abc"})["waiting"]  # best.npz: not yet
    shutil.copy(tiny_run / "best.npz", run / "best.npz")
    answer = explorer.post["/api/translate"]({"sentence": "abcdefg", "beam": 4})
    assert answer["output"] == cli_translation(run, "abcdefg") and answer["shows"]["checkpoint"] == "best.npz"


def test_every_view_reads_the_checkpoints_as_they_are_now(tiny_run, tmp_path):
    from models import Transformer
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    explorer = open_explorer(run)
    sentences = ["abcdefghij", "jihgfedcba", "aabbccddee", "fedcbafedc"]
    before = [explorer.post["/api/translate"]({"sentence": s, "beam": 4})["output"] for s in sentences]
    assert before == [cli_translation(run, s) for s in sentences]
    leaf = next(n for n in explorer.get["/api/graph"]({})["nodes"] if n["title"] == "out.weight")
    # the run writes new checkpoints: here, the weights of step 100 (as `train` does, a new file renamed over the old)
    for name in ("best.npz", "last.npz"):
        shutil.copy(run / "snapshots/step_000100.npz", run / f".{name}.tmp")
        (run / f".{name}.tmp").replace(run / name)
    after = [explorer.post["/api/translate"]({"sentence": s, "beam": 4})["output"] for s in sentences]
    assert after == [cli_translation(run, s) for s in sentences] and after != before  # before the fix: stale
    value = explorer.get["/api/node"]({"id": leaf["id"]})["value"]["heat"]["rows"]
    np.testing.assert_array_equal(value, Transformer.load(run / "last.npz").out.weight.numpy())
    attention = explorer.get["/api/checkpoint_attention"]({"name": "best.npz", "sentence": "abc"})
    assert attention["shows"] == {"checkpoint": "best.npz", "step": None}  # a snapshot holds weights, not a step
    shutil.copy(run / "snapshots/step_000300.npz", run / "snapshots/step_000400.npz")  # a new validation's snapshot
    assert "snapshots/step_000400.npz" in explorer.get["/api/metrics"]({})["checkpoints"]


def test_the_news_stream_announces_new_checkpoints(tiny_run, tmp_path):
    from models.translate.explore import open_explorer

    run = run_without_checkpoints(tiny_run, tmp_path)
    with serving(open_explorer(run)) as url, urllib.request.urlopen(url + "/api/events/metrics", timeout=30) as stream:
        first = strict(stream.readline().decode().removeprefix("data: "))
        stream.readline()
        assert first["checkpoints"] == [] and first["versions"]["best.npz"] == first["versions"]["last.npz"] == ""
        assert first["versions"]["layer_stats.jsonl"] != ""  # the copy kept the run's record of its layers
        shutil.copy(tiny_run / "last.npz", run / "last.npz")
        second = strict(stream.readline().decode().removeprefix("data: "))
        assert second["checkpoints"] == ["last.npz"] and second["versions"]["last.npz"] != ""


def test_explore_starts_on_a_run_before_its_first_validation(tiny_run, tmp_path):
    run = run_without_checkpoints(tiny_run, tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "models", "explore", str(run)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # before: "run ... last.npz does not exist", exit 2
        assert line.startswith("explorer at http://127.0.0.1:")
        status, graph = get(line.split()[2].rstrip("/") + "/api/graph")
        assert status == 200 and "first validation" in graph["waiting"]
    finally:
        process.kill()


def test_explore_waits_for_a_run_train_has_just_claimed(tiny_run, tmp_path):
    run = tmp_path / "claimed"
    run.mkdir()
    (run / "train.lock").write_text("")
    process = subprocess.Popen([sys.executable, "-m", "models", "explore", str(run)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "waiting for `train` to write" in process.stderr.readline()
        young = run_without_checkpoints(tiny_run, tmp_path)
        for path in sorted(young.iterdir(), key=lambda path: path.name != "run.json"):  # as train writes them
            shutil.copy(path, run / path.name)
        assert process.stdout.readline().startswith("explorer at http://127.0.0.1:")
    finally:
        process.kill()


# -- a run that diverged: NaN and inf, in strict JSON --------------------------------------------

@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # NaN weights: NumPy says so, the page shows it
def test_a_diverged_run_answers_strict_json_with_nan_shown(diverged_run):
    from models.translate.explore import open_explorer

    with serving(open_explorer(diverged_run)) as url:
        status, answer = post(url + "/api/translate", {"sentence": "abcdef", "beam": 2})  # before: connection dropped
        assert status == 200 and "NaN" in json.dumps(answer["attention"])
        status, graph = get(url + "/api/graph")
        assert status == 200
        bias = next(n for n in graph["nodes"] if n["title"] == "out.bias")
        status, node = get(url + f"/api/node?id={bias['id']}")
        assert status == 200 and node["value"]["nan"] == 20 and set(node["value"]["heat"]["rows"][0]) == {"NaN"}
        table = next(n for n in graph["nodes"] if n["title"] == "encoder.embed.tokens.weight")
        row = get(url + f"/api/node?id={table['id']}")[1]["value"]["heat"]["rows"][4]
        assert row[:2] == ["Infinity", "-Infinity"]
        for n in range(1, 4):
            assert get(url + f"/api/walk_step?n={n}")[0] == 200
        records = get(url + "/api/metrics")[1]["records"]
        assert records[-1]["loss"] == "NaN" and records[-1]["lr"] == "Infinity"
        status, answer = get(url + "/api/checkpoint_attention?name=best.npz&sentence=abc")
        assert status == 200


# -- a page to keep ------------------------------------------------------------------------------

def test_explore_writes_a_page_that_jupyter_shows_inline(tmp_path):
    from IPython.core.formatters import DisplayFormatter

    x, weights, target = inputs()
    page = tx.inspect.explore(loss_of, x, *weights, target, html=tmp_path / "step.html")
    text = (tmp_path / "step.html").read_text()
    assert page.path == tmp_path / "step.html" and text == page.text
    saved = json.loads(re.search(r'<script id="tx-saved" type="application/json">(.*?)</script>', text, re.S)[1])
    assert {"/api/graph", "/api/walk", "/api/walk_step?n=1", "/api/compiled"} <= set(saved)
    assert not re.search(r'(?:src|href)="(?!data:)', text)  # nothing loaded from elsewhere
    formats, _ = DisplayFormatter().format(page)  # what Jupyter puts in a cell's output
    assert formats["text/html"].startswith("<iframe srcdoc=") and "tx-saved" in formats["text/html"]


def test_explore_html_command(tiny_run, tmp_path):
    page = tmp_path / "run.html"
    done = run_cli("explore", str(tiny_run), "--html", str(page), timeout=120)
    assert done.returncode == 0 and done.stdout == "" and page.is_file(), done.stderr
    saved = json.loads(re.search(r'<script id="tx-saved" type="application/json">(.*?)</script>', page.read_text(),
                                 re.S)[1])
    example, beam = saved["/api/info"]["example"], saved["/api/info"]["beam"]  # the run's chosen beam
    assert saved['POST /api/translate {"sentence":' + json.dumps(example) + f',"beam":{beam}}}']["output"] == (
        cli_translation(tiny_run, example, beam))
    assert run_cli("explore", str(tiny_run), "--html", str(page), timeout=120).returncode == 0  # its own page: again
    mine = tmp_path / "mine.html"
    mine.write_text("<p>my notes</p>")
    for target, says in ((mine, "not a page the explorer saved"), (tmp_path / "x.txt", "must end in .html"),
                         (tmp_path / "no" / "x.html", "does not exist")):
        done = run_cli("explore", str(tiny_run), "--html", str(target), timeout=60)
        assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1
    assert mine.read_text() == "<p>my notes</p>"
    done = run_cli("explore", str(run_without_checkpoints(tiny_run, tmp_path)), "--html", str(page), timeout=60)
    assert done.returncode == 2 and "nothing to save yet" in done.stderr


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


def explore_in_a_terminal(*args: str) -> subprocess.Popen:
    """`python -m models explore ARGS` as a terminal starts it, in the foreground: with SIGINT at its
    default, whatever this process has. A test run started from a script's background job (`cmd &`)
    ignores SIGINT, its children inherit that, and Python then keeps it ignored, so Ctrl-C (the
    SIGINT these tests send) would not reach the explorer at all."""
    return subprocess.Popen([sys.executable, "-m", "models", "explore", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_the_command_serves_then_ctrl_c_stops_it(tiny_run):
    process = explore_in_a_terminal(str(tiny_run))
    try:
        line = process.stdout.readline()
        assert line.startswith("explorer at http://127.0.0.1:")
        url = line.split()[2].rstrip("/")
        assert get(url + "/api/info")[1]["views"] == ["graph", "update", "translate", "training", "compiled"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert "explorer stopped" in process.stdout.read() and process.stderr.read() == ""
    finally:
        process.kill()


def test_beyond_loopback_it_warns_and_needs_the_printed_token(tiny_run):
    process = explore_in_a_terminal(str(tiny_run), "--host", "0.0.0.0")
    try:
        address = process.stdout.readline().split()[2]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{20,}", address)
        base = address.split("?")[0].rstrip("/")
        assert get(base + "/api/info")[0] == 403  # without the token: nothing
        assert get(base + "/api/info?token=wrong")[0] == 403
        with urllib.request.urlopen(address, timeout=30) as page:  # the page itself, with the token: a cookie
            cookie = page.headers["Set-Cookie"].split(";")[0]
            assert "HttpOnly" in page.headers["Set-Cookie"] and "SameSite=Strict" in page.headers["Set-Cookie"]
        request = urllib.request.Request(base + "/api/info", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert strict(answer.read())["views"][0] == "graph"
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        assert "warning: serving on 0.0.0.0" in process.stderr.read()
    finally:
        process.kill()


def test_an_ensemble_run_translates_in_the_page_as_the_cli_does(tiny_run, tmp_path):
    """A run of `train --members 2`: the page's translation and beam tree are the ensemble's, as
    `translate` gives it, and the page says so; the attention maps are the first model's."""
    from models.translate.explore import open_explorer

    run = tmp_path / "ensemble"
    shutil.copytree(tiny_run, run)
    state = tx.load(tiny_run / "best.npz")
    rng = np.random.default_rng(0)
    state["weights"] = {name: w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for name, w in state["weights"].items()}
    (run / "members" / "2").mkdir(parents=True)
    tx.save(state, run / "members" / "2" / "best.npz")  # a second model: other weights, same vocabularies
    settings = json.loads((run / "run.json").read_text())
    settings["settings"]["members"] = 2
    (run / "run.json").write_text(json.dumps(settings))
    explorer = open_explorer(run)
    differs = False
    for sentence in ("abcdefghij", "hgfedcba", "aabbccddee"):
        page = explorer.post["/api/translate"]({"sentence": sentence, "beam": 3})
        cli = run_cli("translate", "--run", str(run), "--beam", "3", sentence)
        first = run_cli("translate", "--run", str(tiny_run), "--beam", "3", sentence)
        assert cli.returncode == 0 and page["output"] == cli.stdout.strip()
        assert page["shows"]["checkpoint"] == "best.npz of each of 2 models (attention: the first's)"
        assert page["shows"]["attention"] == "the first of the ensemble's 2 models"  # the maps' headings say so
        differs |= cli.stdout != first.stdout
    assert differs, "the test needs a second model that changes some translation"
    (run / "members" / "2" / "best.npz").unlink()  # a finished run that lost a model: name the file, not "no checkpoint yet"
    waiting = explorer.post["/api/translate"]({"sentence": "abcdefghij"})["waiting"]
    assert waiting.startswith("members/2/best.npz is not there") and "first validation" not in waiting
