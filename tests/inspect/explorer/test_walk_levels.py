"""The backward walk at two levels, and the words beside each step.

The module level groups the engine's op steps by module call (plumbing folded in): its
gradients at every module boundary are checked against a plain backward that keeps each
module's output gradient (retain_grad through a module hook), a Linear's and a layer norm's
against PyTorch, and its grouping against the op level. Every sentence that states a sign
is checked against the numbers it describes.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.inspect.explorer.module_walk import PLUMBING
from tinygrad_tx.inspect.explorer.words import OpView, op_words
from tinygrad_tx.nn.hooks import register_module_forward_hook


@pytest.fixture(scope="module")
def views(tiny_run):
    from models.translate.explore import RunViews
    from models.translate.explore_files import read_run_files

    views = RunViews(read_run_files(tiny_run))
    views.record()
    return views


def plain_backward(views) -> dict:
    """Each module call's output and input tensors, by path, after a plain backward of the same
    step (same weights, batch and dropout seed), every output keeping its gradient."""
    model, _ = views.checkpoints.get("last.npz", "the test")
    paths = {id(m): path for path, m in model.named_modules()}
    seen: dict[str, tuple] = {}

    def keep(module, args, output):
        if isinstance(output, tx.Tensor) and output.requires_grad:
            output.retain_grad()
            seen.setdefault(paths[id(module)], (module, args[0], output))

    for p in model.parameters():
        p.grad = None  # the record's own walk left its gradients on the same weights
    with register_module_forward_hook(keep):
        loss = views._training_loss(model, *views.batch)
    loss.backward()
    return seen


def test_the_module_walk_groups_every_op_step_once_with_plumbing_folded(views):
    record = views.record()
    modules, steps = record.modules, record.steps
    grouped = sorted(n for m in modules for n in m.ops)
    assert grouped == list(range(1, len(steps) + 1))  # every op step, in exactly one module step
    assert [m.ops[0] for m in modules] == sorted(m.ops[0] for m in modules)  # in the engine's order
    folded = {n for m in modules for n in m.folded}
    assert folded == {s.number for s in steps if s.op in PLUMBING}  # and only plumbing is folded
    assert len(modules) < len(steps) / 2  # a learner's walk: far fewer steps than ops
    attention = [m for m in modules if m.kind.endswith("· Attention")]
    assert len(attention) == 3
    for m in attention:  # the head split and merge go with the Attention op they serve
        assert [steps[n - 1].op for n in m.ops if n not in m.folded] == ["Attention"]
        assert {steps[n - 1].op for n in m.folded} == {"Reshape", "Transpose"}
        assert len(m.sends) == 3  # to q, k and v


def test_module_boundaries_carry_a_plain_backwards_gradients(views):
    """What arrives at each leaf module call is the gradient of its output in a plain backward, and
    what it sends its weights is their .grad (each weight here is used by one call)."""
    record = views.record()
    seen = plain_backward(views)
    names = {c["id"]: c["name"] for c in record.calls.values()}
    checked = 0
    for m in record.modules:
        if m.call is None or "·" in m.kind:  # an op a bigger module makes itself: not a whole call
            continue
        module, _, output = seen[names[m.call]]
        (arrive,) = m.arrives
        np.testing.assert_allclose(record.steps[arrive - 1].grad, output.grad.numpy(), rtol=1e-5, atol=1e-9,
                                   err_msg=m.name)
        params = {p.name: p for p in module.parameters()}
        for n, k in m.sends:
            to = record.steps[n - 1].sends[k]["to"]
            if record.nodes[to]["kind"] == "leaf":
                np.testing.assert_allclose(record.steps[n - 1].sent[k], params[record.nodes[to]["title"]].grad.numpy(),
                                           rtol=1e-5, atol=1e-9, err_msg=f"{m.name} -> {to}")
        checked += 1
    assert checked == 26  # 17 Linears, 5 layer norms, 2 token embeddings and 2 positional encodings


@pytest.mark.parametrize("kind", ["nn.Linear", "nn.LayerNorm"])
def test_a_module_steps_sends_against_pytorch(views, kind):
    torch = pytest.importorskip("torch")
    record = views.record()
    seen = plain_backward(views)
    names = {c["id"]: c["name"] for c in record.calls.values()}
    m = next(m for m in record.modules if m.kind == kind)
    module, x, _ = seen[names[m.call]]
    g = torch.tensor(record.steps[m.arrives[0] - 1].grad, dtype=torch.float64)  # what arrives
    tx_ = torch.tensor(x.numpy(), dtype=torch.float64, requires_grad=True)
    w = torch.tensor(module.weight.numpy(), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(module.bias.numpy(), dtype=torch.float64, requires_grad=True)
    if kind == "nn.Linear":
        y = tx_ @ w + b
    else:
        y = torch.nn.functional.layer_norm(tx_, w.shape, w, b, eps=module.eps)
    (y * g).sum().backward()
    truth = {"input": tx_.grad, "weight": w.grad, "bias": b.grad}
    for n, k in m.sends:
        to = record.steps[n - 1].sends[k]["to"]
        title = record.nodes[to]["title"]
        which = "input" if record.nodes[to]["kind"] == "op" else title.rsplit(".", 1)[1]
        np.testing.assert_allclose(record.steps[n - 1].sent[k], truth[which].numpy(), rtol=2e-4, atol=1e-7,
                                   err_msg=f"{m.name}: {which}")


def test_the_walk_json_names_both_levels_and_their_ranges(run_explorer):
    walk = run_explorer.get["/api/walk"]({})
    steps, modules = walk["steps"], walk["modules"]
    for m in modules:
        for n in m["ops"]:
            assert steps[n - 1]["module"] == m["number"]
        for send in m["sends"]:
            assert send["to_step"] is None or send["to_step"] > m["number"]  # always on, toward the inputs
    answer = run_explorer.get["/api/module_step"]({"n": str(len(modules))})
    assert answer["words"] and answer["arrives"] and answer["sends"]
    with pytest.raises(ValueError, match=f"from 1 to {len(steps)}, not 0"):  # the walk's real range
        run_explorer.get["/api/walk_step"]({"n": "0"})
    with pytest.raises(ValueError, match=f"from 1 to {len(modules)}, not {len(modules) + 1}"):
        run_explorer.get["/api/module_step"]({"n": str(len(modules) + 1)})


# -- words follow the numbers ----------------------------------------------------------------------

def cross_entropy_view(logits: np.ndarray, target: np.ndarray, smoothing: float) -> OpView:
    """The loss's step, with the engine's own gradient."""
    z = tx.Tensor(logits, requires_grad=True)
    loss = tx.functional.cross_entropy(z, tx.Tensor(target), label_smoothing=smoothing)
    loss.backward(retain_graph=True)  # what it saved stays, as the explorer keeps it
    saved = loss.grad_fn.saved_values()
    return OpView("CrossEntropy", (), (logits, target), saved, {}, np.array(1.0), {0: z.grad.numpy()})


@pytest.mark.parametrize("seed", range(6))
def test_the_losss_sentence_counts_signs_as_they_are(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(12, 5)) * rng.choice([0.5, 8.0])  # sharp rows put p above its smoothed target
    target = rng.integers(0, 5, size=12)
    view = cross_entropy_view(logits, target, smoothing=0.1)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    right = p[np.arange(12), target] - (0.9 + 0.1 / 5)  # softmax − smoothed target, at the right piece
    assert np.array_equal(np.sign(right), np.sign(view.sent[0][np.arange(12), target]))
    words = op_words(view)

    def phrase(k: int) -> str:
        return "all 12" if k == 12 else "none of the 12" if k == 0 else f"{k} of 12"
    assert f"negative gradient at {phrase(int((right < 0).sum()))} positions" in words
    positive = int((right > 0).sum())
    assert (f"positive one at {phrase(positive)}," in words) == (positive > 0)


def test_every_sentence_of_the_run_that_states_a_sign_states_the_right_one(run_explorer):
    """Audit: each generated sentence of both walks and the tour; a sign word beside a number agrees
    with the number's sign."""
    walk = run_explorer.get["/api/walk"]({})
    texts = [run_explorer.get["/api/walk_step"]({"n": str(s["number"])})["words"] for s in walk["steps"]]
    texts += [run_explorer.get["/api/module_step"]({"n": str(m["number"])})["words"] for m in walk["modules"]]
    texts += [s["text"] for s in run_explorer.get["/api/tour"]({})["stops"]]
    pairs = 0
    for text in texts:
        for number, word in re.findall(r"([+-−]?\d[\d.e+-]*) \((positive|negative|zero)", text):
            value = float(number.replace("−", "-"))
            assert word == ("positive" if value > 0 else "negative" if value < 0 else "zero"), text
            pairs += 1
    assert pairs >= 2  # the tour's stop at the loss states two


def test_the_tours_loss_stop_follows_the_sign_of_a_smoothed_target():
    """The case a learner found worded with the wrong sign: p = 0.9056 above its smoothed target 0.905
    gives the right piece +2.31e-05, which the tour called negative."""
    from models.translate.explore_tour import score_gradients

    text = score_gradients(2.31e-05, 0.004, 0.9056, 0.905, "n")
    assert "+2.31e-05 (positive: its p = 0.9056 is already above its target 0.905" in text
    assert "negative" not in text
    assert "-0.00873 (negative: raising it lowers" in score_gradients(-0.00873, 0.004, 0.3, 0.905, "n")
