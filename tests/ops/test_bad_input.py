"""Bad input to an op gets an error that says what is wrong, in the user's terms (shapes, ids,
dtypes, the op's name), before it turns into a wrong number or a NumPy message about some
internal array."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import t


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


@pytest.mark.parametrize("padding_idx", [4, 5, 99, -5, -99])
def test_an_embedding_padding_idx_that_names_no_row_is_refused_at_the_call(torch, padding_idx):
    """Out of [-4, 4) for a table of four rows: accepted before, it failed later with a raw
    IndexError (or was ignored under create_graph). PyTorch refuses it at the call too."""
    w = t(4, 3, requires_grad=True)
    message = f"embedding: padding_idx {padding_idx} is out of range for a table of 4 rows"
    with pytest.raises(ValueError, match=message):
        F.embedding([0, 1], w, padding_idx=padding_idx)
    with pytest.raises(ValueError, match=message):
        tx.nn.Embedding(4, 3, padding_idx=padding_idx)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        torch.nn.Embedding(4, 3, padding_idx=padding_idx)


@pytest.mark.parametrize("padding_idx", [True, 1.0, "1", [1]])
def test_an_embedding_padding_idx_must_be_a_whole_number(padding_idx):
    with pytest.raises(TypeError, match="embedding: padding_idx must be a whole number or None"):
        F.embedding([0, 1], t(4, 3), padding_idx=padding_idx)
    with pytest.raises(TypeError, match="embedding: padding_idx must be a whole number or None"):
        tx.nn.Embedding(4, 3, padding_idx=padding_idx)


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


def test_clear_messages_for_odd_arguments(device):
    """`masked_fill(1, ...)`, integer logits in cross_entropy, `swapaxes(0, 5)` and 0-d layer_norm
    or cross_entropy each get a message naming what was wrong; they gave unclear ones."""
    x = Tensor(np.ones((2, 3)), device=device)
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean, not int"):
        x.masked_fill(1, 0.0)
    with pytest.raises(TypeError, match="cross_entropy: logits must be a floating tensor"):
        F.cross_entropy(Tensor(np.ones((2, 3), dtype=np.int64), device=device), [0, 1])
    with pytest.raises(TypeError, match="cross_entropy: logits must be a floating tensor"):
        F.cross_entropy(Tensor(1.0, device=device), [])
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        x.swapaxes(0, 5)
    with pytest.raises(ValueError, match="layer_norm: .*0-d"):
        F.layer_norm(Tensor(1.0, device=device))
