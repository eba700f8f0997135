# %% [markdown]
# # A small transformer, piece by piece (seed 000: tokens, embeddings, positions, MHA, encoder, decoder)
#
# Seed 000 turns "My dog is cute" into padded ids and a padding mask, embeds them, adds a fixed or a
# learned positional encoding, writes multi-head attention by hand, and stacks encoder and decoder
# layers (post-LN, as in the paper). This lesson takes the same steps with our library, prints the
# shape at each one, draws the masks and the encodings, and checks every layer against PyTorch's own
# (`nn.MultiheadAttention`, `nn.TransformerEncoderLayer`, `nn.TransformerDecoderLayer`) on the same
# weights. Where the seed's code departs from the paper (its positional encoding puts the sines and
# the cosines side by side instead of interleaving them), the lesson shows both.
#
#     python examples/lesson_000_transformer_pieces.py [--out lesson_000_out] [--quick]

# %%
import math
import sys
from pathlib import Path

import numpy as np

import models  # installed from this checkout (pip install -e .): a notebook finds examples/ from any folder

sys.path.insert(0, str(Path(models.__file__).resolve().parents[1] / "examples"))
from lesson_kit import TORCH, Checks, heatmaps, options, result

import tinygrad_tx as tx
from models import (EncoderLayer, DecoderLayer, LearnedPositionalEmbedding, Transformer, greedy_decode,
                    sinusoidal_table)
from models.config import LayerConfig
from models.masks import padding_mask
from models.text.data import BOS_ID, EOS_ID, PAD_ID, SPECIALS, Vocab
from models.text.tokenization import Tokenizer
from tinygrad_tx import Tensor

args = options("Seed 000's small transformer, piece by piece, checked against PyTorch.", "lesson_000_out")
check = Checks()
tx.manual_seed(0)

# %% [markdown]
# ## Tokens, padding and the padding mask
# Seed 000 asks BERT's tokenizer for 10 ids: [CLS] my dog is cute [SEP], then zeros, and a mask of ones
# for the real tokens. Here words are the tokens, `<bos>`/`<eos>` play [CLS]/[SEP], and `<pad>` is 0.

# %%
tokenizer = Tokenizer("word")
text = "my dog is cute"
vocab = Vocab(list(SPECIALS) + sorted(set(tokenizer.encode(text + " my cat is small"))))
ids = vocab.encode(tokenizer.encode(text), add_bos=True, add_eos=True)
max_length = 10
ids = np.array([ids + [PAD_ID] * (max_length - len(ids))])  # (1, 10)
attention_mask = ids != PAD_ID  # (1, 10): True for real tokens
print(f"ids  {ids[0].tolist()}\nmask {attention_mask[0].astype(int).tolist()}")

# %% [markdown]
# ## Embeddings
# Each id becomes a vector of d_model numbers: (batch, N_id, d_model). BERT's is 768 wide; ours 16.

# %%
cfg = LayerConfig(d_model=16, num_heads=4, d_ff=64, dropout=0.0, max_len=max_length)
model = Transformer(len(vocab), len(vocab), d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                    d_ff=64, dropout=0.0, max_len=max_length)
tokens = model.encoder.embed.tokens(Tensor(ids))  # (1, 10, 16)
print(f"ids {ids.shape} -> token vectors {tokens.shape}")

# %% [markdown]
# ## Positions: fixed or learned
# The seed's formula interleaves sin and cos (P^{2i} = sin, P^{2i+1} = cos), but its code concatenates
# all the sines, then all the cosines: the same numbers with the columns in another order. Ours follows
# the formula. A learned encoding is one trained vector per position: the seed keeps it as (1, N, D) and
# slices it as if it were (N, D); ours is (max_len, D), sliced to the sentence's length.

