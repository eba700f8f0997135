"""Draw the pictures the docs show, from today's code: `python docs/pictures.py`.

- inspect_attention_graph.svg and inspect_attention_heatmap.png: the autograd
  walkthrough's "I play soccer" attention (examples/autograd_walkthrough.py), its graph
  after backward and the weights of both heads;
- inspect_transformer_layers.svg: one training step of a small Transformer drawn with
  one box per layer (`record_modules`, `render(..., collapse=2)`).

The graphs need Graphviz's `dot` (`apt-get install graphviz`). tests/docs/test_pictures.py
checks that the committed pictures still show what these graphs would draw today.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import autograd_walkthrough as walkthrough  # noqa: E402
import tinygrad_tx as tx  # noqa: E402
import tinygrad_tx.functional as F  # noqa: E402
from models import Transformer  # noqa: E402
from tinygrad_tx.inspect import record_modules, render, retain_grads  # noqa: E402

DOCS = Path(__file__).resolve().parent


def attention_graph() -> tuple[tx.Tensor, np.ndarray]:
    """The walkthrough's loss after backward (every tensor with its gradient) and its weights."""
    x, (w_q, w_k, w_v, w_o), target = walkthrough.inputs()
    out, weights = walkthrough.attention(x, w_q, w_k, w_v, w_o)
    loss = ((out - target) ** 2).mean()
    retain_grads(loss)
    loss.backward(retain_graph=True)
    return loss, weights.numpy()


def transformer_layers() -> tx.Tensor:
    """The loss of one step of a 2+2-layer Transformer, recorded with its module calls."""
    tx.manual_seed(0)
    model = Transformer(12, 12, d_model=32, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=64)
    src = np.array([[3, 4, 5, 6, 7]])  # (1, 5)
    tgt = np.array([[1, 8, 9, 10, 2]])  # (1, 5): BOS ... EOS
    with record_modules():
        return F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:])


def main() -> None:
    loss, weights = attention_graph()
    render(loss, DOCS / "inspect_attention_graph.svg")
    walkthrough.plot_attention(weights, DOCS / "inspect_attention_heatmap.png")
    render(transformer_layers(), DOCS / "inspect_transformer_layers.svg", collapse=2)
    for name in ("inspect_attention_graph", "inspect_transformer_layers"):
        (DOCS / f"{name}.dot").unlink()  # render's DOT source: the test draws it afresh
    print("wrote inspect_attention_graph.svg, inspect_attention_heatmap.png, inspect_transformer_layers.svg in", DOCS)


if __name__ == "__main__":
    main()
