# %% [markdown]
# # "I play soccer", by hand (seed 004: multi-head self-attention and positional encoding in NumPy)
#
# Seed 004 follows one word through attention (dot products, scaling, softmax, weighted values, sum),
# masks the future of "juego al fútbol", and fills the positional encoding of "I play soccer" number by
# number, ending with the identity that makes position 2 a rotation of position 1. This lesson takes
# the same steps with the seed's numbers and checks each against our library and against PyTorch,
# and then goes one step past the seed: a second derivative through attention.
# `examples/autograd_walkthrough.py` takes the same three words through backward: graph, trace, gradients.
#
#     python examples/lesson_004_attention_by_hand.py [--out lesson_004_out] [--quick]

# %%
import math
import sys
from pathlib import Path

import numpy as np

import models  # installed from this checkout (pip install -e .): a notebook finds examples/ from any folder

sys.path.insert(0, str(Path(models.__file__).resolve().parents[1] / "examples"))
from autograd_walkthrough import EMBEDDINGS, TOKENS
from lesson_kit import TORCH, Checks, heatmaps, options, result

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import MultiHeadAttention, sinusoidal_table
from tinygrad_tx import Tensor

args = options("Seed 004's attention and positional encoding, step by step.", "lesson_004_out")
check = Checks()

# %% [markdown]
# ## Where q, k and v come from
# The sentence is a matrix X, one row per word (seq_len 3, d_model 4: the seed's word vectors).
# q = X W^q, k = X W^k, v = X W^v, each (seq_len, depth).

# %%
X = np.array(EMBEDDINGS)  # (3, 4)
rng = np.random.default_rng(0)
depth = 4
W_q, W_k, W_v = (rng.normal(0, 0.5, (4, depth)) for _ in range(3))  # (d_model, depth) each
q, k, v = X @ W_q, X @ W_k, X @ W_v  # (3, depth) each
print(f"X {X.shape}; q {q.shape}, k {k.shape}, v {v.shape}")

# %% [markdown]
# ## The five steps for the word "I"
# 1. attention: q_1 . k_j for each word j; 2. scaled by sqrt(depth); 3. softmax over j;
# 4. value: each v_j times its weight; 5. sum: z_1. Then the same for "play" and "soccer".

# %%
z_loop = np.zeros((3, depth))
for i, word in enumerate(TOKENS):
    scores = np.array([q[i] @ k[j] for j in range(3)])  # step 1: (3,)
    scaled = scores / math.sqrt(depth)  # step 2
    weights = np.exp(scaled) / np.exp(scaled).sum()  # step 3
    z_loop[i] = sum(weights[j] * v[j] for j in range(3))  # steps 4 and 5: (depth,)
    print(f"{word:7s} weights {np.round(weights, 3)} -> z {np.round(z_loop[i], 3)}")
z_matrix = F.softmax(Tensor(q @ k.T / math.sqrt(depth))).numpy() @ v  # all words at once: (3, depth)
print(f"the matrix form softmax(q k^T / sqrt(depth)) v gives the same: {np.allclose(z_loop, z_matrix)}")

# %% [markdown]
# ## Masks: "juego al fútbol" may only look back
# Seed 004 writes the look-ahead mask with 1 = blocked and adds mask * -1e9 to the scores; seed 000
# writes 0 = blocked. Our one convention is a boolean with True = may attend, and the blocked scores
# get the dtype's most negative value, so a blocked weight is exactly 0 (the seed's 0.01 is a sketch).
# A padding mask hides the padding of a shorter sentence the same way.

# %%
scores = np.array([[.23, .12, .87], [.33, .43, .81], [.29, .77, .63]])  # the seed's example scores
seed_mask = 1 - np.tril(np.ones((3, 3)))  # seed 004: 1 = blocked
seed_weights = F.softmax(Tensor(scores + seed_mask * -1e9)).numpy()
keep = np.tril(np.ones((3, 3), dtype=bool))  # ours: True = may attend
our_weights = F.softmax(Tensor(scores).masked_fill(~keep, np.finfo(np.float64).min)).numpy()
print("weights with our boolean mask:\n", np.round(our_weights, 3))
padding_keep = np.array([True, True, False])  # "juego al <pad>": nobody looks at the padding
spanish = ["juego", "al", "fútbol"]
heatmaps(np.stack([seed_mask, 1 - seed_mask, keep.astype(float), np.broadcast_to(padding_keep, (3, 3)) * 1.0,
                   our_weights]),
         args.out / "lookahead_masks.png", ["seed 004: 1 = blocked", "seed 000: 0 = blocked", "ours: True = may attend",
                                  "ours, padding (3rd key a <pad>)", "softmax with our mask"],
         spanish, spanish, "look-ahead and padding masks (rows: query, columns: key)", cmap="Greys_r",
         annotate=True, vmin=0, vmax=1)

