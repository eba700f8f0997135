# %% [markdown]
# # An encoder that hears a broken agreement (seed 003: a transformer encoder, piece by piece)
#
# Seed 003 builds an encoder from its parts: tokens, token and position embeddings, attention with
# query = key = value, scaled scores and their softmax, heads, a GELU feed-forward layer, and a pre-LN
# encoder layer. Here the same path runs on our API, ends in a classifier (`models.EncoderClassifier`:
# the encoder's states averaged over the real tokens, then one linear layer), and is given a task that
# needs the whole sentence: is this French sentence correct, or has one agreement been broken
# (an article, an adjective or a verb)? A bag-of-words model, which sees which words occur but not
# where, is the baseline.
#
#     python examples/lesson_003_encoder_classifier.py [--out lesson_003_out] [--quick]

# %%
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

import models  # installed from this checkout (pip install -e .): a notebook finds examples/ from any folder

sys.path.insert(0, str(Path(models.__file__).resolve().parents[1] / "examples"))
from lesson_kit import TORCH, Checks, heatmaps, options, result, update

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from models import EncoderClassifier
from models.masks import padding_mask
from models.text import grammar
from models.text.data import PAD_ID, Vocab, pad
from models.text.grammar_lm import GrammarLM
from tinygrad_tx import Tensor, optim, schedules
from tinygrad_tx.inspect import attention_maps

args = options("An encoder classifier tells correct French from broken agreement.", "lesson_003_out")
check = Checks()
tx.manual_seed(0)
start = time.perf_counter()

# %% [markdown]
# ## The task
# Each sentence of the grammar comes twice: as written (label 1), and with one agreement broken
# (label 0): an article of the wrong gender or number, an adjective in the wrong form, or the verb in
# the wrong number. The grammar's own recogniser confirms that every broken sentence is ungrammatical.

# %%
french = GrammarLM("fr")
ARTICLES = {True: {"le", "la", "les"}, False: {"un", "une", "des", "de"}}  # by definiteness


def break_agreement(sentence: grammar.Sentence, rng: random.Random) -> tuple[list[str], str]:
    """The sentence's French words with one agreement broken, and which: "article", "verb",
    "adjective gender" or "adjective number" (the wrong form is of the other number)."""
    words = sentence.french().split()
    phrases = [(0, sentence.subject), (len(sentence.subject.french()) + 1, sentence.obj)]  # (first word, phrase)
    with_adjective = [(at, p) for at, p in phrases if p.adjective is not None]
    kind = rng.choice(["article", "verb"] + (["adjective"] if with_adjective else []))
    if kind == "verb":
        verb, plural = sentence.verb, sentence.subject.plural
        words[phrases[1][0] - 1] = verb.fr_singular if plural else verb.fr_plural
    elif kind == "article":
        at, phrase = rng.choice(phrases)
        before = phrase.adjective is not None and phrase.adjective.before_noun
        wrong = ARTICLES[phrase.definite] - {words[at], "des" if before else "de"}  # des/de: placement, not agreement
        words[at] = rng.choice(sorted(wrong))
    else:
        at, phrase = rng.choice(with_adjective)
        form = phrase.adjective.fr(phrase.noun.gender, phrase.plural)
        position = at + phrase.french().index(form)
        words[position] = rng.choice(sorted(set(phrase.adjective.fr_forms) - {form}))
        same_number = phrase.adjective.fr_forms[2 * phrase.plural:2 * phrase.plural + 2]  # (masc, fem)
        kind = "adjective gender" if words[position] in same_number else "adjective number"
    return words, kind


def examples(n: int, seed: int) -> tuple[list[list[str]], np.ndarray, list[str]]:
    """n sentences, each correct and broken: words, labels (1 = correct), kinds ("correct" or the break)."""
    rng, words, labels, kinds = random.Random(seed), [], [], []
    for _ in range(n):
        sentence = grammar.random_sentence(rng)
        broken, kind = break_agreement(sentence, rng)
        words += [sentence.french().split(), broken]
        labels += [1, 0]
        kinds += ["correct", kind]
    return words, np.array(labels), kinds


