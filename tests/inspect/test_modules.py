"""Module-level instruments (inspect/modules.py): parameters named by their paths, and the
attention maps of every attention layer, leaving the model's output as it was."""
import numpy as np

import tinygrad_tx as tx
from models import Transformer
from tinygrad_tx import nn
from tinygrad_tx.inspect import attention_maps, name_parameters


def test_name_parameters_uses_paths_and_keeps_given_names():
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))
    model[1].bias.name = "beta"
    name_parameters(model)
    assert [p.name for p in model.parameters()] == ["0.weight", "0.bias", "1.weight", "beta"]


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
