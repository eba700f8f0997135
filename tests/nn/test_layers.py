"""The layers (nn/layers.py): Linear, LayerNorm and Embedding against torch.nn, outputs and
every gradient, the padding row of an embedding getting none."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor, nn


pytestmark = pytest.mark.usefixtures("on_each_device")


def copy_to_torch(torch, ours, theirs, transposed=()):
    """Copy our parameters into the torch layer by name; our Linear weight is (in, out), torch's (out, in)."""
    with torch.no_grad():
        for name, p in ours.named_parameters():
            getattr(theirs, name).copy_(torch.from_numpy(p.numpy().T if name in transposed else p.numpy()))


def close(ours, theirs, what=""):
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5, err_msg=what)


@pytest.mark.parametrize("make,make_torch,transposed,shape", [
    (lambda: nn.Linear(4, 3), lambda torch: torch.nn.Linear(4, 3), {"weight"}, (2, 5, 4)),
    (lambda: nn.LayerNorm(6), lambda torch: torch.nn.LayerNorm(6), set(), (3, 4, 6)),
], ids=["Linear", "LayerNorm"])
def test_layer_matches_torch(torch, make, make_torch, transposed, shape):
    rng = np.random.default_rng(0)
    ours, theirs = make(), make_torch(torch)
    for p in ours.parameters():
        nn.init.normal_(p)  # not LayerNorm's ones and zeros, which would hide a mix-up
    copy_to_torch(torch, ours, theirs, transposed)
    x_np = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)
    x, tx_ = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    y, ty = ours(x), theirs(tx_)
    g = rng.standard_normal(y.shape).astype(np.float32)  # a random upstream gradient, not a plain sum
    (y * Tensor(g)).sum().backward()
    (ty * torch.from_numpy(g)).sum().backward()
    close(y.numpy(), ty.detach().numpy(), "output")
    close(x.grad.numpy(), tx_.grad.numpy(), "input gradient")
    for name, p in ours.named_parameters():
        expected = getattr(theirs, name).grad.numpy()
        close(p.grad.numpy(), expected.T if name in transposed else expected, name)


@pytest.mark.parametrize("padding_idx", [-1, -3])
def test_an_embedding_padded_from_the_end_is_torchs_eagerly_and_under_create_graph(torch, padding_idx):
    """`nn.Embedding(4, 3, padding_idx=-1)` names the last row, as torch.nn.Embedding does: it
    starts at zero and gets no gradient, also under create_graph (where -1 was compared with the
    ids as given and the row got one)."""
    layer, ref = nn.Embedding(4, 3, padding_idx=padding_idx), torch.nn.Embedding(4, 3, padding_idx=padding_idx)
    assert layer.padding_idx == ref.padding_idx == 4 + padding_idx
    assert not layer.weight.numpy()[padding_idx].any()
    copy_to_torch(torch, layer, ref)
    ids = np.array([[3, 1, 3], [0, 1, 2]])
    (expected,) = torch.autograd.grad((ref(torch.from_numpy(ids)) ** 2).sum(), [ref.weight])
    for create_graph in (False, True):
        (g,) = tx.grad((layer(ids) ** 2).sum(), [layer.weight], create_graph=create_graph)
        close(g.numpy(), expected.numpy(), f"weight, create_graph={create_graph}")
        assert not g.numpy()[padding_idx].any()


def test_embedding_matches_torch_and_padding_row_gets_no_gradient(torch):
    rng = np.random.default_rng(0)
    layer = nn.Embedding(5, 3, padding_idx=0)
    assert not layer.weight.numpy()[0].any()  # the padding row starts at zero
    ref = torch.nn.Embedding(5, 3, padding_idx=0)
    copy_to_torch(torch, layer, ref)
    ids = np.array([[1, 1, 1, 2], [0, 3, 1, 0]])  # repeats must accumulate
    g_np = rng.standard_normal((2, 4, 3)).astype(np.float32)
    y, ty = layer(ids), ref(torch.from_numpy(ids))
    (y * Tensor(g_np)).sum().backward()
    (ty * torch.from_numpy(g_np)).sum().backward()
    close(y.numpy(), ty.detach().numpy(), "output")
    close(layer.weight.grad.numpy(), ref.weight.grad.numpy(), "weight")
    assert not layer.weight.grad.numpy()[0].any()
    np.testing.assert_allclose(layer.weight.grad.numpy()[1], g_np[0, :3].sum(0) + g_np[1, 2], rtol=1e-6)
