"""An ensemble decodes with the mean of its models' probabilities: checked against full,
uncached forward passes of each model averaged by hand (so the split of the one key/value
cache between the models is checked too), and an ensemble of copies decodes as the model."""
import itertools

import numpy as np
import pytest

from models import Transformer, beam_search, greedy_decode
from models.decoding import gnmt_penalty
from models.ensemble import Ensemble

from .test_decoding import BOS, EOS, PAD, small, sources

pytestmark = pytest.mark.usefixtures("on_each_device")


def probs_along(models, src, tokens):
    """p(next token | BOS + tokens[:t]) of the ensemble at every t, by hand: each model's softmax
    over one full, uncached forward pass, the mean over the models, then padding ruled out and
    renormalised (as the search rules it out for one model). (len(tokens) + 1, V) float64."""
    mean = 0.0
    for model in models:
        logits = model(src[None], np.array([[BOS, *tokens]])).numpy()[0].astype(np.float64)  # (T, V)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        mean = mean + e / e.sum(-1, keepdims=True)
    mean = mean / len(models)
    mean[:, PAD] = 0.0
    return mean / mean.sum(-1, keepdims=True)


def test_greedy_search_of_an_ensemble_takes_the_most_likely_token_of_the_mean():
    models = [small(seed=1), small(seed=2)]
    for m in models:
        m.out.bias.data[EOS] += 0.6  # rows that end at different steps
    src = sources(n=6)
    out = greedy_decode(Ensemble(models), src, 8, BOS, EOS)
    for row, ids in zip(src, out):
        prefix = []
        for token in ids:
            if token == PAD:
                break
            expected = int(np.argmax(probs_along(models, row, prefix)[-1]))
            assert token == expected
            prefix.append(int(token))
            if token == EOS:
                break
    # the two models alone disagree somewhere, so the test tells the mean from either of them
    assert not np.array_equal(greedy_decode(models[0], src, 8, BOS, EOS), greedy_decode(models[1], src, 8, BOS, EOS))


def test_unpruned_beam_search_of_an_ensemble_finds_the_best_hypothesis_of_the_mean():
    """Every hypothesis up to max_len scored by the product of the hand-made mean probabilities,
    length-penalised, all but the empty one (EOS first, which the searches rule out): the unpruned
    beam search must return the best."""
    vocab, max_len, alpha = 5, 3, 0.6
    models = [small(vocab=vocab, dtype=np.float64, seed=s) for s in (5, 6, 7)]
    for m in models:
        m.out.weight.data *= 3.0
    words = [t for t in range(vocab) if t not in (PAD, EOS)]
    src = sources(n=4, vocab=vocab, seed=11)
    found = beam_search(Ensemble(models), src, max_len, BOS, EOS, beam_size=vocab ** max_len, length_penalty=alpha)
    for row, ids in zip(src, found):
        hypotheses = [(*body, EOS) for n in range(1, max_len) for body in itertools.product(words, repeat=n)]
        hypotheses += list(itertools.product(words, repeat=max_len))
        scores = []
        for h in hypotheses:
            probs = probs_along(models, row, h[:-1])  # (len(h), V)
            scores.append(np.log(probs[np.arange(len(h)), h]).sum() / gnmt_penalty(len(h), alpha))
        best = hypotheses[int(np.argmax(scores))]
        assert tuple(int(t) for t in ids[:len(best)]) == best and np.all(ids[len(best):] == PAD)


def test_an_ensemble_of_copies_decodes_as_the_model():
    model = small(seed=3)
    copy = small(seed=3)
    src = sources()
    for search in (lambda m: greedy_decode(m, src, 10, BOS, EOS),
                   lambda m: beam_search(m, src, 10, BOS, EOS, beam_size=3)):
        np.testing.assert_array_equal(search(Ensemble([model, copy])), search(model))
        np.testing.assert_array_equal(search(Ensemble([model])), search(model))


def test_models_of_other_vocabularies_are_refused():
    with pytest.raises(ValueError, match="must share vocabularies: 12/13 tokens against 12/12"):
        Ensemble([small(), Transformer(12, 13, d_model=16, num_heads=4, pad_id=PAD)])
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])
