"""Choosing how a trained run decodes: beam width and length penalty, on its validation set.

Which beam width pays depends on the model and the data (on Tatoeba English-French greedy
search scores 3-4 BLEU under a beam of 4 or 6), and so does GNMT's length penalty, so `train`
tries a few on the validation sources after training, keeps the choice in run.json
(`decoding`), and `evaluate` and `translate` use it unless told otherwise. Validation sources,
never the test ones: the test score stays a fair estimate.

The search is a coordinate one: the usual decoding first (evaluation.py: beam 6, penalty 1),
then the other widths at that penalty, then other penalties at the chosen width. A validation
set is small (500 sources of a corpus), and most tries score within a BLEU of each other, which
is as much as another sample of 500 sentences would move them: so a try replaces the choice so
far only if it scores higher by more than chance would, by paired bootstrap resampling (Koehn
2004; sacrebleu's test for BLEU, the same test on exact matches), p < SIGNIFICANCE. Choosing the
best score alone picked beam 2 in three of four ten-minute runs of the Tatoeba list, ahead of
beam 6 by 0.2-0.6 BLEU on validation (p 0.09-0.28), and lost 0.8-1.4 BLEU to beam 6 on their test
splits (docs/results/translate-experiments.md: "The decoding's choice, and chance"). A perfect score ends the
search. Each try's seconds are kept with its score, so the choice can be bounded by a deadline
(a `train --time` run), and the curve of score against width is in run.json.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

import tinygrad_tx.distributed as dist

from .budget import Budget
from .evaluation import BEAM, LENGTH_PENALTY, bleu_tokenisation, reference_streams, score
from .run import Run, write_decoding
from .settings import TrainSettings
from .sharing import translate_shared
from ..text.tokenization import Tokenizer

WIDTHS = (BEAM, 1, 2, 4)
"""Beam widths tried, in this order (1: greedy search); on the Tatoeba list 8 scored as 6 did, at 1.3x
the cost."""
PENALTIES = (0.6, 1.5)
"""Length penalties tried at the chosen width, besides LENGTH_PENALTY (0.6, the usual one before; on
the validation splits of Tatoeba runs 1.3 scored about as 1 did, 1.6 lower and 2 much lower)."""
SIGNIFICANCE = 0.05
"""How unlikely by chance a try's lead over the choice so far must be for it to become the choice."""
RESAMPLES = 1000
"""Bootstrap samples of the validation sources a comparison draws (sacrebleu's default)."""


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
    """The beam width and length penalty chosen on `run`'s validation sources by `metric` ("bleu"
    or "exact_match"), with every try (its scores, seconds, and `p`: the chance of its lead, or of
    a lead as large, over the choice it was compared with): {"beam", "length_penalty", "metric",
    "tried"}.

    The usual decoding is tried first and stays chosen unless a later try scores higher than the
    choice so far with `chance` under SIGNIFICANCE; a perfect score ends the search. With a
    `deadline` (by `clock`), a try is started only if it, and then a report `report_share` times as
    long as a validation pass with the chosen beam, would end before it. In an mpiexec job every
    rank calls it: the ranks share each try's sentences, and rank 0 decides for all of them whether
    a try fits (by its clock) and whether it wins (each rank's alone could disagree)."""
    sources = run.held_out("valid")
    texts, references = [s for s, _ in sources], [refs for _, refs in sources]
    tried: list[dict] = []
    outputs: list[list[str]] = []  # each try's translations, in the order of `tried`
    chosen = 0  # the index of the choice so far

    def seconds(beam: int) -> float:
        """A guess from the tries so far: what a try of this width took, else the width times the
        most a width cost in the beam searches tried. Greedy search is left out of that: it costs
        more a width than a beam search (on Tatoeba 1.6 s against 8 s for beam 6), and counted in,
        its cost left out the length penalties' tries of ten-minute runs that had time for them."""
        same = [t["seconds"] for t in tried if t["beam"] == beam]
        if same:
            return max(same)
        beams = [t for t in tried if t["beam"] > 1] or tried
        return beam * max(t["seconds"] / t["beam"] for t in beams)

    def fits(beam: int) -> bool:
        widest = max(beam, tried[chosen]["beam"])
        return clock() + seconds(beam) + report_share * seconds(widest) <= deadline

    def attempt(beam: int, penalty: float) -> None:
        nonlocal chosen
        if deadline is not None and tried and not dist.broadcast(np.array([fits(beam)], dtype=np.int64))[0]:
            return
        begun = clock()
        translated = translate_shared(run, texts, beam, penalty)
        metrics = score(translated, references, run.tokenizers[1])
        tried.append({"beam": beam, "length_penalty": penalty, "bleu": round(metrics["bleu"], 2),
                      "chrf": round(metrics["chrf"], 2), "exact_match": round(metrics["exact_match"], 2),
                      "seconds": round(clock() - begun, 2)})
        outputs.append(translated)
        if len(tried) > 1:
            p = chance(translated, outputs[chosen], references, metric, run.tokenizers[1])
            tried[-1]["p"] = round(p, 3)
            better = tried[-1][metric] > tried[chosen][metric] and p < SIGNIFICANCE
            if dist.broadcast(np.array([better], dtype=np.int64))[0]:  # rank 0's word, should a rank's seed differ
                chosen = len(tried) - 1

    for beam in WIDTHS:
        if tried and tried[chosen][metric] >= 100:  # perfect already: nothing else can beat it
            break
        attempt(beam, LENGTH_PENALTY)
    if tried[chosen]["beam"] > 1 and tried[chosen][metric] < 100:  # greedy search has no length penalty
        for penalty in PENALTIES:
            attempt(tried[chosen]["beam"], penalty)
    best = tried[chosen]
    return {"beam": best["beam"], "length_penalty": best["length_penalty"], "metric": metric, "tried": tried}


