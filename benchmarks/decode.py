"""Decoding speed: greedy search with and without the key/value cache, and beam search with its
candidates kept by a partition or by a full sort (tokens generated per second).

Without a cache, step t runs the decoder over all t positions again; with one,
only the new position is computed and earlier keys and values are reused. A beam search
keeps the best 2K of its K·V candidates a source at each step: `top_k` finds them by a
partition where a stable sort of all K·V would do the same. Each pair's outputs must be
identical, which this script checks before it reports.

    python benchmarks/decode.py [--batch 32] [--length 48] [--device cpu|cuda] [--write-docs]
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import tinygrad_tx as tx
import models.decoding
from models import Transformer, beam_search, greedy_decode
from report import written_to_docs

BOS, EOS, PAD = 1, 2, 0


@tx.no_grad()
def greedy_without_cache(model: Transformer, src: np.ndarray, max_len: int) -> np.ndarray:
    """Greedy search that re-decodes the whole prefix at every step (the slow reference)."""
    memory = model.encode(src)
    tokens = np.full((src.shape[0], 1), BOS)
    for _ in range(max_len):
        logits = model.decode(tokens, memory, src).numpy()[:, -1]  # (B, V)
        logits[:, PAD] = -np.inf
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    return tokens[:, 1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # its first paragraph, whole
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=48, help="source length and tokens generated")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    tx.manual_seed(0)
    model = Transformer(1000, 1000, d_model=256, num_heads=8, num_encoder_layers=3, num_decoder_layers=3,
                        d_ff=1024, max_len=2 * args.length + 2).to(args.device).eval()
    src = np.random.default_rng(0).integers(3, 1000, (args.batch, args.length))
    # An untrained model rarely says EOS, so both runs generate the full length: a fair count.
    eos = -1
    timings = {}
    for name, run in [("no cache", lambda: greedy_without_cache(model, src, args.length)),
                      ("kv cache", lambda: greedy_decode(model, src, args.length, BOS, eos))]:
        run()  # warm-up
        start = time.perf_counter()
        out = run()
        timings[name] = (time.perf_counter() - start, out)
    (slow, reference), (fast, cached) = timings["no cache"], timings["kv cache"]
    same = np.array_equal(reference[:, :cached.shape[1]], cached)
    tokens = args.batch * args.length
    print(f"greedy decoding, batch {args.batch}, {args.length} tokens each, d_model 256, 3+3 layers:")
    print(f"  without cache {tokens / slow:8.0f} tokens/s")
    print(f"  with kv cache {tokens / fast:8.0f} tokens/s   ({slow / fast:.1f}x faster; identical output: {same})")
    beam_speed(args)


def full_sort(xp: Any, scores: Any, k: int) -> Any:
    """What `top_k` stands for: the head of a stable sort of every candidate."""
    return xp.argsort(-scores, axis=-1, kind="stable")[:, :k]


def beam_speed(args: argparse.Namespace, beam: int = 6, vocab: int = 2300) -> None:
    """Beam search on a model of the size `train --data` gives the 18k-pair Tatoeba list (2+2 layers
    128 wide, 2,300 target pieces), its candidates kept by `top_k` and by a full sort."""
    tx.manual_seed(0)
    model = Transformer(vocab, vocab, d_model=128, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                        d_ff=512, max_len=2 * args.length + 2).to(args.device).eval()
    src = np.random.default_rng(0).integers(3, vocab, (args.batch, args.length))
    timings, partition = {}, models.decoding.top_k
    try:
        for name, keep in [("full sort", full_sort), ("partition", partition)]:
            models.decoding.top_k = keep  # what beam_search calls
            beam_search(model, src, args.length, BOS, -1, beam_size=beam)  # warm-up
            start = time.perf_counter()
            out = beam_search(model, src, args.length, BOS, -1, beam_size=beam)
            timings[name] = (time.perf_counter() - start, out)
    finally:
        models.decoding.top_k = partition
    (slow, reference), (fast, kept) = timings["full sort"], timings["partition"]
    tokens = args.batch * args.length
    print(f"beam search, width {beam}, batch {args.batch}, {args.length} tokens each, d_model 128, 2+2 layers, "
          f"{vocab} target pieces:")
    print(f"  candidates by a full sort {tokens / slow:8.0f} tokens/s")
    print(f"  candidates by a partition {tokens / fast:8.0f} tokens/s   ({slow / fast:.1f}x faster; "
          f"identical output: {np.array_equal(reference, kept)})")


if __name__ == "__main__":
    with written_to_docs("decode"):
        main()