n_train = 1500 if args.quick else 6000
train_words, train_labels, _ = examples(n_train, seed=1)
test_words, test_labels, test_kinds = examples(500 if args.quick else 1000, seed=2)
for w, label, kind in zip(test_words[:6], test_labels, test_kinds):
    print(f"{label} {kind:16s} {' '.join(w)}")
rejected = np.mean([not french.accepts(w) for w, label in zip(test_words, test_labels) if label == 0])
accepted = np.mean([french.accepts(w) for w, label in zip(test_words, test_labels) if label == 1])
print(f"the grammar rejects {rejected:.0%} of the broken sentences and accepts {accepted:.0%} of the correct ones")

# %% [markdown]
# ## Tokens
# Seed 003 cuts text with a pretrained subword tokenizer; here words are enough (every word of the
# grammar is seen in training), and the ids start with the special tokens, padding first (id 0).

# %%
vocab = Vocab.build(train_words)
ids = vocab.encode(test_words[1])
print(f"{len(vocab)} tokens; {test_words[1]} -> {ids} -> {[vocab.tokens[i] for i in ids]}")

# %% [markdown]
# ## Embeddings and positions
# Token vectors (scaled by sqrt(d_model)) plus the sinusoids of position: (batch, seq_len, d_model).
# Seed 003 learns its positions and normalises the sum; our pre-LN layers normalise at their entry.

# %%
config = dict(d_model=64, num_heads=4, num_layers=2, d_ff=128, dropout=0.0, norm_first=True,
              activation="gelu", max_len=16, pad_id=PAD_ID)
model = EncoderClassifier(len(vocab), 2, **config).eval()  # no dropout while we look inside
batch = pad([vocab.encode(w) for w in test_words[:2]])  # (2, T)
with tx.no_grad():
    x = model.encoder.embed(Tensor(batch))  # (B, T, D)
print(f"ids {batch.shape} -> embeddings {x.shape}")

# %% [markdown]
# ## Attention as seed 003 first writes it: query = key = value = the embeddings
# Scores are every query's dot product with every key, (B, T, T); dividing by sqrt(d_k) and a softmax
# over the last axis give weights whose rows sum to 1; the output mixes the values with them, (B, T, D).

# %%
with tx.no_grad():
    query = key = value = x  # (B, T, D)
    scores = query @ key.transpose(0, 2, 1)  # (B, T, T)
    weights = (scores / math.sqrt(x.shape[-1])).softmax(axis=-1)  # (B, T, T)
    out = weights @ value  # (B, T, D)
print(f"scores {scores.shape}, weights {weights.shape} (row sums {weights.numpy().sum(-1).min():.4f} .. "
      f"{weights.numpy().sum(-1).max():.4f}), output {out.shape}")

# %% [markdown]
# Seed 003's attention takes no mask, so the tokens of a short sentence also attend to the padding
# after it, and its output changes with the amount of padding in the batch. With a padding mask
# (True = may attend, `models.masks.padding_mask`) the output is the same however much padding follows.

# %%
short = np.array([vocab.encode(test_words[0])])  # (1, T)
padded = np.pad(short, ((0, 0), (0, 5)), constant_values=PAD_ID)  # (1, T + 5)
n_real = short.shape[1]


@tx.no_grad()
def attend(ids: np.ndarray, masked: bool) -> np.ndarray:
    """Self-attention (q = k = v = the embeddings) of the real tokens: (n_real, D)."""
    e = model.encoder.embed(Tensor(ids))  # (1, T', D)
    mask = padding_mask(Tensor(ids), PAD_ID)[:, 0] if masked else None  # (1, 1, T'): True = real key
    return F.scaled_dot_product_attention(e, e, e, mask=mask).numpy()[0, :n_real]


