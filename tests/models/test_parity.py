"""Our models against PyTorch twins holding the same weights, in float64 with dropout 0.

The twins are torch.nn.MultiheadAttention, torch.nn.Transformer and a stack of
torch.nn.TransformerEncoderLayer (for GPT), plus embeddings and output layers
written out here. Logits must agree to 1e-6 and every parameter's gradient to
1e-5, on padded batches so the masks are exercised; a 50-step Adam run must
follow the same loss curve; and second derivatives, a Hessian-vector product of the
loss through the whole model, must agree with PyTorch's double backward to 1e-8.
"""
import functools
import math

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import GPT, MultiHeadAttention, Transformer
from tinygrad_tx import optim

torch = pytest.importorskip("torch")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),  # torch, about its fast path
              pytest.mark.usefixtures("on_each_device")]

PAD = 0
D, H, FF = 16, 4, 32


def to_float64(model):
    for _, t in model.named_tensors():
        if t.dtype.kind == "f":
            t.data = t.data.astype(np.float64)
    return model


# -- weight maps: (our tensor, torch parameter, rows of it, stored transposed?) --------

def mha_pairs(ours, theirs):
    d = ours.w_q.weight.shape[0]
    for j, linear in enumerate((ours.w_q, ours.w_k, ours.w_v)):
        rows = slice(j * d, (j + 1) * d)
        yield linear.weight, theirs.in_proj_weight, rows, True
        yield linear.bias, theirs.in_proj_bias, rows, False
    yield ours.w_o.weight, theirs.out_proj.weight, slice(None), True
    yield ours.w_o.bias, theirs.out_proj.bias, slice(None), False


def norm_pairs(ours, theirs):
    yield ours.weight, theirs.weight, slice(None), False
    yield ours.bias, theirs.bias, slice(None), False


def ff_pairs(ours, theirs):
    for name in ("linear1", "linear2"):
        yield getattr(ours, name).weight, getattr(theirs, name).weight, slice(None), True
        yield getattr(ours, name).bias, getattr(theirs, name).bias, slice(None), False


def encoder_layer_pairs(ours, theirs):
    yield from mha_pairs(ours.self_attn, theirs.self_attn)
    yield from ff_pairs(ours.ff, theirs)
    yield from norm_pairs(ours.attn_res.norm, theirs.norm1)
    yield from norm_pairs(ours.ff_res.norm, theirs.norm2)


def decoder_layer_pairs(ours, theirs):
    yield from mha_pairs(ours.self_attn, theirs.self_attn)
    yield from mha_pairs(ours.cross_attn, theirs.multihead_attn)
    yield from ff_pairs(ours.ff, theirs)
    yield from norm_pairs(ours.attn_res.norm, theirs.norm1)
    yield from norm_pairs(ours.cross_res.norm, theirs.norm2)
    yield from norm_pairs(ours.ff_res.norm, theirs.norm3)


def copy_weights(pairs):
    with torch.no_grad():
        for ours, theirs, rows, transposed in pairs:
            value = ours.numpy().T if transposed else ours.numpy()
            theirs[rows] = torch.from_numpy(value.copy())


def check_coverage(model, twin, pairs):
    """The maps must name every parameter on both sides: "every gradient" means every one."""
    assert {id(o) for o, *_ in pairs} == {id(p) for p in model.parameters()}
    assert {id(t) for _, t, *_ in pairs} == {id(p) for p in twin.parameters()}


def max_grad_diff(pairs):
    worst = 0.0
    for ours, theirs, rows, transposed in pairs:
        g = theirs.grad[rows].numpy()
        assert ours.grad is not None, f"no gradient for a parameter of shape {ours.shape}"
        worst = max(worst, np.abs(ours.grad.numpy() - (g.T if transposed else g)).max())
    return worst


# -- twins ---------------------------------------------------------------------------

TORCH_ACTIVATIONS = {"relu": "relu", "gelu": "gelu",
                     "gelu_tanh": functools.partial(torch.nn.functional.gelu, approximate="tanh")}


