"""Scoring against every reference of a source, checked against direct sacrebleu calls."""
import numpy as np
import pytest
import sacrebleu

from models.translate.evaluation import by_length, score
from models.text.tokenization import Tokenizer

HYPOTHESES = ["C'est vraiment grand.", "Il court vite.", "Je suis là."]
REFERENCES = [["C'est vraiment balaise.", "C'est vraiment grand."], ["Il court."], ["Me voici.", "Je suis ici.", "J'y suis."]]


def test_multi_reference_scores_match_sacrebleu():
    metrics = score(HYPOTHESES, REFERENCES, Tokenizer("word"))
    # sacrebleu's own layout: one stream per reference position, None where a source has fewer
    streams = [["C'est vraiment balaise.", "Il court.", "Me voici."],
               ["C'est vraiment grand.", None, "Je suis ici."],
               [None, None, "J'y suis."]]
    assert metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, streams).score)
    assert metrics["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, streams).score)
    assert (metrics["n"], metrics["references"]) == (3, 6)
    assert metrics["exact_match"] == pytest.approx(100 / 3)  # the first matches its second reference
    # words against the closest reference: 3 of 3, 1 of 2 ("court" is not "court."), 2 of 3 ("Je suis")
    assert metrics["token_accuracy"] == pytest.approx(100 * 6 / 8)


def test_more_references_never_lower_bleu():
    single = score(HYPOTHESES, [refs[:1] for refs in REFERENCES], Tokenizer("word"))
    assert single["bleu"] < score(HYPOTHESES, REFERENCES, Tokenizer("word"))["bleu"]
    assert single["exact_match"] == 0


def test_character_targets_are_scored_by_character():
    metrics = score(["1999-03-03"], [["1999-03-04"]], Tokenizer("char"))
    expected = sacrebleu.corpus_bleu(["1999-03-03"], [["1999-03-04"]], tokenize="char").score
    assert metrics["bleu"] == pytest.approx(expected) and metrics["bleu"] > 0


def test_by_length_buckets_sources_by_their_tokens():
    table = by_length(["7", "12", "45", "100"], ["seven", "x", "forty five", "one hundred"],
                      [["seven"], ["twelve"], ["forty five"], ["one hundred"]], Tokenizer("char"))
    assert table == [(1, 1, 100.0), (2, 2, 50.0), (3, 1, 100.0)]


def test_cross_attention_of_an_empty_output_is_the_bos_row():
    from models import Transformer
    from models.translate.evaluation import cross_attention

    model = Transformer(8, 8, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                        dropout=0.0, max_len=16).eval()
    weights = cross_attention(model, np.array([[4, 5, 6]]), [])  # the model said nothing: only BOS was fed
    assert weights.shape == (2, 1, 3) and np.allclose(weights.sum(-1), 1)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_translation_does_not_depend_on_the_sentences_beside_it(beam):
    """An untrained model rarely says EOS, so its outputs run to their length limit: a short
    source's limit is its own (twice its tokens and 10), not that of a longer one in its batch."""
    from models import Transformer
    from models.text.data import Vocab
    from models.translate.evaluation import translate

    words = "a b c d e f g h".split()
    vocab, word = Vocab.build([words]), Tokenizer("word")
    model = Transformer(len(vocab), len(vocab), d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=32, dropout=0.0, max_len=64).eval()
    short, long = "a b", " ".join(words * 2)
    alone = translate(model, [short], vocab, vocab, (word, word), beam=beam)[0]
    beside = translate(model, [short, long], vocab, vocab, (word, word), beam=beam)[0]
    assert beside == alone
    assert len(alone.split()) == 2 * 2 + 10  # it ran to its own limit: the case a shared limit got wrong
