"""Choosing how a trained run decodes: beam width and length penalty, on its validation set.

Which beam width pays depends on the model and the data (on Tatoeba English-French greedy
search scores 4 BLEU under a beam of 4, and beams past 4 add nothing), and so does GNMT's
length penalty, so `train` tries a few on the validation sources after training, keeps the
best in run.json (`decoding`), and `evaluate` and `translate` use it unless told otherwise.
Validation sources, never the test ones: the test score stays a fair estimate.

The search is a coordinate one: the usual decoding first (beam 4, penalty 0.6), then the
other widths at that penalty, then other penalties at the best width. Only a better score
moves the choice away from the usual decoding, and among equals the narrower beam wins: a
task that beam 4 gets perfectly right on validation keeps beam 4 (greedy search, also
perfect on the validation pairs of `sort`, missed one of its 500 test pairs that beam 4
got right). A perfect score ends the search. Each try's seconds are kept with its score,
so the choice can be bounded by a deadline (a `train --time` run), and the curve of score
against width is in run.json.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

import tinygrad_tx.distributed as dist

from .budget import Budget
from .evaluation import BEAM, LENGTH_PENALTY, score
from .run import Run, write_decoding
from .settings import TrainSettings
from .sharing import translate_shared

WIDTHS = (BEAM, 1, 2, 6)
"""Beam widths tried, in this order (1: greedy search); on the Tatoeba list 8 scored as 6 did, at 1.3x
the cost."""
PENALTIES = (0.0, 1.0)
"""Length penalties tried at the best width, besides LENGTH_PENALTY."""


def keep_decoding(run: Run, settings: TrainSettings, budget: Budget | None,
                  clock: Callable[[], float] = time.perf_counter) -> dict:
    """Choose the decoding of the trained `run` (by BLEU for a corpus, exact match for a task;
    within a --time `budget`, leaving time for the test report) and keep it in its run.json.
    Every rank of an mpiexec job calls it and translates its share (sharing.py); rank 0 writes."""
    chosen = choose_decoding(run, "bleu" if settings.data else "exact_match",
                             budget.deadline if budget else None,
                             len(run.held_out("test")) / len(run.held_out("valid")), clock)
    if dist.rank() == 0:
        write_decoding(run.directory, chosen)
    return chosen


def choose_decoding(run: Run, metric: str, deadline: float | None = None, report_share: float = 0.0,
                    clock: Callable[[], float] = time.perf_counter) -> dict:
    """The beam width and length penalty that score best on `run`'s validation sources by `metric`
    ("bleu" or "exact_match"), with every try (its scores and seconds): {"beam", "length_penalty",
    "metric", "tried"}.

    A tie goes to the usual decoding, then to the narrower beam; a perfect score ends the
    search. With a `deadline` (by `clock`), a try is started only if it, and then a report
    `report_share` times as long as a validation pass with the chosen beam, would end before it.
    In an mpiexec job every rank calls it: the ranks share each try's sentences, and rank 0's
    clock decides for all of them whether a try fits (each rank's alone could disagree)."""
    sources = run.held_out("valid")
    texts, references = [s for s, _ in sources], [refs for _, refs in sources]
    tried: list[dict] = []

    def seconds(beam: int) -> float:
        """A guess from the tries so far: a beam search costs about its width times the most a
        width cost so far (greedy search costs less than that: it has no beams to sort)."""
        return beam * max(t["seconds"] / t["beam"] for t in tried)

    def fits(beam: int) -> bool:
        widest = max(beam, _best(tried, metric)["beam"])
        return clock() + seconds(beam) + report_share * seconds(widest) <= deadline

    def attempt(beam: int, penalty: float) -> None:
        if deadline is not None and tried and not dist.broadcast(np.array([fits(beam)], dtype=np.int64))[0]:
            return
        begun = clock()
        outputs = translate_shared(run, texts, beam, penalty)
        metrics = score(outputs, references, run.tokenizers[1])
        tried.append({"beam": beam, "length_penalty": penalty, "bleu": round(metrics["bleu"], 2),
                      "chrf": round(metrics["chrf"], 2), "exact_match": round(metrics["exact_match"], 2),
                      "seconds": round(clock() - begun, 2)})

    for beam in WIDTHS:
        if tried and _best(tried, metric)[metric] >= 100:  # perfect already: nothing else can beat it
            break
        attempt(beam, LENGTH_PENALTY)
    best = _best(tried, metric)
    if best["beam"] > 1 and best[metric] < 100:  # greedy search has no length penalty
        for penalty in PENALTIES:
            attempt(best["beam"], penalty)
    best = _best(tried, metric)
    return {"beam": best["beam"], "length_penalty": best["length_penalty"], "metric": metric, "tried": tried}


def _best(tried: Sequence[dict], metric: str) -> dict:
    """The best-scoring try; among equals the usual decoding (the first try), then the narrowest beam."""
    return max(tried, key=lambda t: (t[metric], t is tried[0], -t["beam"]))