class TorchSeq2Seq(torch.nn.Module):
    """torch.nn.Transformer with our embedding recipe (√d scaling, sinusoids) and output layer."""

    def __init__(self, model):
        super().__init__()
        c = model.config
        self.d_model = c.d_model
        self.core = torch.nn.Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers,
                                         c.d_ff, dropout=0.0, activation=TORCH_ACTIVATIONS[c.activation],
                                         batch_first=True,
                                         norm_first=c.norm_first, dtype=torch.float64)
        if not c.norm_first:  # the paper's post-LN stacks have no final LayerNorm; torch always adds one
            self.core.encoder.norm = self.core.decoder.norm = None
        self.core.encoder.enable_nested_tensor = self.core.encoder.use_nested_tensor = False
        self.src_embed = torch.nn.Embedding(c.src_vocab, c.d_model, dtype=torch.float64)
        self.tgt_embed = torch.nn.Embedding(c.tgt_vocab, c.d_model, dtype=torch.float64)
        self.out = None if c.tie_embeddings else torch.nn.Linear(c.d_model, c.tgt_vocab, dtype=torch.float64)
        self.register_buffer("pe", torch.from_numpy(model.encoder.embed.positions.table.numpy()))
        self.pairs = self._pairs(model)
        copy_weights(self.pairs)

    def _pairs(self, model):
        pairs = [(model.encoder.embed.tokens.weight, self.src_embed.weight, slice(None), False),
                 (model.decoder.embed.tokens.weight, self.tgt_embed.weight, slice(None), False)]
        for ours, theirs in zip(model.encoder.layers, self.core.encoder.layers):
            pairs += encoder_layer_pairs(ours, theirs)
        for ours, theirs in zip(model.decoder.layers, self.core.decoder.layers):
            pairs += decoder_layer_pairs(ours, theirs)
        if model.config.norm_first:
            pairs += norm_pairs(model.encoder.norm, self.core.encoder.norm)
            pairs += norm_pairs(model.decoder.norm, self.core.decoder.norm)
        if self.out is not None:
            pairs += [(model.out.weight, self.out.weight, slice(None), True),
                      (model.out.bias, self.out.bias, slice(None), False)]
        return pairs

    def forward(self, src, tgt):
        scale = math.sqrt(self.d_model)
        x = self.src_embed(src) * scale + self.pe[:src.shape[1]]
        y = self.tgt_embed(tgt) * scale + self.pe[:tgt.shape[1]]
        T = tgt.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # torch: True = blocked
        h = self.core(x, y, tgt_mask=future, src_key_padding_mask=src == PAD,
                      tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        return self.out(h) if self.out is not None else h @ self.tgt_embed.weight.T


class TorchGPT(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        c = model.config
        self.d_model = c.d_model
        self.embed = torch.nn.Embedding(c.vocab, c.d_model, dtype=torch.float64)
        self.pos = torch.nn.Parameter(torch.zeros(c.max_len, c.d_model, dtype=torch.float64))
        self.layers = torch.nn.ModuleList([
            torch.nn.TransformerEncoderLayer(c.d_model, c.num_heads, c.d_ff, dropout=0.0, activation=c.activation,
                                             batch_first=True, norm_first=True, dtype=torch.float64)
            for _ in range(c.num_layers)])
        self.norm = torch.nn.LayerNorm(c.d_model, dtype=torch.float64)
        body = model.body
        self.pairs = [(body.embed.tokens.weight, self.embed.weight, slice(None), False),
                      (body.embed.positions.weight, self.pos, slice(None), False)]
        for ours, theirs in zip(body.layers, self.layers):
            self.pairs += encoder_layer_pairs(ours, theirs)
        self.pairs += norm_pairs(body.norm, self.norm)
        copy_weights(self.pairs)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d_model) + self.pos[:T]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        for layer in self.layers:
            x = layer(x, src_mask=future)
        return self.norm(x) @ self.embed.weight.T


# -- data -----------------------------------------------------------------------------

def padded_batch(rng, B, S, T, vocab):
    """Sources and targets with ragged lengths; no row is all padding (torch would give NaN)."""
    src = rng.integers(1, vocab, (B, S))
    tgt = rng.integers(1, vocab, (B, T + 1))
    for b in range(B):
        src[b, rng.integers(2, S + 1):] = PAD
        tgt[b, rng.integers(3, T + 2):] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def make_model(norm_first, tie=False, seed=0, activation="relu"):
    tx.manual_seed(seed)
    model = Transformer(11, 13, d_model=D, num_heads=H, num_encoder_layers=2, num_decoder_layers=2, d_ff=FF,
                        dropout=0.0, max_len=32, pad_id=PAD, norm_first=norm_first, tie_embeddings=tie,
                        activation=activation)
    return to_float64(model)


# -- tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first,tie,activation", [(False, False, "relu"), (True, False, "relu"),
                                                       (False, True, "relu"), (False, False, "gelu"),
                                                       (False, False, "gelu_tanh")],
                         ids=["post-LN", "pre-LN", "post-LN-tied", "post-LN-gelu", "post-LN-gelu-tanh"])
