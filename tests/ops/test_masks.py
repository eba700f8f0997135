"""Masks: a query that may see nothing gets zeros and zero gradients, causal attention never
looks ahead, and only boolean masks are taken."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import leaf


def test_fully_masked_attention_rows_are_zero_and_have_zero_gradients(device):
    rng = np.random.default_rng(0)
    q, k, v = (leaf(rng.standard_normal((2, 3, 4)), device) for _ in range(3))
    keep = np.ones((2, 3, 3), dtype=bool)
    keep[0, 1] = False  # query 1 of batch 0 may see nothing
    keep[1] = False  # batch 1 sees nothing at all
    out, weights = F.scaled_dot_product_attention(q, k, v, mask=keep, return_weights=True)
    out.backward(Tensor(rng.standard_normal(out.shape), device=device))
    assert np.all(out.numpy()[0, 1] == 0) and np.all(out.numpy()[1] == 0)
    assert np.all(weights.numpy()[0, 1] == 0)
    np.testing.assert_allclose(weights.numpy()[0, [0, 2]].sum(axis=-1), 1.0, rtol=1e-14)
    for t in (q, k, v):
        assert np.isfinite(t.grad.numpy()).all()
        assert np.all(t.grad.numpy()[1] == 0)
    assert np.all(q.grad.numpy()[0, 1] == 0)


def test_causal_attention_never_looks_ahead_even_with_huge_logits(device):
    """d out[i] / d x[j] is exactly zero for every j > i, also with logits near 1e4."""
    rng = np.random.default_rng(0)
    T, D = 5, 4
    x = leaf(rng.standard_normal((T, D)), device)
    wq, wk = (Tensor(rng.standard_normal((D, D)) * 100, device=device) for _ in range(2))
    out = F.scaled_dot_product_attention(x @ wq, x @ wk, x, causal=True)
    for i in range(T):
        (g,) = tx.grad(out[i].sum(), [x], retain_graph=True)
        g = g.numpy()
        assert np.isfinite(g).all()
        assert np.all(g[i + 1:] == 0), f"output {i} depends on later positions"
        assert np.any(g[: i + 1] != 0)


@pytest.mark.parametrize("mask", [np.ones((3, 3)), np.ones((3, 3), dtype=np.int64)], ids=["float", "int"])
def test_float_and_integer_masks_are_rejected(device, mask):
    x = leaf(np.zeros((3, 3)), device)
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean"):
        x.masked_fill(mask, 0.0)
    with pytest.raises(TypeError, match="where: the mask must be boolean"):
        tx.where(mask, x, 0.0)
    with pytest.raises(TypeError, match="scaled_dot_product_attention: the mask must be boolean"):
        F.scaled_dot_product_attention(x, x, x, mask=Tensor(mask, device=device))
