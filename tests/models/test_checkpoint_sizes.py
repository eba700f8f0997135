"""A checkpoint from elsewhere whose config does not fit its weights is refused before the model
is built (building first would allocate what the config asks for: 16 GiB for d_model 65536)."""
import pytest

import tinygrad_tx as tx
from models import GPT, EncoderClassifier, Transformer
from models.checkpoint import MAX_POSITIONS
from tinygrad_tx.serialization import LoadError

SMALL = dict(d_model=8, num_heads=2, d_ff=16, max_len=20)
MODELS = {Transformer: (11, 13), GPT: (11,), EncoderClassifier: (11, 3)}
HUGE = {"d_model": 65536, "d_ff": 10 ** 9, "src_vocab": 10 ** 8, "tgt_vocab": 10 ** 8, "vocab": 10 ** 8,
        "num_classes": 10 ** 8, "num_layers": 1000, "num_encoder_layers": 1000, "num_decoder_layers": 1000}


def saved(tmp_path, model_cls):
    path = tmp_path / "model.npz"
    model_cls(*MODELS[model_cls], **SMALL).save(path)
    return path


def never_built(monkeypatch, model_cls):
    def build(self, *args, **kwargs):
        raise AssertionError(f"{model_cls.__name__} was built before its config was checked")
    monkeypatch.setattr(model_cls, "__init__", build)


@pytest.mark.parametrize("model_cls", list(MODELS))
def test_a_config_larger_than_its_weights_is_refused_before_building(tmp_path, monkeypatch, model_cls):
    path = saved(tmp_path, model_cls)
    state = tx.load(path)
    never_built(monkeypatch, model_cls)
    options = [name for name in HUGE if name in state["config"]]
    assert len(options) >= 4
    for name in options:
        tx.save({**state, "config": {**state["config"], name: HUGE[name]}}, path)
        with pytest.raises(LoadError, match=f"config says {name} {HUGE[name]} but the stored weights say"):
            model_cls.load(path)


def test_positions_no_weight_records_are_bounded(tmp_path, monkeypatch):
    """Fixed sinusoids store no weight: their table's length is bounded instead; learned
    positions (GPT) are read off their weight."""
    for model_cls, message in [(Transformer, "max_len"), (GPT, "config says max_len")]:
        path = saved(tmp_path, model_cls)
        state = tx.load(path)
        tx.save({**state, "config": {**state["config"], "max_len": MAX_POSITIONS + 1}}, path)
        with monkeypatch.context() as patched:
            never_built(patched, model_cls)
            with pytest.raises(LoadError, match=message):
                model_cls.load(path)


def test_a_missing_weight_cannot_hide_a_size(tmp_path, monkeypatch):
    """Removing the weights that record d_ff does not let a huge d_ff through unchecked."""
    path = saved(tmp_path, Transformer)
    state = tx.load(path)
    weights = {k: v for k, v in state["weights"].items() if not k.endswith("ff.linear1.weight")}
    tx.save({**state, "config": {**state["config"], "d_ff": 10 ** 9}, "weights": weights}, path)
    never_built(monkeypatch, Transformer)
    with pytest.raises(LoadError, match="no stored weight records d_ff"):
        Transformer.load(path)


@pytest.mark.parametrize("model_cls", list(MODELS))
def test_a_fitting_config_still_loads(tmp_path, model_cls):
    path = saved(tmp_path, model_cls)
    loaded = model_cls.load(path)
    assert loaded.config == model_cls(*MODELS[model_cls], **SMALL).config
