"""Autograd step by step, on the attention example of the classic tutorials.

"I play soccer": 3 tokens, d_model 4, 2 heads. One multi-head self-attention is
built op by op from named weights; then we look at its graph, watch backward
visit it node by node, check every gradient against finite differences, catch
a NaN at its source, and draw the graph and the attention weights:

    python examples/autograd_walkthrough.py [--out walkthrough_out]
    python examples/autograd_walkthrough.py --explore    # the same, clickable, in the browser

Everything is float64, so that the finite-difference check is exact to many digits.
"""
from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import tinygrad_tx as tx  # noqa: E402
from models import sinusoidal_table  # noqa: E402
from tinygrad_tx import Tensor  # noqa: E402
from tinygrad_tx.inspect import (AnomalyError, detect_anomaly, graph_text, profile, render,  # noqa: E402
                                 retain_grads, tensors_in_graph, trace_backward)

TOKENS = ["I", "play", "soccer"]
EMBEDDINGS = [[0.23, 0.38, 0.98, 0.11],  # the tutorial's word vectors (d_model = 4)
              [0.99, 0.14, 0.34, 0.28],
              [0.73, 0.03, 0.92, 0.91]]
HEADS = 2


def say(step: int, text: str) -> None:
    print(f"\n[{step}] {text}")


def attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, causal: bool = False):
    """Multi-head self-attention written out op by op (not the fused F.scaled_dot_product_attention),
    so that every step of the formula is a node of the graph. Returns (output (T, D), weights (h, T, T))."""
    T, D = x.shape
    d_head = D // HEADS

    def heads(t: Tensor) -> Tensor:
        return t.reshape(T, HEADS, d_head).transpose(1, 0, 2)  # (h, T, d_head)

    q, k, v = heads(x @ w_q), heads(x @ w_k), heads(x @ w_v)
    scores = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(d_head))  # (h, T, T)
    if causal:
        scores = scores.masked_fill(~np.tri(T, dtype=bool), np.finfo(np.float64).min)  # fill the future
    weights = scores.softmax(axis=-1)  # (h, T, T): row i says how much token i looks at each token
    z = (weights @ v).transpose(1, 0, 2).reshape(T, D)  # the heads side by side again
    return z @ w_o, weights


def loss_of(x, w_q, w_k, w_v, w_o, target):
    out, _ = attention(x, w_q, w_k, w_v, w_o)
    return ((out - target) ** 2).mean()


def inputs() -> tuple[Tensor, list[Tensor], Tensor]:
    """X = word vectors + sinusoidal positions, four named 4×4 weights, and a target to fit."""
    rng = np.random.default_rng(0)
    x = Tensor(np.array(EMBEDDINGS) + sinusoidal_table(3, 4), requires_grad=True, name="X")
    weights = [Tensor(rng.normal(0, 0.5, (4, 4)), requires_grad=True, name=name)
               for name in ("W_q", "W_k", "W_v", "W_o")]
    return x, weights, Tensor(rng.normal(0, 1, (3, 4)), name="target")


def first_anomaly(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor) -> str:
    """What detect_anomaly says about log(attention weights) under a causal mask."""
    try:
        with detect_anomaly(), np.errstate(divide="ignore"):
            _, weights = attention(x, w_q, w_k, w_v, w_o, causal=True)
            weights.log()  # the mask made the weights of future tokens exactly 0
    except AnomalyError as e:
        return str(e)
    return "no NaN or Inf found"


def plot_attention(weights: np.ndarray, path: Path) -> bool:
    """One heatmap per head, tokens on both axes; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(weights), figsize=(3.2 * len(weights), 3))
    for h, ax in enumerate(axes):
        ax.imshow(weights[h], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(3), TOKENS)
        ax.set_yticks(range(3), TOKENS)
        ax.set_title(f"head {h + 1}")
        ax.set_xlabel("looks at (key)")
        for i in range(3):
            for j in range(3):
                ax.text(j, i, f"{weights[h, i, j]:.2f}", ha="center", va="center", color="w", fontsize=9)
    axes[0].set_ylabel("token (query)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="walkthrough_out", help="folder for graph.svg and attention.png")
    parser.add_argument("--explore", action="store_true",
                        help="instead, serve all of it as one page in the browser (tx.inspect.explore)")
    args = parser.parse_args()
    if args.explore:
        x, weights, target = inputs()
        tx.inspect.explore(loss_of, x, *weights, target)
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    x, (w_q, w_k, w_v, w_o), target = inputs()
    say(1, "Inputs: 'I play soccer' as 3 word vectors + positions (X, 3×4) and four 4×4 weights, all leaves.")

    out, weights = attention(x, w_q, w_k, w_v, w_o)
    loss = ((out - target) ** 2).mean()
    n_ops = sum(t.grad_fn is not None for t in tensors_in_graph(loss))
    say(2, f"Forward: each op ran and recorded one node ({n_ops} in all) pointing at its inputs. The graph:")
    print(graph_text(loss))

    retain_grads(loss)
    with trace_backward() as trace:
        loss.backward(retain_graph=True)
    say(3, "Backward: each node runs once its output's gradient is complete, and sends one gradient per input:")
    print(trace)

    say(4, "The same graph after backward: every tensor now shows the norm of d loss / d tensor.")
    print(graph_text(loss))

    agree = all(np.allclose(trace.grad_of(p).numpy(), p.grad.numpy()) for p in (x, w_q, w_k, w_v, w_o))
    say(5, f"What the trace recorded adds up to each leaf's .grad: {agree}.")

    tx.gradcheck(loss_of, [x, w_q, w_k, w_v, w_o, target])
    say(6, "gradcheck: every gradient matches central finite differences (float64, random upstream gradient).")

    with warnings.catch_warnings(record=True) as caught:  # no Graphviz: said once, in [7], not as a warning too
        warnings.simplefilter("always")
        picture = render(loss, out_dir / "graph.svg")
    say(7, f"Graph picture written to {picture}." if picture.suffix == ".svg" else
        "; ".join(str(w.message) for w in caught) or f"Graph written as DOT text to {picture}.")

    say(8, "detect_anomaly: under a causal mask some weights are exactly 0 and their log is -inf; "
           "it names the op and the line that made it:")
    print(first_anomaly(x, w_q, w_k, w_v, w_o))

    with profile() as prof:
        loss_of(x, w_q, w_k, w_v, w_o, target).backward()
    say(9, "profile: calls, time and memory kept for backward, per op:")
    print(prof.table())

    heatmap = out_dir / "attention.png"
    if plot_attention(weights.numpy(), heatmap):
        say(10, f"Attention weights of both heads drawn to {heatmap}.")
    else:
        say(10, 'matplotlib is not installed, so no heatmap: pip install "tinygrad-tx[viz]"')


if __name__ == "__main__":
    main()
