"""`train`'s settings reach the model and the optimizer under one set of names, each value given once."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest

import tinygrad_tx as tx
from models.config import TransformerConfig
from models.translate.run import RunError
from models.translate.settings import TrainSettings, settings_for
from models.translate.training import Trainer

from .test_cli import Quiet
from .test_corpus_cli import write_anki

SMALL = dict(task="copy", steps=8, eval_every=4, d_model=8, num_heads=2, num_encoder_layers=1,
             num_decoder_layers=2, d_ff=8, n_train=40, n_held_out=5, lr=3e-3, warmup=2)


def test_the_model_settings_are_the_configs_own_names():
    config = {f.name for f in fields(TransformerConfig)}
    options = TrainSettings().model_options()
    assert {"d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "d_ff", "activation",
            "norm_first", "dropout", "attention_dropout", "activation_dropout"} == set(options)
    assert set(options) <= config


def test_the_model_and_the_schedule_get_what_was_given(tmp_path):
    trainer = Trainer(TrainSettings(**SMALL, out=str(tmp_path / "run")))
    config = trainer.model.module.config
    assert (config.num_encoder_layers, config.num_decoder_layers, config.num_heads) == (1, 2, 2)
    assert len(trainer.model.module.decoder.layers) == 2
    assert trainer.schedule.lr_at(2) == pytest.approx(3e-3)  # the peak, --lr, at the end of the warm-up


def test_a_run_saved_with_the_old_names_resumes(tmp_path):
    out = tmp_path / "run"
    trainer = Trainer(TrainSettings(**{**SMALL, "num_decoder_layers": 1}, out=str(out)))
    trainer.start()
    trainer.train(Quiet())
    run = json.loads((out / "run.json").read_text())
    settings = run["settings"]
    for name in ("num_heads", "num_encoder_layers", "num_decoder_layers"):
        settings.pop(name)
    run["settings"] = {**settings, "heads": 2, "layers": 1}  # run.json as `train` wrote it before
    (out / "run.json").write_text(json.dumps(run))
    resumed = settings_for({"out": str(out), "resume": True, "steps": 10})
    assert (resumed.num_heads, resumed.num_encoder_layers, resumed.num_decoder_layers) == (2, 1, 1)
    trainer = Trainer(resumed)
    trainer.start()
    assert trainer.step == 8
    trainer.train(Quiet())
    assert int(tx.load(out / "last.npz")["step"]) == 10


def test_weight_decay_shrinks_each_matrix_by_the_learning_rate_times_it_before_the_adam_step(tmp_path):
    """AdamW's decoupled decay, by hand: from the same weights, batch and dropout, one step with
    --weight-decay w ends at (1 - lr·w)·p0 - adam_step, one without at p0 - adam_step; biases and
    LayerNorm's gains and shifts (vectors) are not decayed."""
    decay = 5.0
    plain = Trainer(TrainSettings(**{**SMALL, "steps": 1}, out=str(tmp_path / "plain")))
    decayed = Trainer(TrainSettings(**{**SMALL, "steps": 1, "weight_decay": decay}, out=str(tmp_path / "decayed")))
    assert (type(plain.optimizer).__name__, type(decayed.optimizer).__name__) == ("Adam", "AdamW")
    before = [p.numpy().astype("float64") for p in decayed.optimizer.params]
    for trainer in (plain, decayed):
        trainer.start()
        trainer.train(Quiet())
    lr = decayed.optimizer.lr
    assert lr == plain.optimizer.lr > 0
    vectors = 0
    for p0, p_plain, p_decayed in zip(before, plain.optimizer.params, decayed.optimizer.params):
        shrink = p_plain.numpy().astype("float64") - p_decayed.numpy().astype("float64")
        assert shrink == pytest.approx(lr * decay * p0 if p0.ndim >= 2 else 0 * p0, abs=1e-6)
        vectors += p0.ndim < 2 and bool(p0.any())  # a vector that would have moved, were it decayed
    assert vectors > 0


