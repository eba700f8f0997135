"""Choosing a run's decoding on its validation set: which tries are made, in what order, which
wins, and which a deadline leaves out. Translation and scoring are replaced by a table of
made-up scores, and time by a clock that each try advances by its beam width in seconds, so
every choice here is worked out by hand (test_corpus_cli.py checks the real thing)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from models.translate import tuning


@pytest.fixture
def fake(monkeypatch):
    clock = SimpleNamespace(now=0.0)

    def choose(scores: dict, metric="bleu", deadline=None, report_share=0.0):
        def translate_shared(run, texts, beam, length_penalty):
            clock.now += beam  # a try takes its width in seconds
            return [(beam, length_penalty)] * len(texts)

        def score(outputs, references, tokenizer):
            value = scores[outputs[0]]
            return {"bleu": value, "chrf": value, "exact_match": value}

        monkeypatch.setattr(tuning, "translate_shared", translate_shared)
        monkeypatch.setattr(tuning, "score", score)
        run = SimpleNamespace(held_out=lambda split: [("a source", ["a reference"])], model=None, src_vocab=None,
                              tgt_vocab=None, tokenizers=(None, None))
        chosen = tuning.choose_decoding(run, metric, deadline, report_share, clock=lambda: clock.now)
        return (chosen["beam"], chosen["length_penalty"]), [(t["beam"], t["length_penalty"]) for t in chosen["tried"]]

    return choose


ALL_EQUAL = {(4, 0.6): 50, (1, 0.6): 50, (2, 0.6): 50, (6, 0.6): 50, (4, 0.0): 50, (4, 1.0): 50}


def test_the_usual_decoding_first_and_kept_unless_beaten(fake):
    chosen, tried = fake(ALL_EQUAL)
    assert tried == [(4, 0.6), (1, 0.6), (2, 0.6), (6, 0.6), (4, 0.0), (4, 1.0)]
    assert chosen == (4, 0.6)


def test_a_better_score_wins_and_among_equals_the_narrower_beam(fake):
    chosen, tried = fake({(4, 0.6): 50, (1, 0.6): 51, (2, 0.6): 51, (6, 0.6): 49})
    assert chosen == (1, 0.6) and tried == [(4, 0.6), (1, 0.6), (2, 0.6), (6, 0.6)]  # greedy: no penalties


def test_penalties_are_tried_at_the_best_width(fake):
    scores = {(4, 0.6): 50, (1, 0.6): 40, (2, 0.6): 45, (6, 0.6): 52, (6, 0.0): 53, (6, 1.0): 51}
    chosen, tried = fake(scores)
    assert tried[-2:] == [(6, 0.0), (6, 1.0)] and chosen == (6, 0.0)


def test_a_perfect_score_ends_the_search(fake):
    """A task that beam 4 gets right on every validation pair keeps beam 4 and costs one try."""
    assert fake({(4, 0.6): 100}, metric="exact_match") == ((4, 0.6), [(4, 0.6)])
    assert fake({(4, 0.6): 90, (1, 0.6): 100}, metric="exact_match") == ((1, 0.6), [(4, 0.6), (1, 0.6)])


def test_a_deadline_leaves_out_the_tries_that_would_end_after_it(fake):
    """Widths cost their width in seconds; deadline 10. Beam 4 ends at 4; greedy (guessed 1 s)
    at 5; beam 2 (2 s) at 7; beam 6 would end at 13: left out; at the best width, 2, penalty
    0 ends at 9, penalty 1 would end at 11: left out."""
    scores = {(4, 0.6): 50, (1, 0.6): 40, (2, 0.6): 55, (6, 0.6): 60, (2, 0.0): 54, (2, 1.0): 58}
    chosen, tried = fake(scores, deadline=10)
    assert tried == [(4, 0.6), (1, 0.6), (2, 0.6), (2, 0.0)] and chosen == (2, 0.6)


def test_a_deadline_keeps_time_for_the_report(fake):
    """With a report as long as a validation pass at the best width so far (4 s): greedy ends
    at 5 and leaves 5 for a 4 s report; beam 2 would end at 7 with 4 s still to report: left
    out, and so is the rest."""
    chosen, tried = fake(ALL_EQUAL, deadline=10, report_share=1.0)
    assert tried == [(4, 0.6), (1, 0.6)] and chosen == (4, 0.6)
