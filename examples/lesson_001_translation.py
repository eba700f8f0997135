# %% [markdown]
# # Translation with a transformer (seed 001: the TensorFlow translation tutorial)
#
# Seed 001 cuts text into subword tokens ("serendipity" -> s ##ere ##nd ##ip ##ity), looks at how many
# tokens sentences have, adds sinusoidal positions, and builds the transformer from three attentions:
# global self-attention in the encoder, causal self-attention and cross-attention in the decoder. Then
# it trains the model to translate. Here the command line trains a model on the toy grammar
# (English -> French), and the lesson opens it: the three attentions with their shapes, and a greedy
# translation written out step by step, which must be the command line's own translation and the
# grammar's French.
#
#     python examples/lesson_001_translation.py [--out lesson_001_out] [--quick]

# %%
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import models  # installed from this checkout (pip install -e .): a notebook finds examples/ from any folder

sys.path.insert(0, str(Path(models.__file__).resolve().parents[1] / "examples"))
from lesson_kit import ROOT, Checks, heatmaps, options, pyplot, result, show

import tinygrad_tx as tx
from models import sinusoidal_table
from models.text import grammar
from models.text.data import BOS_ID, EOS_ID
from models.translate.run import open_run
from models.text.tokenization import Tokenizer
from tinygrad_tx.inspect import attention_maps

args = options("Seed 001's translation transformer: trained by the CLI, opened step by step.", "lesson_001_out")
check = Checks()
start = time.perf_counter()

# %% [markdown]
# ## Subword tokens
# A subword tokenizer learns frequent pieces from a corpus, so a rare word is spelled with known
# pieces instead of becoming `<unk>`. We train sentencepiece's BPE (as `--tokenizer bpe` does) on the
# English at hand, this project's README and source (about 100,000 words), and cut the seed's sentences
# with it. (`▁` marks a piece that starts a word; seed 001's WordPiece marks the others with `##`.)