def chance(outputs: Sequence[str], against: Sequence[str], references: Sequence[Sequence[str]], metric: str,
           tokenizer: Tokenizer) -> float:
    """The p-value of paired bootstrap resampling (Koehn 2004): how often RESAMPLES samples of the
    sources (drawn with replacement, the same for both) show a difference in `metric` between
    `outputs` and `against` as far from its mean as the one measured. BLEU's is sacrebleu's test
    (with `score`'s tokenisation); exact match's is that test on the sentences' 0/1 matches.

    A difference of zero has p = 1: whatever the resamples show, a difference at least as large as
    none is certain. The test's count (resamples whose difference exceeds the measured one, strictly)
    gave 1/1001 instead where the two tries' results were the same in every resample (the same
    exact matches from different outputs), calling identical results certainly different."""
    import sacrebleu
    from sacrebleu.significance import PairedTest

    if metric == "bleu":
        # seeded by $SACREBLEU_SEED, else 12345: the same choice every time
        _, scores = PairedTest([("against", list(against)), ("outputs", list(outputs))],
                               {"BLEU": sacrebleu.BLEU(tokenize=bleu_tokenisation(tokenizer))},
                               reference_streams(references), test_type="bs", n_samples=RESAMPLES)()
        first, second = scores["BLEU"]  # its table: each system's score, the second's p against the first
        return 1.0 if first.score == second.score else float(second.p_value)
    hits = np.array([[o in refs, a in refs] for o, a, refs in zip(outputs, against, references)],
                    dtype=float)  # (n, 2)
    measured = abs(hits[:, 0].mean() - hits[:, 1].mean())
    if measured == 0:
        return 1.0
    rows = np.random.default_rng(12345).integers(0, len(hits), size=(RESAMPLES, len(hits)))
    sampled = np.abs(hits[rows, 0].mean(axis=1) - hits[rows, 1].mean(axis=1))  # (RESAMPLES,)
    return (np.sum(sampled - sampled.mean() > measured) + 1) / (RESAMPLES + 1)  # as sacrebleu counts