def test_transformer_matches_torch_logits_and_every_gradient(norm_first, tie, activation):
    model = make_model(norm_first, tie, activation=activation)
    twin = TorchSeq2Seq(model)
    check_coverage(model, twin, twin.pairs)
    src, tgt_in, tgt_out = padded_batch(np.random.default_rng(1), 4, 7, 6, 11)

    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits, tgt_out, ignore_index=PAD)
    loss.backward()
    t_logits = twin(torch.from_numpy(src), torch.from_numpy(tgt_in))
    t_loss = torch.nn.functional.cross_entropy(t_logits.reshape(-1, 13), torch.from_numpy(tgt_out).reshape(-1),
                                               ignore_index=PAD)
    t_loss.backward()

    logit_diff = np.abs(logits.numpy() - t_logits.detach().numpy()).max()
    grad_diff = max_grad_diff(twin.pairs)
    print(f"transformer {'pre' if norm_first else 'post'}-LN tied={tie}: "
          f"max |logit diff| {logit_diff:.2e}, max |grad diff| {grad_diff:.2e}")
    assert logit_diff < 1e-6
    assert abs(loss.item() - t_loss.item()) < 1e-9
    assert grad_diff < 1e-5


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_multi_head_attention_matches_torch(cross):
    tx.manual_seed(0)
    ours = to_float64(MultiHeadAttention(D, H))
    theirs = torch.nn.MultiheadAttention(D, H, batch_first=True, dtype=torch.float64)
    pairs = list(mha_pairs(ours, theirs))
    copy_weights(pairs)
    check_coverage(ours, theirs, pairs)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, D))
    memory = rng.standard_normal((3, 7, D)) if cross else x
    pad = np.zeros((3, memory.shape[1]), dtype=bool)
    pad[0, 3:], pad[2, 1:] = True, True  # row 2 keeps a single key
    upstream = rng.standard_normal(x.shape)

    xt, mt = tx.Tensor(x, requires_grad=True), tx.Tensor(memory, requires_grad=True)
    out, weights = ours(xt, mt if cross else None, mask=~pad[:, None, None, :], return_weights=True)
    (out * tx.Tensor(upstream)).sum().backward()
    xq = torch.tensor(x, requires_grad=True)
    xm = torch.tensor(memory, requires_grad=True) if cross else xq
    t_out, t_weights = theirs(xq, xm, xm, key_padding_mask=torch.from_numpy(pad), average_attn_weights=False)
    (t_out * torch.from_numpy(upstream)).sum().backward()

    out_diff = np.abs(out.numpy() - t_out.detach().numpy()).max()
    grad_diff = max(max_grad_diff(pairs), np.abs(xt.grad.numpy() - xq.grad.numpy()).max())
    if cross:
        grad_diff = max(grad_diff, np.abs(mt.grad.numpy() - xm.grad.numpy()).max())
    print(f"MHA {'cross' if cross else 'self'}: max |out diff| {out_diff:.2e}, max |grad diff| {grad_diff:.2e}")
    assert out_diff < 1e-10
    assert np.abs(weights.numpy() - t_weights.detach().numpy()).max() < 1e-12
    assert grad_diff < 1e-10


def test_gpt_matches_torch_decoder():
    tx.manual_seed(0)
    model = to_float64(GPT(17, d_model=D, num_heads=H, num_layers=2, d_ff=FF, dropout=0.0, max_len=16))
    twin = TorchGPT(model)
    check_coverage(model, twin, twin.pairs)
    ids = np.random.default_rng(3).integers(0, 17, (3, 9))
    logits = model(ids)
    loss = F.cross_entropy(logits[:, :-1], ids[:, 1:])
    loss.backward()
    t_logits = twin(torch.from_numpy(ids))
    t_targets = torch.from_numpy(ids[:, 1:]).reshape(-1)
    torch.nn.functional.cross_entropy(t_logits[:, :-1].reshape(-1, 17), t_targets).backward()
    logit_diff = np.abs(logits.numpy() - t_logits.detach().numpy()).max()
    grad_diff = max_grad_diff(twin.pairs)
    print(f"GPT: max |logit diff| {logit_diff:.2e}, max |grad diff| {grad_diff:.2e}")
    assert logit_diff < 1e-6
    assert grad_diff < 1e-5