# %%
positions, d_model = np.arange(50)[:, None], 64
omega = np.exp(-np.arange(0, d_model, 2) / d_model * math.log(10000.0))  # (d_model / 2,)
concatenated = np.concatenate([np.sin(positions * omega), np.cos(positions * omega)], axis=-1)  # the seed's code
ours = sinusoidal_table(50, d_model)  # (50, 64), interleaved
order = np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])  # sines first, then cosines
print(f"ours[pos, 2i] = sin: {np.allclose(ours[:, 0::2], np.sin(positions * omega))}; "
      f"the seed's table is ours with columns reordered: {np.allclose(concatenated, ours[:, order])}")
heatmaps(np.stack([ours, concatenated]), args.out / "positional_encodings.png",
         ["interleaved (the formula; ours)", "concatenated (seed 000's code)"], cmap="RdBu", vmin=-1, vmax=1,
         suptitle="fixed positional encodings (rows: position, columns: dimension)")
learned = LearnedPositionalEmbedding(16, max_length)
print(f"learned table {learned.weight.shape} -> sliced for 6 tokens: {learned.weight[0:6].shape}")
x = model.encoder.embed(Tensor(ids))  # token vectors * sqrt(d_model) + positions: (1, 10, 16)

# %% [markdown]
# ## Multi-head attention, step by step
# The seed's `MHA.call`, with our first encoder layer's weights, printing each shape, then the same
# layer called as one module. Masking fills the blocked scores with the most negative float32 (the seed
# adds -1e9), so their weights are exactly 0.

