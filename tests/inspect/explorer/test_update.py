"""The update view's numbers are the optimizer's own: a step rebuilt here from the checkpoint with
`optim.Adam` (and, for Adam's rule itself, with torch.optim.Adam in float64) gives them; and the
defects of the run's explorer that sit beside it: a damaged checkpoint, the compiled view on a run,
the header's training mode."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import Transformer
from models.text.data import PAD_ID
from tinygrad_tx import optim
from tinygrad_tx.inspect.explorer.update import UpdateRecord, clip_words

TOLERANCE = dict(rtol=1e-5, atol=1e-9)


@pytest.fixture(scope="module")
def views(tiny_run):
    from models.translate.explore import RunViews
    from models.translate.explore_files import read_run_files

    return RunViews(read_run_files(tiny_run))


def rebuilt_step(run, batch, settings):
    """The step from last.npz, rebuilt without the explorer: the model and optim.Adam loaded from the
    checkpoint, the loss on the batch (dropout seeded as the explorer seeds it), backward, the run's
    clipping, Adam's step; and the loss again."""
    state = tx.load(run / "last.npz")
    model = Transformer.from_state(state)
    params = dict(model.named_parameters())
    adam = optim.Adam(list(params.values()), lr=1.0)
    adam.load_state_dict(state["optimizer"])
    src, tgt_in, tgt_out = batch

    def loss():
        tx.manual_seed(0)
        model.train()
        logits = model(tx.Tensor(src), tx.Tensor(tgt_in))
        return F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=settings["label_smoothing"])

    before = {name: p.numpy() for name, p in params.items()}
    first = loss()
    first.backward()
    norm = optim.clip_grad_norm(list(params.values()), settings["clip_norm"])
    grads = {name: p.grad.numpy() for name, p in params.items()}
    lr, t = adam.lr, adam.t
    adam.step()
    with tx.no_grad():
        second = loss()
    return {"before": before, "grads": grads, "dw": {n: p.numpy() - before[n] for n, p in params.items()},
            "loss": (first.item(), second.item()), "norm": norm, "lr": lr, "t": t, "state": state["optimizer"],
            "order": list(params)}


def test_the_update_is_adams_own_step_from_the_checkpoint(views, tiny_run):
    update = views.update({})
    views.record()
    truth = rebuilt_step(tiny_run, views.batch, views.files.settings["settings"])
    assert update["optimizer"] == "Adam" and update["t_saved"] == truth["t"] == 300 and update["t"] == 301
    assert update["lr"] == pytest.approx(truth["lr"], rel=1e-12)
    assert (update["loss_before"], update["loss_after"]) == pytest.approx(truth["loss"], rel=1e-6)
    assert update["loss_before"] == pytest.approx(views.record().tensor(views.record().root).item(), rel=1e-6)
    assert update["clip"]["norm"] == pytest.approx(truth["norm"], rel=1e-6)
    assert [p["name"] for p in update["params"]] == truth["order"]
    for row in update["params"]:
        dw, w = truth["dw"][row["name"]], truth["before"][row["name"]]
        assert row["dw_norm"] == pytest.approx(np.linalg.norm(dw), rel=1e-4, abs=1e-12)
        assert row["ratio"] == pytest.approx(np.linalg.norm(dw) / np.linalg.norm(w), rel=1e-4)
        assert row["g_norm"] == pytest.approx(np.linalg.norm(truth["grads"][row["name"]]), rel=1e-5)
        shown = views.update_param({"name": row["name"]})
        r, c = shown["dw"]["heat"]["stride"]  # every r-th row and c-th column of a matrix over 48 wide
        np.testing.assert_allclose(shown["dw"]["heat"]["rows"], np.atleast_2d(dw)[::r, ::c], rtol=1e-4, atol=1e-10,
                                   err_msg=row["name"])
        index = str(truth["order"].index(row["name"]))
        for key in ("m", "v"):  # the state as the checkpoint saved it
            saved = np.atleast_2d(truth["state"]["state"][index][key])[::r, ::c]
            np.testing.assert_allclose(shown["saved"][key]["heat"]["rows"], saved, rtol=1e-6, err_msg=f"{row['name']} {key}")


def test_adams_rule_itself_agrees_with_torch_in_float64(views, tiny_run):
    """Adam's step from the saved m, v and t on the gradient the page shows, by torch.optim.Adam."""
    torch = pytest.importorskip("torch")
    views.update({})
    record = views.update_record()
    hyper = record.hyper
    for name in ("out.weight", "encoder.layers.0.self_attn.w_q.bias"):
        w = torch.tensor(record.w_before[name], dtype=torch.float64, requires_grad=True)
        adam = torch.optim.Adam([w], lr=record.lr, betas=tuple(hyper["betas"]), eps=hyper["eps"])
        saved = record.state_before[name]
        adam.state[w] = {"step": torch.tensor(float(record.t_saved)), "exp_avg": torch.tensor(saved["m"], dtype=torch.float64),
                         "exp_avg_sq": torch.tensor(saved["v"], dtype=torch.float64)}
        w.grad = torch.tensor(record.g[name], dtype=torch.float64)
        before = w.detach().clone()
        adam.step()
        ulp = 2 * float(np.spacing(np.abs(record.w_before[name]).max()))  # Δw = w_after − w_before in float32
        np.testing.assert_allclose(record.dw[name], (w.detach() - before).numpy(), rtol=1e-4, atol=ulp, err_msg=name)


def test_the_update_leaves_the_shown_model_as_it_was(views, tiny_run):
    views.update({})
    saved = tx.load(tiny_run / "last.npz")["weights"]
    for name, p in views.model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), saved[name])