def test_clip_norm_bounds_the_gradients_norm_and_0_turns_it_off(tmp_path, monkeypatch):
    """A bound never reached (1e9) trains as no clipping (0) does, loss for loss; a bound reached at
    every step (1e-4) scales each step's gradients by its own factor, which Adam's first step
    ignores (it divides the gradients by their own size) and its later steps do not. The bound
    given is the one the step clips to."""
    import tinygrad_tx.optim as optim

    bounds = []
    clip = optim.clip_grad_norm
    monkeypatch.setattr(optim, "clip_grad_norm", lambda params, bound: bounds.append(bound) or clip(params, bound))

    def losses(name: str, clip_norm: float) -> list[float]:
        trainer = Trainer(TrainSettings(**{**SMALL, "clip_norm": clip_norm, "log_every": 1}, out=str(tmp_path / name)))
        trainer.start()
        trainer.train(Quiet())
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [record["loss"] for record in map(json.loads, lines) if "loss" in record]

    never, bounds_never = losses("none", 0.0), list(bounds)
    unreached = losses("unreached", 1e9)
    tight = losses("tight", 1e-4)
    assert bounds_never == [] and set(bounds) == {1e9, 1e-4}
    assert len(never) == SMALL["steps"] and unreached == never
    assert tight[:2] == pytest.approx(never[:2], rel=1e-4)  # the first step's loss, and the second's after Adam's first step
    assert tight != pytest.approx(never, rel=1e-4)
    assert settings_for({"task": "copy"}).clip_norm == 1.0


def test_schedule_linear_falls_to_zero_and_runs_from_before_keep_the_cosine(tmp_path):
    assert settings_for({"task": "copy"}).schedule == "cosine"
    trainer = Trainer(TrainSettings(**{**SMALL, "schedule": "linear"}, out=str(tmp_path / "linear")))
    assert trainer.schedule.lr_at(2 + 3) == pytest.approx(3e-3 / 2)  # half-way from the warm-up's end to 0
    assert trainer.schedule.lr_at(8) == 0.0
    out = tmp_path / "old"
    trainer = Trainer(TrainSettings(**SMALL, out=str(out)))
    trainer.start()
    trainer.train(Quiet())
    run = json.loads((out / "run.json").read_text())
    del run["settings"]["schedule"]  # run.json as `train` wrote it before --schedule
    (out / "run.json").write_text(json.dumps(run))
    assert settings_for({"out": str(out), "resume": True}).schedule == "cosine"


def test_a_resumed_run_keeps_its_weight_decay(tmp_path):
    out = tmp_path / "run"
    trainer = Trainer(TrainSettings(**{**SMALL, "weight_decay": 0.1}, out=str(out)))
    trainer.start()
    trainer.train(Quiet())
    assert settings_for({"out": str(out), "resume": True}).weight_decay == 0.1
    with pytest.raises(RunError, match="weight_decay 0.1, not 0.0"):
        settings_for({"out": str(out), "resume": True, "weight_decay": 0.0})


def run_from_before(out, *settings: str):
    """A trained run in `out` whose run.json lacks `settings`, as one written before they existed."""
    trainer = Trainer(TrainSettings(**SMALL, out=str(out)))
    trainer.start()
    trainer.train(Quiet())
    run = json.loads((out / "run.json").read_text())
    for setting in settings:
        del run["settings"][setting]
    (out / "run.json").write_text(json.dumps(run))
    return out


