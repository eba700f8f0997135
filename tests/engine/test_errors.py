"""Bad input gets an error that says what is wrong, in the user's terms (shapes, ids, dtypes),
before it turns into a wrong number or a NumPy message about some internal array."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor


def t(*shape, dtype=np.float64, device="cpu", requires_grad=False):
    return Tensor(np.ones(shape, dtype=dtype), device=device, requires_grad=requires_grad)


def test_matmul_shape_mismatch_names_both_shapes(device):
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\)"):
        t(2, 3, device=device) @ t(4, 5, device=device)
    with pytest.raises(ValueError, match=r"\(3,\) and \(2, 4\)"):
        t(3, device=device) @ t(2, 4, device=device)
    with pytest.raises(ValueError, match=r"MatMul on inputs of shape \(2, 3, 4\), \(3, 4, 5\)"):
        t(2, 3, 4, device=device) @ t(3, 4, 5, device=device)  # batch axes that do not broadcast
    with pytest.raises(ValueError, match="scalar"):
        t(device=device) @ t(3, device=device)


def test_embedding_ids_out_of_range_name_the_id_and_the_size(device):
    w = t(5, 3, device=device, requires_grad=True)
    with pytest.raises(IndexError, match="embedding: id 7 is out of range for size 5"):
        F.embedding([[0, 7], [1, 2]], w)
    with pytest.raises(IndexError, match="id -1 is out of range for size 5"):
        F.embedding(Tensor(np.array([0, -1]), device=device), w)


def test_embedding_ids_must_be_integers(device):
    w = t(5, 3, device=device, requires_grad=True)
    with pytest.raises(TypeError, match="ids must be integers, not float"):
        F.embedding(Tensor(np.array([0.0, 1.0]), device=device), w)
    with pytest.raises(TypeError, match="ids must be integers"):
        F.embedding([0.5, 1.0], w)


def test_cross_entropy_bad_targets(device):
    logits = t(3, 5, device=device, requires_grad=True)
    with pytest.raises(IndexError, match="cross_entropy: id 5 is out of range for size 5"):
        F.cross_entropy(logits, [0, 5, 1])
    F.cross_entropy(logits, [0, -100, 1], ignore_index=-100)  # an ignored id may be anything
    with pytest.raises(TypeError, match="integers"):
        F.cross_entropy(logits, Tensor(np.array([0.0, 1.0, 2.0]), device=device))
    with pytest.raises(ValueError, match=r"need targets of shape \(3,\), got \(2,\)"):
        F.cross_entropy(logits, [0, 1])
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, [0, 1, 2], reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(logits, [0, 1, 2], label_smoothing=1.5)


def test_backward_on_a_non_scalar_needs_a_gradient():
    y = t(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"non-scalar tensor of shape \(2, 3\)"):
        y.backward()
    with pytest.raises(RuntimeError, match=r"gradient of shape \(3,\) for a tensor of shape \(2, 3\)"):
        y.backward(Tensor(np.ones(3)))


def test_backward_on_a_tensor_that_does_not_require_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        (t(3) * 2.0).sum().backward()
    with tx.no_grad():
        y = (t(3, requires_grad=True) * 2.0).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_only_floating_tensors_can_require_grad():
    with pytest.raises(TypeError, match="only floating tensors can require grad; this one is int64"):
        Tensor(np.arange(3), requires_grad=True)
    with pytest.raises(TypeError, match="bool"):
        Tensor([True, False], requires_grad=True)


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


def test_indexing_errors(device):
    x = t(3, 4, device=device, requires_grad=True)
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        x[[0, 3]]
    with pytest.raises(IndexError, match="index -5 is out of range for axis 1 of size 4"):
        x[:, [-5]]
    with pytest.raises(IndexError, match="integer or boolean, not float"):
        x[np.array([0.0, 1.0])]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 1, 2]


def test_shape_and_argument_errors_name_the_op(device):
    x = t(2, 3, device=device, requires_grad=True)
    with pytest.raises(ValueError, match=r"Reshape on inputs of shape \(2, 3\)"):
        x.reshape(4, 2)
    with pytest.raises(ValueError, match="axis 2 is out of range for a tensor with 2 dimensions"):
        x.sum(axis=2)
    with pytest.raises(ValueError, match="stack: all tensors must have one shape"):
        tx.stack([x, t(3, 2, device=device)])
    with pytest.raises(ValueError, match="cat: axis 2 is out of range"):
        tx.cat([x, x], axis=2)
    with pytest.raises(ValueError, match="dropout: p must be in"):
        F.dropout(x, 1.0)
    with pytest.raises(ValueError, match='approximate must be "none" or "tanh"'):
        x.gelu("fast")
    with pytest.raises(ValueError, match=r"layer_norm: input of shape \(2, 3\) needs weight and bias of shape \(3,\)"):
        F.layer_norm(x, t(2, device=device))
    with pytest.raises(ValueError, match="attention"):
        F.scaled_dot_product_attention(t(2, 3, device=device), t(4, 2, device=device), t(4, 2, device=device))
    with pytest.raises(ValueError, match="one element"):
        x.item()


def test_gradcheck_needs_something_to_check():
    with pytest.raises(ValueError, match="no input has requires_grad=True"):
        tx.gradcheck(lambda x: x * 2.0, [t(3)])