def test_the_tour_ends_with_the_update_in_words_that_follow_the_values(views):
    stops = views.tour({})["stops"]
    last, update = stops[-1], views.update({})
    assert last["phase"] == "update" and last["title"] == f"{len(stops)}. The update"
    before, after = update["loss_before"], update["loss_after"]
    assert f"{before:.4f} to {after:.4f}" in last["text"]
    assert ("down by" in last["text"]) == (after < before) and ("up by" in last["text"]) == (after > before)
    scaled = update["clip"]["norm"] > update["clip"]["max_norm"]
    assert ("so every gradient is scaled by" in last["text"]) == scaled


@pytest.mark.parametrize("bound", [1e6, 46.0, 1.0, 0.01])
def test_the_clip_is_said_as_clip_grad_norm_applied_it(bound):
    """Gradients within the bound are said to be used as they are, with a scale of exactly 1: the
    clip's norm (float32 per tensor, clip_grad_norm's) and the norm after (float64) differ in their
    last digits, and their ratio below 1 had half of unclipped steps said to be "over the bound
    1e+06, scaled by 1". Over the bound, the scale is PyTorch's max_norm / (norm + 1e-6)."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        w = tx.Tensor(rng.standard_normal((37, 53)).astype(np.float32), requires_grad=True)
        x = tx.Tensor(rng.standard_normal((53,)).astype(np.float32))
        clip = UpdateRecord(lambda: (w @ x).sum(), [("w", w)], optim.Adam([w], lr=1e-3), clip_norm=bound).clip
        norm = float(np.linalg.norm(np.tile(x.numpy().astype(np.float64), (37, 1))))  # d sum(w @ x) / dw: x in every row
        assert clip["norm"] == pytest.approx(norm, rel=1e-6)
        words = clip_words(clip)
        if norm <= bound:
            assert clip["scale"] == 1.0 and "used as they are" in words and "scaled" not in words, (seed, words)
        else:
            assert clip["scale"] == pytest.approx(bound / (norm + 1e-6), rel=1e-6)
            assert f"so every gradient is scaled by {clip['scale']:.3g}" in words, (seed, words)


def test_the_compiled_view_records_a_runs_step(views):
    """The step a run's explorer records is the jit's to see (its model and batch bound in a
    partial, not hidden in a closure of the engine's): every op of the graph has its line."""
    compiled = views.record().compiled
    assert "refused" not in compiled, compiled.get("refused")
    ops = {nid for nid, n in views.record().nodes.items() if n["kind"] == "op"}
    assert {line["node"] for line in compiled["lines"] if line["kind"] == "forward"} - {None} == ops


def test_the_header_says_the_runs_own_dropout():
    """No "dropout on" for a model whose rates are 0."""
    from models.translate.explore_tour import training_mode

    size = dict(src_vocab=10, tgt_vocab=10, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16)
    assert training_mode(Transformer(**size, dropout=0.0)) == "training mode: no dropout (its rates are 0)"
    assert training_mode(Transformer(**size, dropout=0.1, attention_dropout=0.0)) == (
        "training mode: dropout 0.1, attention 0, feed-forward 0.1, seeded")


def test_a_truncated_last_npz_is_said_damaged_and_the_newest_readable_shown(tiny_run, tmp_path):
    """On a finished run whose last.npz is cut short, every view says so and shows best.npz
    (the newest that reads); --html saves the page; with nothing readable, it says damaged."""
    from models.translate.explore import open_explorer, save_page
    from models.translate.run import RunError

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    data = (run / "last.npz").read_bytes()
    (run / "last.npz").write_bytes(data[: len(data) // 2])
    explorer = open_explorer(run)
    graph = explorer.get["/api/graph"]({})
    assert "waiting" not in graph and graph["shows"]["checkpoint"] == "best.npz" and graph["shows"]["step"] == 300
    assert "last.npz" in graph["shows"]["damaged"] and "Shown instead: best.npz, step 300" in graph["shows"]["damaged"]
    assert explorer.get["/api/graph"]({})["shows"] is graph["shows"] or explorer.get["/api/graph"]({})["shows"] == graph["shows"]
    assert explorer.get["/api/update"]({})["shows"]["checkpoint"] == "best.npz"
    page = save_page(run, tmp_path / "page.html")
    assert "Shown instead: best.npz" in page.text
    for name in ("best.npz", *(f"snapshots/{p.name}" for p in (run / "snapshots").iterdir())):
        (run / name).write_bytes(b"not a checkpoint")
    with pytest.raises(RunError, match=r"^nothing to save: checkpoint .*last\.npz is unreadable.*no other checkpoint"):
        save_page(run, tmp_path / "page.html")
    assert "waiting" in explorer.get["/api/graph"]({})  # the page says why, and keeps serving


@pytest.mark.parametrize("norm, max_norm, after", [(0.001933, 1.0, 0.0019329999), (2.73, 1.0, 1.0), (1.0, 1.0, 1.0),
                                                   (5e-3, 1e-3, 1e-3)])
def test_the_clipping_words_follow_the_norm_and_the_bound(norm, max_norm, after):
    """A norm of 0.00193 under a bound of 1 was said to be "over the bound" and "scaled by 1": the
    words came from the norms' ratio, 0.99999994 after a float32 recomputation, not from the two
    numbers the sentence compares."""
    from tinygrad_tx.inspect.explorer.update import clip_words

    words = clip_words({"max_norm": max_norm, "norm": norm, "norm_after": after, "scale": after / norm})
    assert ("over the bound" in words) == (norm > max_norm)
    assert ("within the bound" in words) == (norm <= max_norm)
