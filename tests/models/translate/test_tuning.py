"""Choosing a run's decoding on its validation set: which tries are made, in what order, which
wins, and which a deadline leaves out. Translation and scoring are replaced by a table of
made-up scores, the chance of a difference by a rule (a lead of 2 or more is significant), and
time by a clock that each try advances by its beam width in seconds, so every choice here is
worked out by hand (test_corpus_cli.py checks the real thing). The chance itself, the bootstrap
test, is checked on outputs whose significance is known."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from models.text.tokenization import Tokenizer
from models.translate import tuning
from models.translate.evaluation import score


@pytest.fixture
def fake(monkeypatch):
    clock = SimpleNamespace(now=0.0)

    def choose(scores: dict, metric="bleu", deadline=None, report_share=0.0, cost=lambda beam: beam):
        clock.now = 0.0
        def translate_shared(run, texts, beam, length_penalty):
            clock.now += cost(beam)  # a try takes its width in seconds, unless told otherwise
            return [(beam, length_penalty)] * len(texts)

        def score(outputs, references, tokenizer):
            value = scores[outputs[0]]
            return {"bleu": value, "chrf": value, "exact_match": value}

        def chance(outputs, against, references, metric, tokenizer):
            return 0.01 if abs(scores[outputs[0]] - scores[against[0]]) >= 2 else 0.5

        monkeypatch.setattr(tuning, "translate_shared", translate_shared)
        monkeypatch.setattr(tuning, "score", score)
        monkeypatch.setattr(tuning, "chance", chance)
        run = SimpleNamespace(held_out=lambda split: [("a source", ["a reference"])], model=None, src_vocab=None,
                              tgt_vocab=None, tokenizers=(None, None))
        chosen = tuning.choose_decoding(run, metric, deadline, report_share, clock=lambda: clock.now)
        return (chosen["beam"], chosen["length_penalty"]), [(t["beam"], t["length_penalty"]) for t in chosen["tried"]]

    return choose


ALL_EQUAL = {(6, 1.0): 50, (1, 1.0): 50, (2, 1.0): 50, (4, 1.0): 50, (6, 0.6): 50, (6, 1.5): 50}


def test_the_usual_decoding_first_and_kept_unless_beaten(fake):
    chosen, tried = fake(ALL_EQUAL)
    assert tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0), (6, 0.6), (6, 1.5)]
    assert chosen == (6, 1.0)


def test_only_a_significant_lead_over_the_choice_so_far_wins(fake):
    """Greedy's lead of 1 is chance: beam 6 stays; beam 2 leads by 3: chosen; beam 4 leads beam 2 by
    1 (and beam 6 by 4): compared with the choice so far, beam 2, it is chance; so are the penalties."""
    scores = {(6, 1.0): 50, (1, 1.0): 51, (2, 1.0): 53, (4, 1.0): 54, (2, 0.6): 54, (2, 1.5): 52}
    chosen, tried = fake(scores)
    assert tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0), (2, 0.6), (2, 1.5)] and chosen == (2, 1.0)


def test_a_significant_lead_of_greedy_search_ends_the_search(fake):
    chosen, tried = fake({(6, 1.0): 50, (1, 1.0): 53, (2, 1.0): 51, (4, 1.0): 49})
    assert chosen == (1, 1.0) and tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0)]  # greedy: no penalties


def test_penalties_are_tried_at_the_chosen_width(fake):
    scores = {(6, 1.0): 50, (1, 1.0): 40, (2, 1.0): 45, (4, 1.0): 51, (6, 0.6): 53, (6, 1.5): 51}
    chosen, tried = fake(scores)
    assert tried[-2:] == [(6, 0.6), (6, 1.5)] and chosen == (6, 0.6)


def test_a_perfect_score_ends_the_search(fake):
    """A task that beam 6 gets right on every validation pair keeps beam 6 and costs one try."""
    assert fake({(6, 1.0): 100}, metric="exact_match") == ((6, 1.0), [(6, 1.0)])
    assert fake({(6, 1.0): 90, (1, 1.0): 100}, metric="exact_match") == ((1, 1.0), [(6, 1.0), (1, 1.0)])


def test_a_deadline_leaves_out_the_tries_that_would_end_after_it(fake):
    """Widths cost their width in seconds; deadline 14. Beam 6 ends at 6; greedy (guessed 1 s)
    at 7; beam 2 (2 s) at 9, and wins; beam 4 would end at 13: in; at the chosen width, 2,
    penalty 0.6 would end at 15: left out, and so is penalty 1.5 (17)."""
    scores = {(6, 1.0): 50, (1, 1.0): 40, (2, 1.0): 55, (4, 1.0): 56, (2, 0.6): 60, (2, 1.5): 60}
    chosen, tried = fake(scores, deadline=14)
    assert tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0)] and chosen == (2, 1.0)


def test_a_deadline_keeps_time_for_the_report(fake):
    """With a report as long as a validation pass at the chosen width (6 s): greedy ends at 7
    and leaves 7 for it; beam 2 would end at 9 with 6 s still to report: past 14, left out, and
    so is the rest."""
    chosen, tried = fake(ALL_EQUAL, deadline=14, report_share=1.0)
    assert tried == [(6, 1.0), (1, 1.0)] and chosen == (6, 1.0)


def test_a_deadline_guesses_a_width_tried_by_its_own_time_and_leaves_greedy_search_out(fake):
    """Greedy search takes 3 s here, more a width than beam 6 (1 s a width): beam 6 ends at 6;
    greedy (guessed 1 s) at 9; beam 2, guessed 2 s from beam 6 alone, at 11; beam 4 at 15; the
    penalties at width 6, guessed 6 s each (what width 6 took), at 21 and 27: all within 27. Had
    greedy's 3 s a width counted, beam 4 would have been guessed at 12 s and the penalties at 18,
    past 27, and left out."""
    chosen, tried = fake(ALL_EQUAL, deadline=27, cost=lambda beam: 3 if beam == 1 else beam)
    assert tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0), (6, 0.6), (6, 1.5)] and chosen == (6, 1.0)
    chosen, tried = fake(ALL_EQUAL, deadline=26, cost=lambda beam: 3 if beam == 1 else beam)
    assert tried == [(6, 1.0), (1, 1.0), (2, 1.0), (4, 1.0), (6, 0.6)]  # the last would end at 27


REFERENCES = [[f"reference {i} is right", f"also right {i}"] for i in range(200)]
WORD = SimpleNamespace(kind="bpe")  # what `chance` reads of a tokenizer: word-level BLEU


def outputs_right(n: int) -> list[str]:
    """Translations of the 200 sources above, the first n right, the rest wrong in every word."""
    return [refs[0] if i < n else f"nothing at all here {i}" for i, refs in enumerate(REFERENCES)]


@pytest.mark.parametrize("metric", ["bleu", "exact_match"])
def test_the_chance_of_a_difference(metric):
    """Sentences right in one translation and wrong in the other: 40 of 200 such (a lead of 20
    points of exact match, about 7 standard errors of the paired difference, sqrt(0.2 / 200) / 0.2)
    is no chance: p = 1/1001, the least 1000 resamples can give. One such sentence of 200 is: a
    resample holds it K times, about Poisson(1), and the test counts the resamples whose |lead|
    less its mean (1 sentence) exceeds the lead measured (1 sentence), K >= 3: 1 - 2.5/e = 0.08.
    The very same outputs have p = 1."""
    assert tuning.chance(outputs_right(120), outputs_right(80), REFERENCES, metric, WORD) == pytest.approx(1 / 1001)
    one = tuning.chance(outputs_right(101), outputs_right(100), REFERENCES, metric, WORD)
    assert one > tuning.SIGNIFICANCE
    if metric == "exact_match":
        assert one == pytest.approx(1 - 2.5 / np.e, abs=0.03)  # 1000 resamples: about ±0.01
    assert tuning.chance(outputs_right(100), outputs_right(100), REFERENCES, metric, WORD) == 1.0


def wrong_otherwise(n: int, how: str) -> list[str]:
    """The first n of the 200 sources right, the rest wrong, each in its own words `how`."""
    return [refs[0] if i < n else f"{how} {i}" for i, refs in enumerate(REFERENCES)]


@pytest.mark.parametrize("metric", ["bleu", "exact_match"])
def test_identical_results_have_p_1(metric):
    """Identical results were reported as a significant difference: "beam 6 α 1.5 98.6, p 0.001"
    beside a 98.6 choice. Two tries with the same results from different outputs differ by 0, and
    a difference of at least 0 is certain: p = 1, by hand. Exact match: the same sentences right,
    the wrong ones wrong in other words (every resample's difference is 0, which the test's strict
    count made 1/1001). BLEU: 100 right and 100 wrong against the other 100 right and 100 wrong,
    each sentence's n-gram counts the same whichever it is, so the corpus BLEU is the very same
    number."""
    assert tuning.chance(wrong_otherwise(150, "one wrong way"), wrong_otherwise(150, "another wrong way"),
                         REFERENCES, metric, WORD) == 1.0
    swapped = [refs[0] if i >= 100 else f"nothing at all here {i}" for i, refs in enumerate(REFERENCES)]
    words = Tokenizer("word")  # 13a BLEU, as WORD's
    assert score(swapped, REFERENCES, words)[metric] == score(outputs_right(100), REFERENCES, words)[metric]
    assert tuning.chance(swapped, outputs_right(100), REFERENCES, metric, WORD) == 1.0