# %% [markdown]
# ## Several heads: our layer against PyTorch
# `MultiHeadAttention(d_model=4, num_heads=2)` splits the width into two heads of 2, attends in each,
# joins them and projects with W^o. PyTorch's `nn.MultiheadAttention` with the same weights is the
# independent truth, with and without the look-ahead mask (PyTorch's `attn_mask` is True = blocked).

# %%
mha = MultiHeadAttention(4, 2)
x = Tensor(X[None].astype(np.float32))  # (1, 3, 4)
for causal in (False, True):
    ours, weights = mha(x, causal=causal, return_weights=True)  # (1, 3, 4), (1, 2, 3, 3)
    print(f"causal={causal}: heads' weights {weights.shape}, output {ours.shape}")
try:
    import torch
    from torch_twins import attention_twin

    twin = attention_twin(mha)
    X64 = torch.from_numpy(X[None])
    theirs = [twin(X64, X64, X64, attn_mask=mask)[0].detach().numpy()
              for mask in (None, torch.from_numpy(~keep))]
    torch_gap = max(np.abs(mha(x, causal=c).numpy() - t).max() for c, t in zip((False, True), theirs))
    print(f"ours vs torch.nn.MultiheadAttention: max difference {torch_gap:.1e}")
except ImportError:
    torch_gap = None
    print("PyTorch is not installed: no comparison with nn.MultiheadAttention (the checks say so)")

# %% [markdown]
# ## How the slope itself changes: a second derivative through attention
# Take a loss of the queries, L(q) = Σ z ⊙ u for a fixed random u, z the masked attention of the three
# words. `tx.grad(L, [q], create_graph=True)` gives the slope ∇L as a graph of its own: attention, a
# fused op, builds its gradient from differentiable ops when asked to. Differentiating ∇L · d once more
# gives H d, the Hessian of L times a direction d, and dᵀ H d is the curvature of L along d: how fast
# the slope along d changes as q moves along d. The independent truths: the slope's own central
# difference, dᵀ (∇L(q + εd) - ∇L(q - εd)) / 2ε, and PyTorch's double backward.

# %%
u, direction = rng.normal(size=(3, depth)), rng.normal(size=(3, depth))  # (3, depth) each


def loss_of_queries(queries: Tensor) -> Tensor:
    z = F.scaled_dot_product_attention(queries, Tensor(k), Tensor(v), causal=True)  # (3, depth)
    return (z * Tensor(u)).sum()


def slope(queries: np.ndarray) -> np.ndarray:
    """∇L at `queries` by an ordinary backward: (3, depth)."""
    leaf = Tensor(queries, requires_grad=True)
    loss_of_queries(leaf).backward()
    return leaf.grad.numpy()


q_leaf = Tensor(q, requires_grad=True)
(grad_q,) = tx.grad(loss_of_queries(q_leaf), [q_leaf], create_graph=True)  # ∇L (3, depth), itself a graph
(hessian_d,) = tx.grad((grad_q * Tensor(direction)).sum(), [q_leaf])  # H d: (3, depth)
curvature = float((hessian_d.numpy() * direction).sum())
eps = 1e-5
finite_curvature = float(((slope(q + eps * direction) - slope(q - eps * direction)) * direction).sum() / (2 * eps))
print(f"curvature of L along d: {curvature:.9f} by backward twice, {finite_curvature:.9f} by central differences")
try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tq = torch.tensor(q, requires_grad=True)
    with sdpa_kernel(SDPBackend.MATH):  # the attention kernel with a double backward on the CPU
        tz = torch.nn.functional.scaled_dot_product_attention(tq, torch.tensor(k), torch.tensor(v), is_causal=True)
        (t_grad,) = torch.autograd.grad((tz * torch.tensor(u)).sum(), tq, create_graph=True)
        (t_hessian_d,) = torch.autograd.grad((t_grad * torch.tensor(direction)).sum(), tq)
    hessian_gap = float(np.abs(hessian_d.numpy() - t_hessian_d.numpy()).max())
    print(f"H d against PyTorch's double backward: max difference {hessian_gap:.1e}")
except ImportError:
    hessian_gap = None
    print("PyTorch is not installed: no comparison of H d")