# %%
mha = model.encoder.layers[0].self_attn
B, N, D, h = 1, max_length, 16, mha.num_heads
keep = padding_mask(Tensor(ids), PAD_ID)  # (B, 1, 1, N): True = may attend
with tx.no_grad():
    Q, K, V = mha.w_q(x), mha.w_k(x), mha.w_v(x)  # (B, N, D) each
    print(f"projected Q, K, V: {Q.shape}")
    Q, K, V = (t.reshape(B, N, h, D // h).transpose(0, 2, 1, 3) for t in (Q, K, V))  # (B, h, N, d)
    print(f"split into {h} heads: {Q.shape}")
    scores = Q @ K.swapaxes(-1, -2) / math.sqrt(D // h)  # (B, h, N, N)
    print(f"scores: {scores.shape}; mask {keep.shape} broadcasts over heads and queries")
    weights = scores.masked_fill(~keep, np.finfo(np.float32).min).softmax(axis=-1)  # (B, h, N, N)
    heads = weights @ V  # (B, h, N, d)
    print(f"weights {weights.shape} -> per-head output {heads.shape}")
    joined = heads.transpose(0, 2, 1, 3).reshape(B, N, D)  # (B, N, D)
    by_hand = mha.w_o(joined).numpy()  # (B, N, D)
    print(f"heads joined {joined.shape} -> W_out -> {by_hand.shape}")
    module_out = mha(x, mask=keep).numpy()
hand_gap = np.abs(by_hand - module_out).max()
print(f"by hand vs MultiHeadAttention: max difference {hand_gap:.1e}")

# %% [markdown]
# ## The masks, drawn
# Padding: no query looks at a `<pad>` key. Look-ahead (causal): no query looks at a later key. The
# decoder's self-attention uses both. True (white) = may attend.

# %%
words = [vocab.tokens[i] for i in ids[0]]
padding_keep = np.broadcast_to(attention_mask[0], (N, N))
causal_keep = np.tril(np.ones((N, N), dtype=bool))
heatmaps(np.stack([padding_keep, causal_keep, padding_keep & causal_keep]).astype(float), args.out / "masks.png",
         ["padding", "look-ahead (causal)", "both (decoder self-attention)"], words, words,
         "True (white) = the query (row) may attend to the key (column)", cmap="Greys_r", vmin=0, vmax=1)

# %% [markdown]
# ## Feed-forward, encoder layer, decoder layer
# Encoder layer (post-LN, as the seed and the paper): LN(x + MHA(x)), then LN(. + FFN(.)), FFN being
# D -> d_ff -> D with ReLU. Decoder layer: masked self-attention, cross-attention (queries from the
# target, keys and values from the encoder's output), feed-forward, each followed by add & norm.
# PyTorch's layers with the same weights are the check. (Its masks say True = *blocked*.)

# %%
encoder_layer, decoder_layer = EncoderLayer(cfg).eval(), DecoderLayer(cfg).eval()
target = np.array([[BOS_ID, 4, 5, 6, EOS_ID, PAD_ID]])  # (1, T)
y = model.decoder.embed(Tensor(target))  # (1, T, D)
with tx.no_grad():
    memory = encoder_layer(x, keep)  # (1, N, D)
    decoded = decoder_layer(y, memory, padding_mask(Tensor(target), PAD_ID), keep)  # (1, T, D)
print(f"encoder layer {x.shape} -> {memory.shape}; decoder layer {y.shape} with memory -> {decoded.shape}")
try:
    import torch
    from torch_twins import attention_twin, decoder_layer_twin, encoder_layer_twin

    def t64(a) -> torch.Tensor:
        return torch.from_numpy(np.asarray(a.numpy() if isinstance(a, Tensor) else a, dtype=np.float64))

    pads, target_pads = torch.from_numpy(ids == PAD_ID), torch.from_numpy(target == PAD_ID)
    real, target_real = ids[0] != PAD_ID, target[0] != PAD_ID  # padded positions are never read
    gaps = {"nn.MultiheadAttention": np.abs(
                module_out - attention_twin(mha)(t64(x), t64(x), t64(x), key_padding_mask=pads)[0].detach().numpy()
            )[0, real].max(),
            "nn.TransformerEncoderLayer": np.abs(
                memory.numpy() - encoder_layer_twin(encoder_layer, False, "relu")(
                    t64(x), src_key_padding_mask=pads).detach().numpy())[0, real].max(),
            "nn.TransformerDecoderLayer": np.abs(
                decoded.numpy() - decoder_layer_twin(decoder_layer, False, "relu")(
                    t64(y), t64(memory), tgt_mask=torch.from_numpy(~np.tril(np.ones((6, 6), dtype=bool))),
                    tgt_key_padding_mask=target_pads, memory_key_padding_mask=pads).detach().numpy())[0, target_real].max()}
    for name, gap in gaps.items():
        print(f"ours vs torch.{name}: max difference {gap:.1e}")
except ImportError:
    gaps = {}
    print("PyTorch is not installed: its layers are not compared (the checks below say so)")

# %% [markdown]
# ## The whole model
# Encoder and decoder stacks (the seed's `Encoder` loops over `Nof_layers`, a name it never defined;
# ours keeps its layers in a `ModuleList`), then a linear layer to the target vocabulary. Untrained, it
# already runs end to end: logits for every target position, and greedy decoding with the key/value
# cache. `examples/copy_task.py` trains this model; `lesson_001_translation.py` makes it translate.

# %%
logits = model(ids, target)  # (B, T, vocab)
print(f"model(src {ids.shape}, tgt {target.shape}) -> logits {logits.shape}")
print(f"greedy decoding, untrained: {greedy_decode(model.eval(), ids, 6, BOS_ID, EOS_ID)[0].tolist()}")

# %% [markdown]
# ## Checks

# %%
check("the seed's concatenated table is ours with columns reordered", np.allclose(concatenated, ours[:, order]))
check("multi-head attention by hand equals MultiHeadAttention", hand_gap < 1e-5, f"{hand_gap:.1e}")
for name in ("nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.TransformerDecoderLayer"):
    if name in gaps:
        check(f"ours equals torch.{name}", gaps[name] < 1e-4, f"{gaps[name]:.1e}")
    else:
        check.skip(f"ours equals torch.{name}", TORCH)
result(("" if not gaps else f"every layer equals PyTorch's on the same weights, within {max(gaps.values()):.0e}; ")
       + f"attention by hand equals `MultiHeadAttention` within {hand_gap:.0e}")
check.finish()
