"""Properties of the Transformer that hold whatever the weights: its gradient is the true
derivative, the future never leaks into the past, padding changes nothing real, and a
tied weight is one parameter whose gradient adds up both uses."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import Transformer
from tinygrad_tx import Tensor, nn

pytestmark = pytest.mark.usefixtures("on_each_device")

PAD, V = 0, 12


def tiny(seed=0, **options):
    tx.manual_seed(seed)
    kwargs = dict(d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16, dropout=0.0,
                  max_len=32, pad_id=PAD)
    model = Transformer(V, V, **{**kwargs, **options})
    for _, t in model.named_tensors():
        t.data = t.data.astype(np.float64)
    return model


def batch(seed=1):
    """Two sentence pairs, the second padded on both sides."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, V, (2, 6))
    tgt = rng.integers(1, V, (2, 6))
    src[1, 4:], tgt[1, 4:] = PAD, PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def loss_of(model, src, tgt_in, tgt_out):
    return F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD)


def grads(model, *data):
    model.zero_grad()
    loss_of(model, *data).backward()
    return {name: p.grad.numpy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_gradcheck_whole_transformer(norm_first):
    model = tiny(norm_first=norm_first)
    src, tgt_in, _ = batch()
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    slots = [(enc.self_attn.w_q, "weight"), (dec.cross_attn.w_k, "weight"), (dec.ff.linear1, "bias"),
             (dec.attn_res.norm, "weight"), (model.encoder.embed.tokens, "weight"), (model.out, "weight")]

    def logits(*weights):
        for (module, name), w in zip(slots, weights):
            setattr(module, name, w)
        return model(src, tgt_in)

    inputs = [getattr(module, name) for module, name in slots]
    assert tx.gradcheck(logits, inputs, max_elements=0, n_directions=3, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_no_gradient_flows_from_the_future(scale):
    """d out[:, i] / d embedding[:, j] is exactly 0 for j > i, also with logits near 1e4."""
    model = tiny(norm_first=False)
    for layer in model.decoder.layers:
        layer.self_attn.w_q.weight.data *= scale
        layer.self_attn.w_k.weight.data *= scale
    src, tgt_in, _ = batch()
    T = tgt_in.shape[1]
    embedded = Tensor(np.random.default_rng(5).standard_normal((2, T, 8)), requires_grad=True)

    class Fixed(nn.Module):  # stands in for the target embedding, so we can differentiate w.r.t. its output
        def forward(self, ids, offset=0):
            return embedded

    model.decoder.embed = Fixed()
    tgt_in = np.ones_like(tgt_in)  # no target padding: only the causal mask hides anything
    for i in range(T):
        embedded.grad = None
        out = model(src, tgt_in)[:, i]
        (out * Tensor(np.random.default_rng(i).standard_normal(out.shape))).sum().backward()
        g = embedded.grad.numpy()
        assert np.all(g[:, i + 1:] == 0), f"position {i} depends on later positions"
        assert np.all(np.abs(g[:, i]).sum(axis=-1) > 0)
        if scale == 1.0:  # (at scale 100 the softmax saturates: unattended earlier positions get exactly 0)
            assert np.all(np.abs(g[:, :i + 1]).sum(axis=-1) > 0), f"position {i} ignores earlier positions"


def test_pad_content_changes_nothing_real():
    """Whatever sits at pad positions (here: the pad embedding rows) leaves real logits, loss and gradients alone."""
    model = tiny()
    data = batch()
    src, tgt_in, tgt_out = data
    real = tgt_in != PAD
    logits, loss, g = model(src, tgt_in).numpy(), loss_of(model, *data).item(), grads(model, *data)
    rng = np.random.default_rng(7)
    for embed in (model.encoder.embed.tokens, model.decoder.embed.tokens):
        embed.weight.data[PAD] = embed.weight.backend.from_host(rng.standard_normal(8) * 10)
    logits2, loss2, g2 = model(src, tgt_in).numpy(), loss_of(model, *data).item(), grads(model, *data)
    assert np.abs(logits[real] - logits2[real]).max() < 1e-12
    assert abs(loss - loss2) < 1e-12
    for name in g:
        assert np.abs(g[name] - g2[name]).max() < 1e-12, name


def test_more_padding_changes_nothing_real():
    model = tiny()
    src, tgt_in, tgt_out = batch()
    longer = [np.pad(a, ((0, 0), (0, 3)), constant_values=PAD) for a in (src, tgt_in, tgt_out)]
    T = tgt_in.shape[1]
    real = tgt_in != PAD
    a, b = model(src, tgt_in).numpy(), model(*longer[:2]).numpy()[:, :T]
    assert np.abs(a[real] - b[real]).max() < 1e-12
    assert abs(loss_of(model, src, tgt_in, tgt_out).item() - loss_of(model, *longer).item()) < 1e-12
    g, g_long = grads(model, src, tgt_in, tgt_out), grads(model, *longer)
    for name in g:
        assert np.abs(g[name] - g_long[name]).max() < 1e-12, name


def test_all_pad_source_row_is_finite():
    model = tiny()
    src, tgt_in, tgt_out = batch()
    src[1] = PAD
    logits = model(src, tgt_in)
    assert np.isfinite(logits.numpy()).all()
    g = grads(model, src, tgt_in, tgt_out)
    assert all(np.isfinite(v).all() for v in g.values())


def test_tied_weight_is_one_parameter_with_both_gradients():
    model = tiny(tie_embeddings=True)
    weight = model.decoder.embed.tokens.weight
    params = model.parameters()
    assert sum(p is weight for p in params) == 1
    assert len({id(p) for p in params}) == len(params)
    untied = tiny(tie_embeddings=False)
    assert len(params) == len(untied.parameters()) - 2  # no separate output weight and bias

    data = batch()
    model.zero_grad()
    loss_of(model, *data).backward()
    total = weight.grad.numpy()

    # the same computation with the two uses split: the embedding keeps `weight`, the output gets a copy
    copy = Tensor(weight.data.copy(), requires_grad=True)
    model.project = lambda h: h @ copy.T
    model.zero_grad()
    loss_of(model, *data).backward()
    from_embedding, from_output = weight.grad.numpy(), copy.grad.numpy()
    assert np.abs(from_embedding).sum() > 0 and np.abs(from_output).sum() > 0
    assert np.abs(total - (from_embedding + from_output)).max() < 1e-12