# %% [markdown]
# ## Positional encoding, number by number
# PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle). With d_model = 10, the
# seed fills the vectors of "I" (pos 0) and "play" (pos 1) by hand; `sinusoidal_table` must agree.

# %%
table = sinusoidal_table(3, 10)  # (seq_len, d_model)
print("I    ", np.round(table[0], 4))
print("play ", np.round(table[1], 4))
seed_values = {(1, 0): 0.8414709848078965, (1, 1): 0.5403023058681398,  # sin(1), cos(1)
               (1, 2): 0.1578266401303058, (1, 3): 0.987466835729271}  # sin, cos of 1 / 10000^(2/10)
pe_gap = max(abs(table[pos, dim] - value) for (pos, dim), value in seed_values.items())
print(f"the seed's hand-computed values: max difference {pe_gap:.1e}; "
      f"X + PE for 'I play soccer' (d_model 4):\n{np.round(X + sinusoidal_table(3, 4), 3)}")

# %% [markdown]
# ## Why sines and cosines: position 2 from position 1
# sin(2x) = 2 sin x cos x and cos(2x) = cos²x - sin²x, pair by pair: "soccer"'s encoding follows from
# "play"'s. More generally PE(pos + k) is PE(pos) turned by a fixed rotation for every pair, so a
# relative offset is a linear map the model can learn. The heat-map is the one the tutorials draw.

# %%
play, soccer = table[1], table[2]
sin1, cos1 = play[0::2], play[1::2]
doubled = np.empty(10)
doubled[0::2], doubled[1::2] = 2 * sin1 * cos1, cos1 ** 2 - sin1 ** 2
rotation_gap = np.abs(doubled - soccer).max()
print(f"soccer from play by the double-angle identities: max difference {rotation_gap:.1e}")
offset, pe = 7, sinusoidal_table(40, 10)  # any offset, any position
turn = offset / 10000.0 ** (np.arange(0, 10, 2) / 10)  # the angle each (sin, cos) pair turns by: (5,)
sines, cosines = pe[:-offset, 0::2], pe[:-offset, 1::2]  # (33, 5) each
turned = np.empty_like(pe[offset:])
turned[:, 0::2] = sines * np.cos(turn) + cosines * np.sin(turn)  # sin(a + b)
turned[:, 1::2] = cosines * np.cos(turn) - sines * np.sin(turn)  # cos(a + b)
shift_gap = np.abs(turned - pe[offset:]).max()
print(f"PE(pos + {offset}) = PE(pos) rotated pair by pair, for every pos: max difference {shift_gap:.1e}")
big = sinusoidal_table(50, 128)  # (positions, d_model)
heatmaps(big[None], args.out / "positional_encoding.png", ["PE(pos, dim), d_model = 128"],
         cmap="RdBu", vmin=-1, vmax=1, suptitle="sinusoidal positional encoding (rows: position, columns: dim)")

# %% [markdown]
# ## Checks

# %%
check("the five steps, word by word, equal the matrix form", np.allclose(z_loop, z_matrix))
check("our boolean mask gives the seed's additive -1e9 mask's weights", np.allclose(our_weights, seed_weights))
check("blocked weights are exactly 0", bool(np.all(our_weights[~keep] == 0)))
if torch_gap is None:
    check.skip("MultiHeadAttention equals torch.nn.MultiheadAttention", TORCH)
else:
    check("MultiHeadAttention equals torch.nn.MultiheadAttention", torch_gap < 1e-5, f"{torch_gap:.1e}")
check("the curvature along d from backward twice equals the slope's central difference",
      abs(curvature - finite_curvature) < 1e-9, f"{curvature:.12f} vs {finite_curvature:.12f}")
if hessian_gap is not None:
    check("H d through attention equals PyTorch's double backward", hessian_gap < 1e-10, f"{hessian_gap:.1e}")
check("sinusoidal_table gives the seed's hand-computed values", pe_gap < 1e-12, f"{pe_gap:.1e}")
check("PE(2) follows from PE(1) by the double-angle identities", rotation_gap < 1e-12, f"{rotation_gap:.1e}")
check("PE(pos + k) is a fixed rotation of PE(pos)", shift_gap < 1e-12, f"{shift_gap:.1e}")
result(("" if torch_gap is None else f"PyTorch's `MultiheadAttention` within {torch_gap:.0e}; ")
       + f"the tutorial's hand-computed values {'exactly' if pe_gap == 0 else f'within {pe_gap:.0e}'}, and its "
       f"identities within {max(rotation_gap, shift_gap):.0e}")
check.finish()
