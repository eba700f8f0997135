"""Dtypes through the ops: float32 stays float32 (Python numbers, 0-d arrays and fused ops
included), float16 stays float16, integer operands take the float dtype, and float32 and
float64 never mix silently."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import leaf, t


F32_CASES = {
    "mul_int": lambda x: x * 2,
    "div_large": lambda x: x / 123456,
    "add_int": lambda x: x + 1,
    "rsub": lambda x: 1.5 - x,
    "rdiv": lambda x: 2 / (x.abs() + 1),
    "rpow": lambda x: 2 ** x,
    "pow_scalar": lambda x: (x * x + 1) ** 0.5 + x ** 3,
    "pow_tensor": lambda x: (x.abs() + 1) ** x,
    "numpy_scalar": lambda x: x * np.float64(3.0) + np.float64(1.0),
    "unary": lambda x: x.exp() + (x.abs() + 1).log() + (x.abs() + 1).sqrt() + x.tanh() + x.sigmoid() + x.relu(),
    "gelu": lambda x: x.gelu() + x.gelu("tanh"),
    "reductions": lambda x: x.mean(axis=0) + x.var(axis=0) + x.max(axis=0) + x.sum(axis=0),
    "shape": lambda x: x.T.reshape(-1).expand(2, 12)[..., None, ::2],
    "index": lambda x: x[[1, 1, 2]],
    "softmax": lambda x: x.softmax() + x.log_softmax(axis=0),
    "layer_norm": lambda x: F.layer_norm(x),
    "cross_entropy": lambda x: F.cross_entropy(x, [0, 3, 1], ignore_index=1, label_smoothing=0.1),
    "attention": lambda x: F.scaled_dot_product_attention(x, x, x, mask=np.tri(3, dtype=bool)),
    "attention_dropout": lambda x: F.scaled_dot_product_attention(x, x, x, causal=True, dropout_p=0.5),
    "dropout": lambda x: F.dropout(x, 0.3),
    "masked_fill": lambda x: x.masked_fill(np.eye(3, 4, dtype=bool), -1e4),
    "where": lambda x: tx.where(x > 0, x, 0) + tx.where(x > 0, 1, x),
    "cat_stack": lambda x: tx.cat([x, x * 2], axis=1) + tx.stack([x, x], axis=1).reshape(3, 8),
    "linear": lambda x: F.linear(x, x.T, x[0, :3]),
}


@pytest.mark.parametrize("name", F32_CASES)
def test_float32_stays_float32(device, name):
    """Python numbers, 0-d arrays and fused ops must not promote float32 to float64,
    neither in the result nor in the gradient (CuPy makes that a 2x cost)."""
    x = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), requires_grad=True,
               device=device)
    y = F32_CASES[name](x)
    assert y.dtype == np.float32
    y.backward(Tensor(np.ones(y.shape, dtype=np.float32), device=device))
    assert x.grad.dtype == np.float32
    assert np.isfinite(x.grad.numpy()).all()


def test_float32_embedding_and_layer_norm_parameters(device):
    w = Tensor(np.ones((4, 3), np.float32), requires_grad=True, device=device)
    gain, bias = (Tensor(np.ones(3, np.float32), requires_grad=True, device=device) for _ in range(2))
    y = F.layer_norm(F.embedding([1, 1, 3], w) * Tensor(np.arange(3, dtype=np.float32), device=device), gain, bias)
    assert y.dtype == np.float32
    (y * y).sum().backward()
    assert {w.grad.dtype, gain.grad.dtype, bias.grad.dtype} == {np.dtype(np.float32)}


def test_exact_gelu_keeps_float16(torch, device):
    """Exact GELU on float16 gives float16 and a gradient; it returned float64, and its backward raised."""
    x = Tensor(np.array([-1.5, 0.25, 2.0], dtype=np.float16), device=device, requires_grad=True)
    y = x.gelu()
    assert y.dtype == np.float16
    y.sum().backward()
    assert x.grad.dtype == np.float16
    expected = torch.nn.functional.gelu(torch.tensor([-1.5, 0.25, 2.0], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=2e-3)


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b, "matmul": lambda a, b: a @ b, "where": lambda a, b: tx.where(a > 0, a, b),
    "cat": lambda a, b: tx.cat([a, b]),
}


@pytest.mark.parametrize("op", BINARY)
def test_mixed_float32_and_float64_raise_naming_both_dtypes(device, op):
    a, b = t(2, 2, dtype=np.float32, device=device), t(2, 2, dtype=np.float64, device=device)
    for x, y in ((a, b), (b, a)):
        with pytest.raises(TypeError) as err:
            BINARY[op](x, y)
        assert "float32" in str(err.value) and "float64" in str(err.value)


def test_integer_operands_are_promoted_to_the_float_dtype(device):
    x = t(3, dtype=np.float32, device=device)
    ids = Tensor(np.array([1, 2, 3]), device=device)
    assert (x * ids).dtype == np.float32 and (ids + x).dtype == np.float32
    np.testing.assert_array_equal((x * ids).numpy(), [1, 2, 3])


def test_mixed_dtypes_refused_at_forward(device):
    """Layer_norm and attention with a float32 input and float64 weights returned
    float64 and then failed in backward, blaming the op; a float32 gradient passed to backward()
    of a float64 tensor was stored as float32. Both are refused at forward, as `linear` does."""
    x32 = Tensor(np.ones((2, 4), dtype=np.float32), device=device, requires_grad=True)
    w64 = Tensor(np.ones(4), device=device, requires_grad=True)
    with pytest.raises(TypeError, match="layer_norm: dtype mismatch float32 and float64"):
        F.layer_norm(x32, w64, w64)
    q = Tensor(np.ones((2, 3, 4), dtype=np.float32), device=device)
    k = Tensor(np.ones((2, 3, 4)), device=device)
    with pytest.raises(TypeError, match="attention: dtype mismatch"):
        F.scaled_dot_product_attention(q, k, k)
    y = leaf([1.0, 2.0], device) * 2
    with pytest.raises(TypeError, match="float32 gradient for a float64 tensor"):
        y.backward(Tensor(np.ones(2, dtype=np.float32), device=device))