unmasked_change = np.abs(attend(short, False) - attend(padded, False)).max()
masked_change = np.abs(attend(short, True) - attend(padded, True)).max()
print(f"5 pads added: output of the real tokens changes by {unmasked_change:.3f} without a mask, "
      f"{masked_change:.1e} with one")

# %% [markdown]
# ## Heads, feed-forward, pre-LN: one encoder layer
# `MultiHeadAttention` projects the input to queries, keys and values, splits the width into heads of
# d_model / h, attends in each, joins them and projects back. The feed-forward layer works on each
# position alone (D -> d_ff -> D, GELU). Pre-LN: `x + attn(norm(x))`, then `x + ff(norm(x))`.
# PyTorch's `nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`, given the same weights, is
# the independent check. (PyTorch's key padding mask says True = *ignore*: the opposite convention.)

# %%
layer = model.encoder.layers[0]
attn = layer.self_attn
keep = padding_mask(Tensor(batch), PAD_ID)  # (B, 1, 1, T)
with tx.no_grad():
    B, T, D = x.shape
    q = attn.w_q(x).reshape(B, T, attn.num_heads, attn.d_head).transpose(0, 2, 1, 3)  # (B, h, T, d_head)
    print(f"x {x.shape} -> queries per head {q.shape} -> attention {attn(x, mask=keep).shape} "
          f"-> feed-forward {layer.ff(x).shape}")
    ours = layer(x, keep).numpy()  # (B, T, D)
try:
    import torch
    from torch_twins import encoder_layer_twin

    twin = encoder_layer_twin(layer, norm_first=True, activation="gelu")
    theirs = twin(torch.from_numpy(x.numpy().astype(np.float64)), src_key_padding_mask=torch.from_numpy(batch == PAD_ID))
    real = batch != PAD_ID  # compare real positions; padded ones are never read
    torch_gap = np.abs(ours[real] - theirs.detach().numpy()[real]).max()
    print(f"our pre-LN encoder layer vs torch.nn.TransformerEncoderLayer: max difference {torch_gap:.1e}")
except ImportError:
    torch_gap = None
    print("PyTorch is not installed: the layer is not compared with nn.TransformerEncoderLayer (the checks say so)")

# %% [markdown]
# ## Training the classifier
# Mean over the real tokens (padding excluded), a linear layer to two classes, cross-entropy. Each
# batch holds both versions of its sentences, so the only difference between its two classes is the
# broken agreement: the model cannot learn anything else that separates them.

