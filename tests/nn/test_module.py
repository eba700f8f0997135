"""nn.Module (nn/module.py): finding parameters (lists, dicts, tied weights), state dicts,
modes, and moving to another device with the optimizer still working. The layers against
torch.nn are in test_layers.py."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor, nn, optim


pytestmark = pytest.mark.usefixtures("on_each_device")


def leaf(*shape):
    return Tensor(np.ones(shape, dtype=np.float32), requires_grad=True)


class Inner(nn.Module):
    def __init__(self):
        self.proj = nn.Linear(3, 3)


class Tree(nn.Module):
    """Parameters in every place a module may keep them."""

    def __init__(self):
        self.scale = leaf(3)
        self.plain = [leaf(3), nn.Linear(3, 3)]
        self.table = {"a": nn.Linear(3, 3), "b": [nn.LayerNorm(3)]}
        self.child = Inner()
        self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])
        self.constant = Tensor(np.ones(3, dtype=np.float32))  # no grad: not a parameter

    def forward(self, x):
        x = x * self.scale + self.plain[0]
        x = self.plain[1](x).tanh()
        x = self.table["b"][0](self.table["a"](x))
        x = self.child.proj(x).tanh()
        for layer in self.layers:
            x = layer(x).tanh()
        return x * self.constant


def test_parameters_recurse_into_attributes_lists_dicts_and_modules():
    model = Tree()
    names = [name for name, _ in model.named_parameters()]
    assert names == ["scale", "plain.0", "plain.1.weight", "plain.1.bias", "table.a.weight", "table.a.bias",
                     "table.b.0.weight", "table.b.0.bias", "child.proj.weight", "child.proj.bias",
                     "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert [id(p) for p in model.parameters()] == [id(p) for _, p in model.named_parameters()]
    assert all(p is not model.constant for p in model.parameters())


def test_every_parameter_gets_a_nonzero_gradient():
    """Parameters kept in a plain list or dict must train too (nanoGPT #21)."""
    model = Tree()
    x = Tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    (model(x) * Tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and np.abs(p.grad.numpy()).sum() > 0, name
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_sequential_names_match_pytorch():
    class Net(nn.Module):
        def __init__(self):
            self.layers = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))

    assert [n for n, _ in Net().named_parameters()] == ["layers.0.weight", "layers.0.bias",
                                                         "layers.1.weight", "layers.1.bias"]


class TiedPair(nn.Module):
    def __init__(self, tie=True):
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
        if tie:
            self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x).tanh())


def test_tied_weight_listed_once_and_gets_the_sum_of_both_uses():
    tx.manual_seed(0)
    tied = TiedPair()
    untied = TiedPair(tie=False)  # the same numbers, as two separate tensors
    for p, q in [(untied.a.weight, tied.a.weight), (untied.b.weight, tied.a.weight),
                 (untied.a.bias, tied.a.bias), (untied.b.bias, tied.b.bias)]:
        p.data = q.data.copy()
    assert [n for n, _ in tied.named_parameters()] == ["a.weight", "a.bias", "b.bias"]

    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(2))
    (tied(Tensor(x)) * Tensor(g)).sum().backward()
    (untied(Tensor(x)) * Tensor(g)).sum().backward()
    np.testing.assert_allclose(tied.a.weight.grad.numpy(),
                               untied.a.weight.grad.numpy() + untied.b.weight.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_state_dict_round_trip_and_copies(tmp_path):
    tx.manual_seed(0)
    source, target = Tree(), Tree()
    tx.manual_seed(1)
    for p in target.parameters():  # make them differ
        nn.init.normal_(p)
    state = source.state_dict()
    tx.save(state, tmp_path / "m.npz")
    target.load_state_dict(tx.load(tmp_path / "m.npz"))
    x = Tensor(np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32))
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())

    state["scale"][:] = 7  # the state dict is a copy ...
    assert source.scale.numpy()[0] == 1
    target.load_state_dict(state)
    state["scale"][:] = 9  # ... and loading copies too: no memory shared with the dict
    assert target.scale.numpy()[0] == 7


def test_load_state_dict_names_bad_keys_and_changes_nothing():
    model = Tree()
    good = model.state_dict()
    before = {n: p.numpy() for n, p in model.named_parameters()}

    missing = dict(good)
    del missing["layers.1.weight"]
    with pytest.raises(KeyError, match=r"layers\.1\.weight"):
        model.load_state_dict(missing)
    with pytest.raises(KeyError, match="extra.weight"):
        model.load_state_dict({**good, "extra.weight": np.zeros(3)})
    bad_shape = {name: a + 1 for name, a in good.items()}  # every value changed ...
    bad_shape["table.a.weight"] = np.zeros((3, 4), dtype=np.float32)  # ... and one mis-shaped
    with pytest.raises(ValueError, match=r"table\.a\.weight.*\(3, 4\).*\(3, 3\)"):
        model.load_state_dict(bad_shape)
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[name], err_msg=name)


def test_train_and_eval_reach_every_submodule_and_switch_dropout():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = [nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))]
            self.heads = {"out": nn.Dropout(0.5)}

        def forward(self, x):
            return self.heads["out"](self.blocks[0](x))

    net = Net()
    assert all(m.training for m in net.modules())
    x = Tensor(np.ones((50, 4), dtype=np.float32))
    drop = net.blocks[0][1]
    assert (drop(x).numpy() == 0).any()  # training: some dropped
    net.eval()
    assert not any(m.training for m in net.modules())
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # deterministic
    net.train()
    assert all(m.training for m in net.modules())


class MLP(nn.Module):
    def __init__(self):
        self.layers = [nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).tanh()
        return x


def adam_steps(model, opt, xs, device):
    for x in xs:
        loss = (model(Tensor(x, device=device)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_to_strict_moves_in_place_and_the_optimizer_keeps_working():
    """The "strict" device is a CPU backend with CuPy's manners (no NumPy mixing)."""
    tx.set_device("cpu")  # this test moves a model from the CPU itself
    xs = [np.random.default_rng(i).standard_normal((5, 4)).astype(np.float32) for i in range(4)]
    tx.manual_seed(0)
    reference = MLP()
    ref_opt = optim.Adam(reference.parameters(), lr=1e-2)
    adam_steps(reference, ref_opt, xs, "cpu")

    tx.manual_seed(0)
    model = MLP()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    adam_steps(model, opt, xs[:1], "cpu")  # state now lives on the CPU
    opt.zero_grad()
    (model(Tensor(xs[1])) ** 2).mean().backward()  # and so do these gradients
    before = [id(p) for p in model.parameters()]
    assert model.to("strict") is model
    assert [id(p) for p in model.parameters()] == before  # the optimizer's tensors, moved
    assert all(p.device == "strict" and p.grad.device == "strict" for p in model.parameters())
    opt.step()
    adam_steps(model, opt, xs[2:], "strict")
    assert all(type(a).__name__ == "StrictArray" for s in opt.state.values() for a in s.values())
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-6, atol=1e-7)