def test_the_activation_reaches_the_model_and_a_run_from_before_it_resumes_with_relu(tmp_path):
    """--activation builds the feed-forward layers with it, a corpus defaults to gelu_tanh, a task
    to relu; a run.json written before --activation (its models were relu) resumes as relu, and
    refuses another."""
    trainer = Trainer(TrainSettings(**{**SMALL, "activation": "gelu_tanh"}, out=str(tmp_path / "gelu")))
    assert trainer.model.module.config.activation == "gelu_tanh"
    x = tx.Tensor([-1.0, 0.0, 2.0])
    assert trainer.model.module.encoder.layers[0].ff.activation(x).numpy() == pytest.approx(
        [-0.158808, 0.0, 1.954598], abs=1e-6)  # PyTorch's gelu(x, approximate="tanh")
    assert settings_for({"task": "copy"}).activation == "relu"
    corpus = write_anki(tmp_path / "fra.txt")
    assert settings_for({"data": str(corpus)}).activation == "gelu_tanh"
    assert settings_for({"data": str(corpus), "activation": "relu"}).activation == "relu"
    out = run_from_before(tmp_path / "old", "activation")
    assert settings_for({"out": str(out), "resume": True}).activation == "relu"
    with pytest.raises(RunError, match="trained with activation 'relu', not 'gelu'"):
        settings_for({"out": str(out), "resume": True, "activation": "gelu"})
    with pytest.raises(ValueError, match="--activation must be one of"):
        settings_for({"task": "copy", "activation": "swish"})


def test_norm_first_builds_pre_ln_stacks_and_a_run_from_before_it_resumes_post_ln(tmp_path):
    """--norm-first: every sublayer normalises its input, and each stack ends with a LayerNorm (a
    pre-LN residual stream is never normalised otherwise); a run.json from before the option
    resumes post-LN and refuses --norm-first."""
    pre = Trainer(TrainSettings(**SMALL, norm_first=True, out=str(tmp_path / "pre"))).model.module
    post = Trainer(TrainSettings(**SMALL, out=str(tmp_path / "post"))).model.module
    assert pre.config.norm_first and not post.config.norm_first
    assert pre.encoder.norm is not None and pre.decoder.norm is not None
    assert post.encoder.norm is None and post.decoder.norm is None
    first = (pre.encoder.layers[0], pre.decoder.layers[0])
    assert all(r.norm_first for r in (first[0].attn_res, first[0].ff_res, first[1].attn_res, first[1].cross_res,
                                      first[1].ff_res))
    assert len(pre.parameters()) == len(post.parameters()) + 4  # two final LayerNorms: a gain and a shift each
    out = run_from_before(tmp_path / "old", "norm_first")
    assert settings_for({"out": str(out), "resume": True}).norm_first is False
    with pytest.raises(RunError, match="trained with norm_first False, not True"):
        settings_for({"out": str(out), "resume": True, "norm_first": True})


def test_attention_and_activation_dropout_follow_dropout_unless_given(tmp_path):
    """--attention-dropout and --activation-dropout reach the attention weights and the feed-forward
    activations and nothing else; left out (for a task, and in a run from before them) both are
    --dropout's, and a corpus's defaults set both to 0."""
    def rates(model):
        layer = model.decoder.layers[0]
        return (model.encoder.embed.dropout.p, layer.attn_res.dropout.p, layer.self_attn.dropout,
                layer.cross_attn.dropout, layer.ff.dropout.p)

    apart = Trainer(TrainSettings(**SMALL, dropout=0.2, attention_dropout=0.0, activation_dropout=0.05,
                                  out=str(tmp_path / "apart"))).model.module
    assert rates(apart) == (0.2, 0.2, 0.0, 0.0, 0.05)
    assert rates(Trainer(TrainSettings(**SMALL, dropout=0.2, out=str(tmp_path / "one"))).model.module) == (0.2,) * 5
    out = run_from_before(tmp_path / "old", "attention_dropout", "activation_dropout")
    resumed = settings_for({"out": str(out), "resume": True})
    assert (resumed.attention_dropout, resumed.activation_dropout) == (None, None)
    corpus = write_anki(tmp_path / "fra.txt")  # a corpus spares them (fairseq's defaults), a task does not
    assert (settings_for({"data": str(corpus)}).attention_dropout, settings_for({"task": "copy"}).attention_dropout) \
        == (0.0, None)
    with pytest.raises(ValueError, match="--activation-dropout must be a number in \\[0, 1\\), not 1.0"):
        settings_for({"task": "copy", "activation_dropout": 1.0})
