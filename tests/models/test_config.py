"""The config dataclasses are each model's single list of options."""
import inspect
from dataclasses import asdict, fields

import pytest

from models import GPT, EncoderClassifier, Transformer
from models.config import ClassifierConfig, GPTConfig, TransformerConfig

MODELS = [(Transformer, TransformerConfig, (11, 13)), (GPT, GPTConfig, (11,)),
          (EncoderClassifier, ClassifierConfig, (11, 3))]
SMALL = dict(d_model=8, num_heads=2, d_ff=16)


@pytest.mark.parametrize("model_cls,config_cls,args", MODELS)
def test_constructor_takes_exactly_the_config_fields(model_cls, config_cls, args):
    names = list(inspect.signature(model_cls).parameters)
    assert sorted(names) == sorted(f.name for f in fields(config_cls))


@pytest.mark.parametrize("model_cls,config_cls,args", MODELS)
def test_keywords_and_a_ready_config_build_the_same_model(model_cls, config_cls, args):
    by_keywords = model_cls(*args, **SMALL)
    by_config = model_cls(config_cls(*args, **SMALL))
    assert by_keywords.config == by_config.config
    assert [(n, p.shape) for n, p in by_keywords.named_parameters()] == \
        [(n, p.shape) for n, p in by_config.named_parameters()]
    assert model_cls(**asdict(by_keywords.config)).config == by_keywords.config  # what `load` does


def test_defaults_follow_the_paper_and_gpt():
    paper, gpt = TransformerConfig(5, 5), GPTConfig(5)
    assert (paper.d_model, paper.num_heads, paper.d_ff, paper.num_encoder_layers) == (512, 8, 2048, 6)
    assert paper.norm_first is False and gpt.norm_first is True and gpt.activation == "gelu"


def test_unknown_option_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'heads'"):
        Transformer(5, 5, heads=2)
