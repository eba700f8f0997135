"""The grammar generator seen as a language model: each sentence's exact probability and entropy.

`grammar.random_sentence` makes independent choices: for each noun phrase an
adjective or none (1/2, then 1/21 each), a noun (1/23 animate subjects, 1/47 any
object), singular or plural (1/2), definite or not (1/2); a verb (1/16) between
them. A sentence's probability is the sum, over every choice sequence that spells
it, of the product of the choices' probabilities. With word tokens this gives:

- a recogniser (`accepts`): the grammar makes the sentence with probability > 0;
- the exact entropy per token, the floor under any model's held-out loss.

Per token means: over a held-out set, the summed -log p(token | earlier tokens)
divided by the number of tokens predicted, every word and the end-of-sentence
token (BOS is given, never predicted). On a large set this tends to
E[-log p(sentence)] / E[tokens per sentence], which `entropy_per_token` computes
exactly by enumerating every noun phrase and verb form the generator can make.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from .grammar import ADJECTIVES, ANIMATE_NOUNS, NOUNS, VERBS, Noun, NounPhrase

Words = tuple[str, ...]
Table = dict[Words, dict[bool, float]]  # words -> {plural: probability of spelling them with that number}


def noun_phrases(nouns: list[Noun], language: str) -> Table:
    """Every noun phrase `random_noun_phrase` can make from `nouns`, with its probability per number."""
    table: Table = defaultdict(lambda: defaultdict(float))
    adjectives = [(None, 0.5)] + [(adjective, 0.5 / len(ADJECTIVES)) for adjective in ADJECTIVES]
    for adjective, p_adjective in adjectives:
        for noun in nouns:
            for plural in (False, True):
                for definite in (False, True):
                    phrase = NounPhrase(noun, plural, definite, adjective)
                    words = phrase.english() if language == "en" else phrase.french()
                    table[tuple(words)][plural] += p_adjective / len(nouns) / 4
    return table


def verb_forms(language: str) -> Table:
    """Every verb form, as words ("looks for" is two), with its probability given the subject's number."""
    table: Table = defaultdict(lambda: defaultdict(float))
    for verb in VERBS:
        for plural in (False, True):
            text = {("en", False): verb.en_singular, ("en", True): verb.en_plural,
                    ("fr", False): verb.fr_singular, ("fr", True): verb.fr_plural}[language, plural]
            table[tuple(text.split())][plural] += 1 / len(VERBS)
    return table


class GrammarLM:
    """The true distribution of one side ("en" or "fr") of the grammar, over word tokens."""

    def __init__(self, language: str = "en"):
        if language not in ("en", "fr"):
            raise ValueError(f"language must be 'en' or 'fr', not {language!r}")
        self.language = language
        self.subjects = noun_phrases(ANIMATE_NOUNS, language)
        self.verbs = verb_forms(language)
        self.objects = noun_phrases(NOUNS, language)

    def probability(self, words: Sequence[str]) -> float:
        """P(the generator writes exactly these words): a sum over every split subject | verb | object."""
        words, total = tuple(words), 0.0
        for i in range(1, len(words)):
            for plural, p_subject in self.subjects.get(words[:i], {}).items():
                for j in range(i + 1, len(words)):
                    p_verb = self.verbs.get(words[i:j], {}).get(plural, 0.0)
                    total += p_subject * p_verb * sum(self.objects.get(words[j:], {}).values())
        return total

    def accepts(self, words: Sequence[str]) -> bool:
        """Is this a sentence of the grammar (the verb agreeing with its subject, each phrase well formed)?"""
        return self.probability(words) > 0

    def entropy_per_token(self) -> tuple[float, float]:
        """(entropy in nats per token, expected tokens per sentence with EOS), both exact.

        When every sentence has one derivation, the sentence's entropy is the sum of its
        parts' entropies: H(subject) + H(verb | subject's number) + H(object). That holds
        here, and is checked: each phrase's words fix its number, and no verb word is a
        noun-phrase word, so the verb's position, hence the split, is read off the words.
        """
        self._check_unambiguous()
        p_plural = sum(p for numbers in self.subjects.values() for plural, p in numbers.items() if plural)
        h_verb = sum(p * _entropy({w: ps.get(plural, 0.0) for w, ps in self.verbs.items()})
                     for plural, p in ((False, 1 - p_plural), (True, p_plural)))
        h_sentence = _entropy(_marginal(self.subjects)) + h_verb + _entropy(_marginal(self.objects))
        length = (_mean_length(self.subjects) + _mean_length(self.objects) + 1  # + 1: the EOS token
                  + sum(p * sum(len(w) * ps.get(plural, 0.0) for w, ps in self.verbs.items())
                        for plural, p in ((False, 1 - p_plural), (True, p_plural))))
        return h_sentence / length, length

    def _check_unambiguous(self) -> None:
        phrase_words = {w for table in (self.subjects, self.objects) for words in table for w in words}
        verb_words = {w for words in self.verbs for w in words}
        if phrase_words & verb_words:
            raise ValueError(f"words both in verbs and noun phrases: {sorted(phrase_words & verb_words)}")
        if any(len(numbers) > 1 for table in (self.subjects, self.objects) for numbers in table.values()):
            raise ValueError("a noun phrase's words do not fix its number")


def _marginal(table: Table) -> dict[Words, float]:
    return {words: sum(numbers.values()) for words, numbers in table.items()}


def _entropy(distribution: dict[Words, float]) -> float:
    """-sum p log p in nats, over the outcomes with p > 0."""
    return -sum(p * math.log(p) for p in distribution.values() if p > 0)


def _mean_length(table: Table) -> float:
    return sum(len(words) * p for words, p in _marginal(table).items())
