"""Positional encodings and token embeddings against worked values and their defining properties."""
import numpy as np
import pytest

import tinygrad_tx as tx
from models import (InputEmbedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding,
                    sinusoidal_table)
from models.config import LayerConfig
from tinygrad_tx import Tensor

pytestmark = pytest.mark.usefixtures("on_each_device")


def test_sinusoidal_worked_values():
    pe = sinusoidal_table(50, 20)
    np.testing.assert_allclose(pe[0], [0, 1] * 10, atol=1e-12)
    np.testing.assert_allclose(pe[1, :6], [0.841470985, 0.540302306, 0.387674234, 0.921796446, 0.157826640,
                                           0.987466836], atol=1e-9)
    np.testing.assert_allclose(pe[2, :4], [0.909297427, -0.416146837, 0.714713463, 0.699417376], atol=1e-9)


@pytest.mark.parametrize("k", [1, 3, 17])
def test_shift_by_k_is_one_fixed_rotation(k):
    """PE[p + k] = M_k PE[p] for every p, with M_k the block rotation by k·ω_i."""
    d, n = 20, 100
    pe = sinusoidal_table(n + k, d)
    omega = 1 / 10000 ** (np.arange(0, d, 2) / d)
    M = np.zeros((d, d))
    for i, w in enumerate(omega):
        c, s = np.cos(k * w), np.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]  # sin(a+b), cos(a+b) from sin a, cos a
    np.testing.assert_allclose(pe[k:], pe[:n] @ M.T, atol=1e-9)
    # independently of that formula: the best single linear map over all positions is exact
    fitted, *_ = np.linalg.lstsq(pe[:n], pe[k:], rcond=None)
    np.testing.assert_allclose(pe[:n] @ fitted, pe[k:], atol=1e-9)


def test_sinusoidal_module_is_a_constant_added_at_an_offset():
    module = SinusoidalPositionalEncoding(20, 16)
    assert module.table.requires_grad is False and module.table.dtype == np.float32
    x = Tensor(np.zeros((2, 3, 20), dtype=np.float64))
    out = module(x, offset=5)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy()[1], sinusoidal_table(16, 20)[5:8], atol=1e-7)
    with pytest.raises(ValueError, match="max_len=16"):
        module(x, offset=14)


def test_learned_positions_train_and_token_embeddings_scale():
    tx.manual_seed(0)
    learned = LearnedPositionalEmbedding(4, 8)  # d_model 4, max_len 8
    x = Tensor(np.ones((2, 3, 4), dtype=np.float32))
    learned(x, offset=2).sum().backward()
    g = learned.weight.grad.numpy()
    assert np.all(g[2:5] == 2) and np.all(g[:2] == 0) and np.all(g[5:] == 0)

    tokens = TokenEmbedding(10, 16)
    ids = np.array([[1, 2, 2]])
    np.testing.assert_allclose(tokens(ids).numpy()[0], tokens.weight.numpy()[[1, 2, 2]] * 4.0, rtol=1e-6)
    scaled = tokens(np.arange(10)[None]).numpy()
    assert 0.5 < scaled.std() < 1.5  # N(0, 1/d) times √d: unit scale, like the positional encoding


def test_input_embedding_dropout_follows_the_mode():
    tx.manual_seed(0)
    cfg = LayerConfig(d_model=8, num_heads=2, d_ff=16, dropout=0.5, max_len=8, norm_first=False,
                      activation="relu")
    embed = InputEmbedding(cfg, 10)
    ids = np.array([[1, 2, 3, 4]])
    assert np.any(embed(ids).numpy() == 0)
    embed.eval()
    np.testing.assert_allclose(embed(ids).numpy(), embed.positions(embed.tokens(Tensor(ids)), 0).numpy())
