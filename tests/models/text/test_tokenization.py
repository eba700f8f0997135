"""Tokenizers: exact round trips, subwords for unseen words, saved with the run."""
import random

import pytest

from models.text import grammar
from models.translate.corpus import normalise
from models.text.tokenization import KINDS, Tokenizer


def test_char_and_word():
    char, word = Tokenizer("char"), Tokenizer("word")
    assert char.encode("ab c") == ["a", "b", " ", "c"] and char.decode(["a", "b", " ", "c"]) == "ab c"
    assert word.encode(" le  chat ") == ["le", "chat"] and word.decode(["le", "chat"]) == "le chat"
    with pytest.raises(ValueError, match="bytes"):
        Tokenizer("bytes")
    with pytest.raises(ValueError, match="needs"):
        Tokenizer("bpe")


def corpus_text(n=600, seed=0):
    """French and English sentences with accents, elisions, digits and French punctuation spacing."""
    rng = random.Random(seed)
    extra = ["Qu'est-ce que c'est\u202f?", "« Oui », dit-elle.", "Ça coûte 12,50 €.", "Élève, où es-tu ?",
             "Je l’ai vu hier.", "C'est l'été !", "Tom's 3 dogs ran."]
    texts = [grammar.sample_pair(rng)[rng.randrange(2)] for _ in range(n)] + extra
    return [normalise(t) for t in texts]


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_over_a_whole_corpus(kind):
    texts = corpus_text()
    tokenizer = Tokenizer.train(kind, texts, vocab_size=300)
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_unseen_words_become_known_pieces():
    words = ["search", "searching", "research", "searched", "capability", "stability", "usability",
             "readability", "reliability", "portability"]
    rng = random.Random(1)
    texts = [" ".join(rng.choice(words) for _ in range(5)) for _ in range(300)]
    tokenizer = Tokenizer.train("bpe", texts, vocab_size=50)
    seen = {piece for text in texts for piece in tokenizer.encode(text)}
    pieces = tokenizer.encode("searchability")
    assert pieces == ["▁search", "ability"] and set(pieces) <= seen  # pieces the training text had
    assert tokenizer.decode(pieces) == "searchability"


def test_punctuation_is_its_own_piece():
    texts = [normalise(t) for t in ["Tom est là.", "Tom est parti.", "Je vois Tom.", "Tom ?", "Tom !"] * 40]
    tokenizer = Tokenizer.train("bpe", texts, vocab_size=40)
    assert tokenizer.encode("Je vois Tom.")[-2:] == ["▁Tom", "."]


def test_a_tiny_corpus_gets_a_smaller_vocabulary_instead_of_an_error():
    tokenizer = Tokenizer.train("unigram", ["ab ba", "ba ab"], vocab_size=4000)
    assert tokenizer.decode(tokenizer.encode("ab ba ab")) == "ab ba ab"


def test_a_trained_model_is_bytes_that_rebuild_the_same_tokenizer():
    texts = corpus_text(200)
    tokenizer = Tokenizer.train("bpe", texts, vocab_size=200)
    again = Tokenizer("bpe", bytes(tokenizer.model))
    assert all(again.encode(t) == tokenizer.encode(t) for t in texts)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sampled_cuts_round_trip_vary_and_repeat_with_their_seed(kind):
    texts = corpus_text(300)
    tokenizer = Tokenizer.train(kind, texts, vocab_size=300)
    first, again, other = (tokenizer.sample(texts, 0.3, seed) for seed in (1, 1, 2))
    assert first == again and first != other  # a function of the seed
    assert [tokenizer.decode(cut) for cut in first] == texts  # every cut spells its text
    best = [tokenizer.encode(text) for text in texts]
    assert sum(cut != b for cut, b in zip(first, best)) > len(texts) // 10  # not the best cut, often
    assert {piece for cut in first + other for piece in cut} <= set(tokenizer.pieces())


def test_bpe_dropout_cuts_into_smaller_pieces_as_alpha_grows():
    """BPE-dropout skips each merge with probability alpha: at 0 it is the best cut, and the more
    merges it skips, the more (and shorter) the pieces."""
    texts = corpus_text(300)
    tokenizer = Tokenizer.train("bpe", texts, vocab_size=300)
    assert tokenizer.sample(texts, 0.0, seed=3) == [tokenizer.encode(text) for text in texts]
    counts = [sum(map(len, tokenizer.sample(texts, alpha, seed=3))) for alpha in (0.0, 0.1, 0.5, 0.99)]
    assert counts == sorted(counts) and len(set(counts)) == 4


def test_sampling_needs_a_subword_model():
    with pytest.raises(ValueError, match="sampling needs bpe or unigram"):
        Tokenizer("word").sample(["a b"], 0.1, seed=0)
