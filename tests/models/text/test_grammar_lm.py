"""The grammar's exact sentence probabilities, recogniser and entropy, against the generator itself."""
import math
import random

import numpy as np
import pytest

from models.text import grammar
from models.text.grammar_lm import GrammarLM


@pytest.fixture(scope="module", params=["en", "fr"])
def lm(request):
    return GrammarLM(request.param)


def words_of(sentence: grammar.Sentence, language: str) -> list[str]:
    return (sentence.english() if language == "en" else sentence.french()).split()


def test_probability_of_hand_computed_sentences():
    en, fr = GrammarLM("en"), GrammarLM("fr")
    bare_subject, bare_object = 0.5 / 23 / 4, 0.5 / 47 / 4  # no adjective; the noun; number and article
    plain = bare_subject * (1 / 16) * bare_object
    assert en.probability("the cat eats the apple".split()) == pytest.approx(plain, rel=1e-12)
    assert fr.probability("le chat mange la pomme".split()) == pytest.approx(plain, rel=1e-12)
    old_subject, adjective_object = 0.5 / 21 / 23 / 4, 0.5 / 21 / 47 / 4  # with one adjective of 21
    assert en.probability("an old cat eats an apple".split()) == pytest.approx(
        old_subject * (1 / 16) * bare_object, rel=1e-12)
    assert en.probability("the cats look for some red apples".split()) == pytest.approx(
        bare_subject * (1 / 16) * adjective_object, rel=1e-12)


@pytest.mark.parametrize("language,text", [
    ("en", "the cat eat the apple"),        # verb agreement
    ("en", "the cats eats the apple"),
    ("en", "the cat eats an cake"),         # "an" before a consonant
    ("en", "a apple eats the cat"),         # objects are not subjects
    ("en", "the cat eats"),                 # incomplete
    ("en", "the cat eats the apple the"),
    ("fr", "le chat mangent la pomme"),
    ("fr", "la chat mange la pomme"),       # article gender
    ("fr", "le chat mange la pomme rouges"),  # adjective number
    ("fr", "des petits chats mangent la pomme"),  # "de" before a plural adjective that precedes
    ("fr", "le chat noir petit mange la pomme"),
])
def test_recogniser_rejects_broken_sentences(language, text):
    assert not GrammarLM(language).accepts(text.split())


def test_recogniser_accepts_what_the_generator_writes(lm):
    rng = random.Random(3)
    assert all(lm.accepts(words_of(grammar.random_sentence(rng), lm.language)) for _ in range(2000))
    assert lm.accepts("de petits chats mangent la pomme".split()) == (lm.language == "fr")


def test_phrase_and_verb_tables_are_distributions(lm):
    for table in (lm.subjects, lm.objects):
        assert sum(p for numbers in table.values() for p in numbers.values()) == pytest.approx(1, abs=1e-12)
    for plural in (False, True):
        assert sum(numbers.get(plural, 0) for numbers in lm.verbs.values()) == pytest.approx(1, abs=1e-12)


def test_entropy_per_token_matches_the_closed_form_and_the_generator(lm):
    """Closed form: the choices' entropies over the expected token count (EOS included); and a
    Monte Carlo estimate from the generator's own samples, within 4 standard errors."""
    floor, length = lm.entropy_per_token()
    two_word_verbs = sum(len(v.en_singular.split()) == 2 for v in grammar.VERBS) if lm.language == "en" else 0
    expected_length = 2.5 + 1 + two_word_verbs / 16 + 2.5 + 1
    closed = (10 * math.log(2) + math.log(21) + math.log(23) + math.log(47)) / expected_length
    assert length == pytest.approx(expected_length, rel=1e-12)
    assert floor == pytest.approx(closed, rel=1e-12)
    rng = random.Random(7)
    sentences = [words_of(grammar.random_sentence(rng), lm.language) for _ in range(20000)]
    nll = np.array([-math.log(lm.probability(s)) for s in sentences])
    tokens = np.array([len(s) + 1 for s in sentences])
    # the ratio estimator's standard error, by the delta method
    ratio = nll.sum() / tokens.sum()
    error = np.std(nll - ratio * tokens) / np.sqrt(len(nll)) / tokens.mean()
    assert abs(ratio - floor) < 4 * error


def test_bad_language_is_named():
    with pytest.raises(ValueError, match="language must be 'en' or 'fr', not 'de'"):
        GrammarLM("de")
