"""Module hooks (nn/hooks.py): forward hooks see and may change inputs and outputs, a
backward pre-hook sees and may replace the output's gradient, global hooks see every call,
and each handle removes what it added. Tensor hooks are in tests/engine/test_tensor_hooks.py."""
import numpy as np

import tinygrad_tx as tx
from models import MultiHeadAttention
from tinygrad_tx import Tensor, nn

from ..helpers import no_observer_left


def test_forward_hooks_record_activations_and_can_be_removed():
    tx.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    seen = []
    handle = model[0].register_forward_hook(lambda m, args, out: seen.append((args[0].shape, out.numpy())))
    x = Tensor(np.ones((5, 3), dtype=np.float32))
    model(x)
    assert seen[0][0] == (5, 3)
    np.testing.assert_allclose(seen[0][1], model[0](x).numpy())
    handle.remove()
    model(x)
    assert len(seen) == 2  # the direct call above was recorded; the call after remove() was not
    assert not model[0]._hooks


def test_forward_hooks_can_change_inputs_and_outputs():
    layer = nn.Linear(2, 2)
    x = Tensor(np.ones((1, 2), dtype=np.float32))
    plain = layer(x).numpy()
    with layer.register_forward_pre_hook(lambda m, args: (args[0] * 2.0,)):
        with layer.register_forward_hook(lambda m, args, out: out + 1.0):
            changed = layer(x).numpy()
    np.testing.assert_allclose(changed, layer(x * 2.0).numpy() + 1.0, rtol=1e-6)
    np.testing.assert_allclose(layer(x).numpy(), plain)  # both handles left their `with`


def test_backward_pre_hook_sees_and_replaces_the_output_gradient():
    tx.manual_seed(0)
    first, second = nn.Linear(3, 4), nn.Linear(4, 1)
    x = Tensor(np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32))

    def grads(hook=None):
        first.zero_grad()
        handle = first.register_full_backward_pre_hook(hook) if hook else None
        h = first(x)
        h.retain_grad()
        second(h).sum().backward()
        if handle:
            handle.remove()
        return h.grad.numpy(), first.weight.grad.numpy()

    plain_h, plain_w = grads()
    seen = []
    hooked_h, hooked_w = grads(lambda m, grad_output: seen.append((m, grad_output)) or (grad_output[0] * 2.0,))
    assert seen[0][0] is first and len(seen[0][1]) == 1
    np.testing.assert_allclose(seen[0][1][0].numpy(), plain_h)
    np.testing.assert_allclose(hooked_w, 2 * plain_w, rtol=1e-6)


def test_forward_hooks_record_attention_maps_of_multi_head_attention():
    tx.manual_seed(0)
    mha = MultiHeadAttention(8, num_heads=2)
    maps = []

    def ask(module, args, kwargs):
        return args, {**kwargs, "return_weights": True}

    def keep(module, args, kwargs, output):
        maps.append(output[1].numpy())
        return output[0]

    mha.register_forward_pre_hook(ask, with_kwargs=True)
    mha.register_forward_hook(keep, with_kwargs=True)
    x = Tensor(np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32))
    out = mha(x, causal=True)
    assert out.shape == (2, 5, 8) and maps[0].shape == (2, 2, 5, 5)
    np.testing.assert_allclose(maps[0].sum(-1), 1.0, rtol=1e-6)
    assert np.all(np.triu(maps[0], k=1) == 0)  # causal: no weight on later keys


def test_global_module_hooks_see_every_call():
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    called = []
    with nn.register_module_forward_hook(lambda m, args, out: called.append(type(m).__name__)):
        model(Tensor(np.ones((1, 2), dtype=np.float32)))
    assert called == ["Linear", "LayerNorm", "Sequential"] and no_observer_left()
