import json
import random

import numpy as np
import pytest

from models.text import data, grammar
from models.text.data import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab
from models.text.tokenization import Tokenizer


# --- tokens and vocabulary -----------------------------------------------------

def test_special_ids():
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert data.SPECIALS == ("<pad>", "<bos>", "<eos>", "<unk>")


def test_vocab_build_orders_by_frequency_then_token():
    vocab = Vocab.build([["b", "a", "c"], ["c", "a"], ["c", "d"]])
    assert vocab.tokens == ["<pad>", "<bos>", "<eos>", "<unk>", "c", "a", "b", "d"]
    assert len(vocab) == 8
    assert Vocab.build([["b", "a", "c"], ["c", "a"]], min_freq=2).tokens[4:] == ["a", "c"]


def test_vocab_encode_decode_round_trip():
    vocab = Vocab.build([list("hello world")])
    tokens = list("low rod")
    ids = vocab.encode(tokens, add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and len(ids) == len(tokens) + 2
    assert vocab.decode(ids) == tokens
    assert vocab.decode(np.array(ids + [PAD_ID, PAD_ID])) == tokens


def test_vocab_unknown_tokens_and_decode_rules():
    vocab = Vocab.build([["le", "chat"]])
    assert vocab.encode(["le", "chien"]) == [vocab.ids["le"], UNK_ID]
    assert vocab.decode([UNK_ID]) == ["<unk>"]
    chat, le = vocab.ids["chat"], vocab.ids["le"]
    assert vocab.decode([BOS_ID, le, PAD_ID, chat, EOS_ID, le, le]) == ["le", "chat"]


def test_vocab_dict_round_trip_through_json():
    vocab = Vocab.build([list("abcab")])
    again = Vocab.from_dict(json.loads(json.dumps(vocab.to_dict())))
    assert again.tokens == vocab.tokens
    assert again.encode(list("cab")) == vocab.encode(list("cab"))


def test_vocab_rejects_missing_specials():
    with pytest.raises(ValueError, match="must start with"):
        Vocab(["a", "b"])


@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
def test_a_special_tokens_text_is_text_for_every_tokenizer(kind):
    """With the word tokenizer, a corpus's literal `<eos>` became the end id (the
    model learned to stop there), a source's `<pad>` was masked out, and `<pad> <pad> <pad>`
    translated as `<unk>`. A special id comes only from the program: no text, whatever its
    characters, encodes to one, and every text comes back as it went in."""
    texts = ["dog house <eos> maison", "<pad> <pad> <pad>", "a<bos>b <unk>", "chien <eos>", "le chat"] * 20
    tokenizer = Tokenizer.train(kind, texts, vocab_size=60)
    vocab = Vocab.build([tokenizer.encode(t) for t in texts])
    for text in texts[:5]:
        ids = vocab.encode(tokenizer.encode(text))
        assert not set(ids) & {PAD_ID, BOS_ID, EOS_ID, UNK_ID}, (text, ids)
        assert tokenizer.decode(vocab.decode(ids)) == text
    assert len(set(vocab.tokens[len(SPECIALS):])) == len(vocab) - len(SPECIALS)
    # never seen in training: the program's UNK, not whatever special the characters spell
    unseen = Vocab.build([["le", "chat"]])
    assert unseen.encode(["<eos>", "<pad>", "<bos>", "le"]) == [UNK_ID, UNK_ID, UNK_ID, unseen.ids["le"]]


def test_a_target_holding_a_literal_eos_ends_only_where_the_program_ends_it():
    pairs = [("dog house", "chien <eos> maison"), ("cat", "chat")]
    src_vocab = Vocab.build([s.split() for s, _ in pairs])
    tgt_vocab = Vocab.build([t.split() for _, t in pairs])
    src_ids, tgt_ids = data.encode_pairs(pairs, src_vocab, tgt_vocab, (Tokenizer("word"), Tokenizer("word")))
    src, tgt_in, tgt_out = next(data.Batcher(src_ids[:1], tgt_ids[:1], batch_size=1, shuffle=False).batches())
    assert tgt_out[0].tolist() == [tgt_vocab.ids["chien"], tgt_vocab.ids["<eos>"], tgt_vocab.ids["maison"], EOS_ID]
    assert tgt_vocab.ids["<eos>"] >= len(SPECIALS) and tgt_vocab.decode(tgt_out[0]) == ["chien", "<eos>", "maison"]


# --- encoding ------------------------------------------------------------------

def test_encode_pairs():
    pairs = [("ab", "le chat"), ("ba", "chat")]
    src_vocab = Vocab.build([list(s) for s, _ in pairs])
    tgt_vocab = Vocab.build([t.split() for _, t in pairs])
    src_ids, tgt_ids = data.encode_pairs(pairs, src_vocab, tgt_vocab, (Tokenizer("char"), Tokenizer("word")))
    assert [src_vocab.decode(s) for s in src_ids] == [["a", "b"], ["b", "a"]]
    assert [tgt_vocab.decode(t) for t in tgt_ids] == [["le", "chat"], ["chat"]]


# --- batching ------------------------------------------------------------------

def test_pad():
    out = data.pad([[5, 6, 7], [8], []])
    assert out.dtype == np.int64
    assert out.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert data.pad([[1]], pad_id=9).tolist() == [[1]]
    assert data.pad([[1, 2], [3]], pad_id=9).tolist() == [[1, 2], [3, 9]]


def test_batches_have_bos_eos_and_padding():
    src = [[4, 5, 6], [7]]
    tgt = [[8, 9], [10, 11, 12]]
    (s, t_in, t_out), = data.Batcher(src, tgt, batch_size=2, shuffle=False).batches()
    assert s.dtype == t_in.dtype == t_out.dtype == np.int64
    assert s.tolist() == [[7, 0, 0], [4, 5, 6]]  # sorted by source length
    assert t_in.tolist() == [[BOS_ID, 10, 11, 12], [BOS_ID, 8, 9, PAD_ID]]
    assert t_out.tolist() == [[10, 11, 12, EOS_ID], [8, 9, EOS_ID, PAD_ID]]


def random_corpus(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    src = [list(range(10, 10 + rng.integers(1, 40))) for _ in range(n)]
    tgt = [[i] * int(rng.integers(1, 30)) for i in range(n)]  # token = example number
    return src, tgt


def test_every_example_appears_exactly_once_per_epoch():
    src, tgt = random_corpus()
    batcher = data.Batcher(src, tgt, batch_size=32, seed=0, chunk_batches=4)
    batches = list(batcher.batches(epoch=2))
    assert len(batches) == len(batcher) == 32  # ceil(1000 / 32)
    seen = sorted(int(t_out[row, 0]) for _, _, t_out in batches for row in range(len(t_out)))
    assert seen == list(range(1000))
    for s, _, t_out in batches:  # the example's source travelled with its target
        for row in range(len(s)):
            assert (s[row] != PAD_ID).sum() == len(src[t_out[row, 0]])


def test_batches_group_similar_lengths():
    src, tgt = random_corpus()
    batcher = data.Batcher(src, tgt, batch_size=32, seed=0)
    spreads = [((s != PAD_ID).sum(1).max() - (s != PAD_ID).sum(1).min()) for s, _, _ in batcher.batches()]
    overall = max(map(len, src)) - min(map(len, src))
    assert max(spreads) <= 2 < overall


def test_batches_may_group_by_target_length_first():
    """`sort_first = "target"` (the order benchmarks/corpus.py measures against the default): the
    targets' lengths spread as little as the sources' do by default, the same pairs in an epoch."""
    src, tgt = random_corpus()
    by_source, by_target = (data.Batcher(src, tgt, batch_size=32, seed=0) for _ in range(2))
    by_target.sort_first = "target"
    lengths = [[len(tgt[example]) for example in t[:, 0]] for _, _, t in by_target.batches()]  # t[:, 0]: the example
    assert max(max(n) - min(n) for n in lengths) <= 2 < max(map(len, tgt)) - min(map(len, tgt))
    pairs = [sorted(int(t[row, 0]) for _, _, t in b.batches(1) for row in range(len(t))) for b in (by_source, by_target)]
    assert pairs[0] == pairs[1] == list(range(1000))


def test_shards_deal_out_each_batch_and_an_empty_shard_adds_no_target():
    src, tgt = random_corpus(n=33)  # batches of 8, 8, 8, 8 and 1
    batcher = data.Batcher(src, tgt, batch_size=8, seed=0)
    whole = list(batcher.batches(epoch=1))
    parts = [list(batcher.batches(epoch=1, shard=r, shards=3)) for r in range(3)]
    for b, (_, _, t_out) in enumerate(whole):
        rows = [int(t[0]) for r in range(3) for t in parts[r][b][2] if (t != PAD_ID).any()]  # not stand-ins
        assert sorted(rows) == sorted(int(t[0]) for t in t_out)  # each row on exactly one shard
    short = next(b for b, (s, _, _) in enumerate(whole) if len(s) == 1)  # batches come shuffled
    last = [parts[r][short] for r in range(3)]
    assert [len(s) for s, _, _ in last] == [1, 1, 1]  # one real row; the others stand in with it
    assert (last[0][2] != PAD_ID).any() and (last[1][2] == PAD_ID).all() and (last[2][2] == PAD_ID).all()


def test_batch_order_is_reproducible_per_seed_and_epoch():
    src, tgt = random_corpus()

    def order(seed, epoch):
        return [idx.tolist() for idx in data.Batcher(src, tgt, 32, seed=seed).batch_indices(epoch)]

    assert order(0, 3) == order(0, 3)
    assert order(0, 3) != order(0, 4)
    assert order(0, 3) != order(1, 3)
    assert order(1, 0) != order(0, 1)
    unshuffled = data.Batcher(src, tgt, 32, shuffle=False)
    assert [i.tolist() for i in unshuffled.batch_indices(0)] == \
        [i.tolist() for i in unshuffled.batch_indices(5)]


def test_batcher_rejects_bad_input():
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        data.Batcher([[1], [2]], [[3]], batch_size=1)
    with pytest.raises(ValueError):
        data.Batcher([], [], batch_size=1)
    with pytest.raises(ValueError):
        data.Batcher([[1]], [[2]], batch_size=0)


def sampled_batcher(alpha=0.3, seed=0, batch_size=16):
    rng = random.Random(0)
    pairs = [grammar.sample_pair(rng) for _ in range(200)]
    tokenizers = tuple(Tokenizer.train("bpe", [pair[side] for pair in pairs], 120) for side in (0, 1))
    vocabs = tuple(data.Vocab(list(SPECIALS) + tokenizer.pieces()) for tokenizer in tokenizers)
    return data.SampledBatcher(pairs, vocabs, tokenizers, alpha, batch_size, seed=seed), pairs


def texts_of(batches, batcher):
    """The (source, target) texts each batch row holds, read back through the vocabularies and tokenizers."""
    (src_vocab, tgt_vocab), (src_tok, tgt_tok) = batcher.vocabs, batcher.tokenizers
    return [(src_tok.decode(src_vocab.decode(s)), tgt_tok.decode(tgt_vocab.decode(t)))
            for src, _, tgt_out in batches for s, t in zip(src, tgt_out)]


def test_a_sampled_batcher_gives_every_pair_once_an_epoch_cut_anew():
    batcher, pairs = sampled_batcher()
    epochs = [list(batcher.batches(epoch)) for epoch in (0, 1)]
    for batches in epochs:
        assert len(batches) == len(batcher) == 13  # ceil(200 / 16)
        assert sorted(texts_of(batches, batcher)) == sorted(pairs)
        assert all((src != UNK_ID).all() and (t_out != UNK_ID).all() for src, _, t_out in batches)
    cuts = [sorted(tuple(row[row != PAD_ID]) for _, _, t_out in batches for row in t_out) for batches in epochs]
    assert cuts[0] != cuts[1]  # the same targets, cut another way


def test_a_sampled_epoch_is_a_function_of_seed_and_epoch():
    """So a resumed run trains on exactly the batches an uninterrupted one would."""
    def ids(batcher, epoch):
        return [[a.tolist() for a in batch] for batch in batcher.batches(epoch, shard=1, shards=2)]

    first, _ = sampled_batcher(seed=4)
    second, _ = sampled_batcher(seed=4)
    ids(second, 0)  # another epoch cut (and cached) first makes no difference
    assert ids(first, 3) == ids(second, 3) and ids(first, 3) != ids(first, 2)
    assert ids(first, 3) != ids(sampled_batcher(seed=5)[0], 3)