def test_fifty_adam_steps_follow_torch():
    model = make_model(norm_first=False)
    twin = TorchSeq2Seq(model)
    ours_opt = optim.Adam(model.parameters(), lr=3e-3)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=3e-3)
    rng = np.random.default_rng(4)
    losses = []
    for step in range(50):
        src, tgt_in, tgt_out = padded_batch(rng, 8, 7, 6, 11)
        ours_opt.zero_grad()
        loss = F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD)
        loss.backward()
        ours_opt.step()
        twin_opt.zero_grad()
        t_logits = twin(torch.from_numpy(src), torch.from_numpy(tgt_in))
        t_loss = torch.nn.functional.cross_entropy(t_logits.reshape(-1, 13), torch.from_numpy(tgt_out).reshape(-1),
                                                   ignore_index=PAD)
        t_loss.backward()
        twin_opt.step()
        losses.append((loss.item(), t_loss.item()))
    worst = max(abs(a - b) / abs(b) for a, b in losses)
    print(f"Adam, 50 steps: loss {losses[0][0]:.4f} -> {losses[-1][0]:.4f}, max relative difference {worst:.2e}")
    assert worst <= 1e-5
    assert losses[-1][0] < 0.9 * losses[0][0]  # it trained, so the comparison means something


# -- second derivatives: a Hessian-vector product through the whole model --------------------

def hessian_vector_gap(pairs, our_loss, their_loss, seed=5):
    """H·v, the derivative of (∇loss · v) for one random direction v over every parameter, by our
    double backward (`tx.grad` with create_graph, then again) and by PyTorch's, with the same v
    laid out in its parameters; returns the largest difference and the largest |H·v|."""
    rng = np.random.default_rng(seed)
    ours = [o for o, *_ in pairs]
    vs = [rng.standard_normal(p.shape) for p in ours]
    grads = tx.grad(our_loss(), ours, create_graph=True)
    hv = tx.grad(sum((g * tx.Tensor(v)).sum() for g, v in zip(grads, vs)), ours)
    theirs = list({id(t): t for _, t, *_ in pairs}.values())
    tv = {id(t): torch.zeros_like(t) for t in theirs}
    for (_, t, rows, transposed), v in zip(pairs, vs):
        tv[id(t)][rows] = torch.from_numpy(v.T if transposed else v)
    with sdpa_kernel(SDPBackend.MATH):  # the attention kernel with a double backward on the CPU
        t_grads = torch.autograd.grad(their_loss(), theirs, create_graph=True)
        t_hv = torch.autograd.grad(sum((g * tv[id(t)]).sum() for g, t in zip(t_grads, theirs)), theirs)
    t_hv = dict(zip(map(id, theirs), t_hv))
    gap = scale = 0.0
    for (_, t, rows, transposed), h in zip(pairs, hv):
        ref = t_hv[id(t)][rows].numpy()
        ref = ref.T if transposed else ref
        gap, scale = max(gap, np.abs(h.numpy() - ref).max()), max(scale, np.abs(ref).max())
    return gap, scale


@pytest.mark.parametrize("norm_first,tie", [(False, False), (True, False), (False, True)],
                         ids=["post-LN", "pre-LN", "post-LN-tied"])
def test_transformer_hessian_vector_product_matches_torch(norm_first, tie):
    """Second derivatives through embeddings, padding-masked self- and cross-attention, causal
    attention, layer norms, the feed-forward layers and cross-entropy."""
    model = make_model(norm_first, tie)
    twin = TorchSeq2Seq(model)
    src, tgt_in, tgt_out = padded_batch(np.random.default_rng(1), 4, 7, 6, 11)
    gap, scale = hessian_vector_gap(
        twin.pairs, lambda: F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD),
        lambda: torch.nn.functional.cross_entropy(twin(torch.from_numpy(src), torch.from_numpy(tgt_in)).reshape(-1, 13),
                                                  torch.from_numpy(tgt_out).reshape(-1), ignore_index=PAD))
    print(f"transformer {'pre' if norm_first else 'post'}-LN tied={tie}: max |H·v| {scale:.2f}, "
          f"max |H·v - torch's| {gap:.2e}")
    assert scale > 0.1  # a real curvature, so the comparison means something
    assert gap < 1e-8


def test_gpt_hessian_vector_product_matches_torch():
    """The same through GPT: learned positions, causal attention, exact GELU, tied output embedding."""
    tx.manual_seed(0)
    model = to_float64(GPT(17, d_model=D, num_heads=H, num_layers=2, d_ff=FF, dropout=0.0, max_len=16))
    twin = TorchGPT(model)
    ids = np.random.default_rng(3).integers(0, 17, (3, 9))
    targets = torch.from_numpy(ids[:, 1:]).reshape(-1)
    gap, scale = hessian_vector_gap(
        twin.pairs, lambda: F.cross_entropy(model(ids)[:, :-1], ids[:, 1:]),
        lambda: torch.nn.functional.cross_entropy(twin(torch.from_numpy(ids))[:, :-1].reshape(-1, 17), targets))
    print(f"GPT: max |H·v| {scale:.2f}, max |H·v - torch's| {gap:.2e}")
    assert scale > 0.1
    assert gap < 1e-8