# %%
files = [ROOT / "README.md", *sorted((ROOT / "tinygrad_tx").rglob("*.py")), *sorted((ROOT / "models").rglob("*.py"))]
corpus = [line for f in files for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
pieces = Tokenizer.train("bpe", corpus, vocab_size=4000)
seed_sentences = ["and when you improve searchability, you actually take away the one advantage of print, "
                  "which is serendipity.", "but what if it were active?", "but they didn't test for curiosity."]
for sentence in seed_sentences:
    print(pieces.encode(sentence))
round_trip = all(pieces.decode(pieces.encode(s)) == s for s in seed_sentences)
print(f"decode(encode(text)) == text for every sentence: {round_trip}")

# %% [markdown]
# ## Tokens per sentence, and positions
# The seed draws a histogram of sentence lengths to choose the longest it will train on. The grammar's
# sentences are short (word tokens). Positions are the paper's sinusoids (interleaved sin/cos; see
# lesson_000 for the seed's concatenated variant), one row per position.

# %%
rng = random.Random(0)
lengths = [[len(side.split()) for side in grammar.sample_pair(rng)] for _ in range(5000)]
plt = pyplot()
if plt is not None:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.hist(np.array(lengths), bins=np.arange(2.5, 13.5), label=["English", "French"])
    ax.set(xlabel="word tokens per sentence", ylabel="sentences", title="grammar pairs")
    ax.legend()
    show(fig, args.out / "lengths.png")
heatmaps(sinusoidal_table(32, 96)[None], args.out / "positions.png", ["PE(pos, dim), d_model 96"],
         cmap="RdBu", vmin=-1, vmax=1, suptitle="the positional encoding (rows: position, columns: dimension)")

# %% [markdown]
# ## Training, with the command line
# `python -m models train --task grammar` trains the encoder-decoder of "Attention Is All You Need"
# (2 layers each, d_model 96, 4 heads) on generated English -> French pairs, with label smoothing, the
# warm-up schedule, and `tx.jit`. It writes a run directory: settings, vocabularies, checkpoints, the
# held-out pairs. (A full run, `python -m models train --task grammar`, takes about 4000 steps.)

# %%
run_dir = args.out.resolve() / "grammar_run"  # absolute: the command line runs in the checkout
steps = 150 if args.quick else 1500
trained_before = (run_dir / "best.npz").exists() and json.loads(
    (run_dir / "run.json").read_text())["settings"]["steps"] == steps  # a second run of the lesson reuses it
if not trained_before:
    command = [sys.executable, "-m", "models", "train", "--task", "grammar", "--steps", str(steps),
               "--eval-every", str(steps), "--out", str(run_dir)]
    if run_dir.exists():
        shutil.rmtree(run_dir)
    trained = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(trained.stdout[-1500:])
    if trained.returncode:
        sys.exit(f"training failed:\n{trained.stderr[-3000:]}")
run = open_run(run_dir)
model, src_vocab, tgt_vocab = run.model, run.src_vocab, run.tgt_vocab
print(f"{sum(p.data.size for p in model.parameters()):,} parameters; vocabularies {len(src_vocab)} and {len(tgt_vocab)}")

# %% [markdown]
# ## The three attentions
# One held-out pair, teacher-forced (the decoder reads `<bos>` + the reference): the encoder's global
# self-attention (every source word sees every other), the decoder's causal self-attention (each
# target position sees itself and earlier ones: the upper triangle is 0) and cross-attention (each
# target position looks over the source). Shapes are (batch, heads, queries, keys).

# %%
source, references = run.held_out("test")[0]
src = np.array([src_vocab.encode(source.split())])  # (1, S)
tgt_in = np.array([[BOS_ID] + tgt_vocab.encode(references[0].split())])  # (1, T)
with tx.no_grad(), attention_maps(model) as maps:
    model(src, tgt_in)
last = len(model.decoder.layers) - 1
kinds = {"global self-attention": maps["encoder.layers.0.self_attn"][0].numpy(),
         "causal self-attention": maps[f"decoder.layers.{last}.self_attn"][0].numpy(),
         "cross-attention": maps[f"decoder.layers.{last}.cross_attn"][0].numpy()}
for name, weights in kinds.items():
    print(f"{name:22s} {weights.shape}")
future = np.triu(np.ones(kinds["causal self-attention"].shape[-2:], dtype=bool), k=1)
future_weight = kinds["causal self-attention"][..., future].max()
print(f"largest weight on a later position in causal self-attention: {future_weight}")
tgt_words = ["<bos>"] + references[0].split()
heatmaps(kinds["cross-attention"][0], args.out / "cross_attention.png",
         [f"head {h}" for h in range(kinds["cross-attention"].shape[1])], tgt_words, source.split(),
         f"cross-attention, last decoder layer: rows (French, fed in) look at columns (English)", vmin=0, vmax=1)

# %% [markdown]
# ## Translating, one token at a time
# Encode the source once. Then feed `<bos>`, take the most likely next token, append it, and repeat
# until `<eos>`. (The library's `greedy_decode` does the same with a key/value cache.)

# %%
def translate_step_by_step(sentence: str) -> str:
    src = np.array([src_vocab.encode(sentence.split())])  # (1, S)
    with tx.no_grad():
        memory = model.encode(src)  # (1, S, D): computed once
        out = [BOS_ID]
        for _ in range(2 * src.shape[1] + 10):
            logits = model.decode(np.array([out]), memory, src)  # (1, len(out), V)
            out.append(int(logits.numpy()[0, -1].argmax()))
            if out[-1] == EOS_ID:
                break
    return " ".join(tgt_vocab.decode(out))


held_out = run.held_out("test")[:10 if args.quick else 100]
ours = [translate_step_by_step(s) for s, _ in held_out]
for (s, refs), o in list(zip(held_out, ours))[:4]:
    print(f"{'ok ' if o in refs else 'BAD'} {s} -> {o}")
cli = subprocess.run([sys.executable, "-m", "models", "translate", "--run", str(run_dir), "--beam", "1"],
                     input="\n".join(s for s, _ in held_out), cwd=ROOT, capture_output=True, text=True)
cli_outputs = cli.stdout.splitlines()
same_as_cli = np.mean([a == b for a, b in zip(ours, cli_outputs)]) if len(cli_outputs) == len(ours) else 0.0
truth = np.mean([o in refs for o, (_, refs) in zip(ours, held_out)])
print(f"step-by-step greedy equals `python -m models translate --beam 1` on {same_as_cli:.0%} of "
      f"{len(ours)} sentences; {truth:.0%} are the grammar's French ({time.perf_counter() - start:.0f} s)")

# %% [markdown]
# ## Checks

# %%
check("subword tokens decode to the exact text", round_trip)
check("causal self-attention gives no weight to later positions", future_weight == 0)
check("the step-by-step translation is the command line's", same_as_cli == 1, f"{same_as_cli:.0%}")
if args.quick:
    outputs_tokens = [len(o.split()) for o in ours]
    check("a short run already writes sentences of the right length", np.mean(
        [abs(n - len(refs[0].split())) <= 1 for n, (_, refs) in zip(outputs_tokens, held_out)]) >= 0.5)
else:
    check("90% or more of the translations are the grammar's French", truth >= 0.9, f"{truth:.0%}")
result(f"{truth:.0%} of {len(ours)} held-out sentences are the grammar's French; the lesson's own greedy decoding "
       f"equals `translate --beam 1` on {round(same_as_cli * len(ours))} of {len(ours)}")
check.finish()
