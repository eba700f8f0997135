"""What beam search weighed at each step, kept as a tree: `beam_search(..., record=BeamTree())`.

At every step the search ranks the continuations of its live prefixes and looks at
the best 2K of them (K = beam size): the best K that do not end stay live, those
among the best K that end with EOS are finished hypotheses, and the rest are pruned.
A tree node is one such candidate: its parent is the live prefix it continues, its
score the prefix's log-probability (a finished one also gets its length-penalised
score, the number the search compares finished hypotheses by). The record only copies
arrays the search computed anyway, so the tree shows the search's own numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class _Step:
    beam: np.ndarray  # (B, 2K): which live prefix of the previous step each candidate continues
    token: np.ndarray  # (B, 2K): the token it adds
    score: np.ndarray  # (B, 2K): log-probability of the grown prefix
    live: np.ndarray  # (B, K): the candidates kept live, best first
    finished: np.ndarray  # (B, 2K): the candidates that are finished hypotheses
    penalty: float  # gnmt_penalty of this length: a finished hypothesis scores score / penalty


class BeamTree:
    """Every candidate of every beam-search step; `nodes(row)` gives one source's tree."""

    def __init__(self):
        self.steps: list[_Step] = []

    def step(self, beam: np.ndarray, token: np.ndarray, score: np.ndarray, live: np.ndarray,
             finished: np.ndarray, penalty: float) -> None:
        """Called by `beam_search` once per step, with its host arrays (copied: it reuses them)."""
        self.steps.append(_Step(beam.copy(), token.copy(), score.copy(), live.copy(), finished.copy(), penalty))

    def nodes(self, row: int = 0) -> list[dict]:
        """Source `row`'s candidates, step by step: `id` ("2.3": step 2, candidate 3 in rank
        order), `parent` ("root" at step 1), `token` (an id), `score`, `state` ("live",
        "finished" or "pruned") and, when finished, `final` (the length-penalised score)."""
        nodes = []
        for t, s in enumerate(self.steps, 1):
            live = list(s.live[row])
            previous = self.steps[t - 2].live[row] if t > 1 else None
            for j in range(s.token.shape[1]):
                score = float(s.score[row, j])
                if not np.isfinite(score):  # a beam that does not exist yet (step 1 has one prefix)
                    continue
                node = {"id": f"{t}.{j}", "step": t, "token": int(s.token[row, j]), "score": score,
                        "parent": "root" if t == 1 else f"{t - 1}.{int(previous[s.beam[row, j]])}",
                        "state": "live" if j in live else "finished" if s.finished[row, j] else "pruned"}
                if node["state"] == "finished":
                    node["final"] = score / s.penalty
                nodes.append(node)
        return nodes

    def path(self, ids: list[int], row: int = 0) -> list[str]:
        """The node ids that spell `ids` (the search's output, up to its EOS) from the root."""
        by_parent = {(n["parent"], n["token"]): n for n in self.nodes(row) if n["state"] != "pruned"}
        path, parent = [], "root"
        for token in ids:
            node = by_parent.get((parent, int(token)))
            if node is None:
                break
            path.append(node["id"])
            parent = node["id"]
        return path