# %%
train_ids = [vocab.encode(w) for w in train_words]
test_ids = [vocab.encode(w) for w in test_words]
steps, pairs_per_batch = (250, 32) if args.quick else (1200, 32)
optimizer = optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
schedule = schedules.WarmupCosine(optimizer, warmup=50, total_steps=steps)
order_rng, losses = np.random.default_rng(0), []
model.train()
for step in range(1, steps + 1):
    if (step - 1) % (n_train // pairs_per_batch) == 0:  # a new epoch: shuffle the sentences
        order = order_rng.permutation(n_train)
    first = (step - 1) % (n_train // pairs_per_batch) * pairs_per_batch
    rows = np.concatenate([2 * order[first:first + pairs_per_batch], 2 * order[first:first + pairs_per_batch] + 1])
    losses.append(update(F.cross_entropy(model(pad([train_ids[r] for r in rows])), train_labels[rows]),
                         optimizer, schedule))
    if step % max(1, steps // 6) == 0:
        print(f"step {step:5d}: loss {np.mean(losses[-50:]):.4f}")
model.eval()


def predict(id_lists: list[list[int]]) -> np.ndarray:
    with tx.no_grad():
        return np.concatenate([model(pad(id_lists[i:i + 500])).numpy().argmax(-1)
                               for i in range(0, len(id_lists), 500)])


accuracy = np.mean(predict(test_ids) == test_labels)
print(f"encoder: held-out accuracy {accuracy:.1%} ({time.perf_counter() - start:.0f} s so far)")

# %% [markdown]
# ## The baseline: a bag of words
# Logistic regression on word counts, trained on the same sentences. It knows which words occur, not
# where nor next to what, so it cannot see that an article and its noun disagree.

# %%
def counts(id_lists: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(id_lists), len(vocab)), dtype=np.float32)  # (N, V)
    for row, seq in enumerate(id_lists):
        np.add.at(out[row], seq, 1.0)
    return out


bow = tx.nn.Linear(len(vocab), 2)
bow_optimizer = optim.Adam(bow.parameters(), lr=0.05)
train_counts = Tensor(counts(train_ids))
for _ in range(300):
    loss = F.cross_entropy(bow(train_counts), train_labels)
    bow_optimizer.zero_grad()
    loss.backward()
    bow_optimizer.step()
with tx.no_grad():
    bow_accuracy = np.mean(bow(Tensor(counts(test_ids))).numpy().argmax(-1) == test_labels)
print(f"bag of words: held-out accuracy {bow_accuracy:.1%} (training {np.mean(bow(train_counts).numpy().argmax(-1) == train_labels):.1%})")

# %% [markdown]
# ## What it gets wrong
# Errors by kind of sentence: correct ones called broken, and each kind of break missed. An adjective
# in the wrong gender is the hardest: in "des souris lourds" nothing but the noun itself says that
# "souris" is feminine (a plural article shows no gender), so the model must know every noun's gender.

# %%
wrong = predict(test_ids) != test_labels
kinds = np.array(test_kinds)
for kind in ("correct", "article", "adjective gender", "adjective number", "verb"):
    print(f"  {kind:16s}: {wrong[kinds == kind].mean():6.1%} wrong of {np.sum(kinds == kind)}")
for i in np.flatnonzero(wrong)[:5]:
    print(f"  missed ({test_kinds[i]}): {' '.join(test_words[i])}")

# %% [markdown]
# ## Its attention on a broken sentence
# Every head of both layers on a sentence whose verb disagrees with its subject.

# %%
shown = next(i for i, k in enumerate(test_kinds) if k == "verb")
with attention_maps(model) as maps, tx.no_grad():
    verdict = model(np.array([test_ids[shown]])).softmax(axis=-1).numpy()[0, 1]
print(f"'{' '.join(test_words[shown])}': P(correct) = {verdict:.3f}")
names = [name for name in maps if name.endswith("self_attn")]
maps_of_heads = np.concatenate([maps[name][0].numpy()[0] for name in names])  # (layers * heads, T, T)
heatmaps(maps_of_heads, args.out / "classifier_attention.png",
         [f"layer {n.split('.')[2]} head {h}" for n in names for h in range(config["num_heads"])],
         test_words[shown], test_words[shown], "self-attention on a sentence with a broken verb agreement",
         vmin=0, vmax=1, per_row=4)

# %% [markdown]
# ## Checks

# %%
check("the grammar rejects every broken sentence and accepts every correct one", rejected == 1 and accepted == 1)
check("with a padding mask, padding does not change the real tokens' attention", masked_change < 1e-5)
if torch_gap is None:
    check.skip("our encoder layer equals torch.nn.TransformerEncoderLayer", TORCH)
else:
    check("our encoder layer equals torch.nn.TransformerEncoderLayer", torch_gap < 1e-4, f"{torch_gap:.1e}")
margin = 0.05 if args.quick else 0.2
check(f"the encoder beats the bag of words by {margin:.0%} or more", accuracy >= bow_accuracy + margin,
      f"{accuracy:.1%} vs {bow_accuracy:.1%}")
if not args.quick:
    check("held-out accuracy of 95% or more", accuracy >= 0.95, f"{accuracy:.1%}")
print(f"lesson time: {time.perf_counter() - start:.0f} s")
result(f"correct French vs one broken agreement: {accuracy:.1%} held-out, against {bow_accuracy:.1%} for "
       f"bag-of-words" + ("" if torch_gap is None else f"; its pre-LN GELU layer equals PyTorch's within {torch_gap:.0e}"))
check.finish()
