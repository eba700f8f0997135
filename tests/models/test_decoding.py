"""Decoding: greedy and beam search agree where they must, beam search finds the true best
hypothesis when nothing is pruned, the key/value cache changes nothing but the cost,
eval() makes decoding deterministic, and save -> load keeps every logit."""
import itertools

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_tx as tx
from models import GPT, EncoderClassifier, Transformer, beam_search, greedy_decode
from models.decoding import gnmt_penalty, top_k

pytestmark = pytest.mark.usefixtures("on_each_device")

PAD, BOS, EOS = 0, 1, 2


def small(seed=0, vocab=12, dtype=np.float32, **options):
    tx.manual_seed(seed)
    kwargs = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32, dropout=0.0,
                  max_len=32, pad_id=PAD)
    model = Transformer(vocab, vocab, **{**kwargs, **options})
    for _, t in model.named_tensors():
        t.data = t.data.astype(dtype)
    return model.eval()


def sources(n=16, S=7, vocab=12, seed=3):
    src = np.random.default_rng(seed).integers(3, vocab, (n, S))
    src[::3, 4:] = PAD
    return src


def check_layout(out, max_len):
    """Each row: tokens (no pad), then EOS and only pad after it, or max_len tokens without EOS."""
    assert out.dtype.kind == "i" and out.shape[1] <= max_len
    for row in out:
        ends = np.flatnonzero(row == EOS)
        if ends.size:
            assert np.all(row[ends[0] + 1:] == PAD) and np.all(row[:ends[0]] != PAD)
        else:
            assert len(row) == max_len and np.all(row != PAD)


def test_beam_of_one_is_greedy():
    model = small()
    model.out.bias.data[EOS] += 0.6  # so that rows end at different steps
    src = sources()
    greedy = greedy_decode(model, src, 10, BOS, EOS)
    check_layout(greedy, 10)
    lengths = {int((row != PAD).sum()) for row in greedy}
    assert len(lengths) > 2, "the test needs rows that end at different steps"
    np.testing.assert_array_equal(beam_search(model, src, 10, BOS, EOS, beam_size=1), greedy)


def exhaustive_best(model, src_row, max_len, alpha):
    """The hypothesis with the best log p / gnmt_penalty among ALL of them, each scored by a
    full (uncached) forward pass: the ones that end with EOS and the ones cut at max_len, all but
    the empty one (EOS first), which the searches rule out."""
    words = [t for t in range(model.config.tgt_vocab) if t not in (PAD, EOS)]
    hypotheses = [(*body, EOS) for n in range(1, max_len) for body in itertools.product(words, repeat=n)]
    hypotheses += list(itertools.product(words, repeat=max_len))
    tgt_in = np.full((len(hypotheses), max_len), PAD)
    for i, h in enumerate(hypotheses):  # right padding hides nothing from earlier positions
        tgt_in[i, :len(h)] = (BOS, *h[:-1])
    logits = model(np.repeat(src_row[None], len(hypotheses), axis=0), tgt_in).numpy()  # (N, L, V)
    logits[..., PAD] = -np.inf
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    scores = [sum(logp[i, t, tok] for t, tok in enumerate(h)) / gnmt_penalty(len(h), alpha)
              for i, h in enumerate(hypotheses)]
    return hypotheses[int(np.argmax(scores))]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_unpruned_beam_search_finds_the_best_hypothesis(alpha):
    """With a beam wider than every prefix set, beam search must return the exhaustive optimum
    (here the optimum's length depends on alpha: 2 for 0.0; 4 and 2 for 0.6 and 1.5)."""
    vocab, max_len = 5, 4
    model = small(vocab=vocab, dtype=np.float64, seed=5)
    model.out.weight.data *= 3.0  # peaked distributions, so that long hypotheses can win
    src = sources(n=3, vocab=vocab, seed=5)
    found = beam_search(model, src, max_len, BOS, EOS, beam_size=128, length_penalty=alpha)
    for b in range(len(src)):
        got = tuple(int(t) for t in found[b] if t != PAD)
        best = exhaustive_best(model, src[b], max_len, alpha)
        assert got == best, f"source {b}: beam search {got}, exhaustive {best}"


def test_no_search_returns_an_empty_output():
    """EOS made by far the likeliest token everywhere: both searches still put one word first (the
    likeliest other one, by a forward pass of BOS alone), then end."""
    model = small(dtype=np.float64)
    model.out.bias.data[EOS] += 20.0
    src = sources()
    logits = model(src, np.full((len(src), 1), BOS)).numpy()[:, 0]  # (B, V) the first step's
    logits[:, [PAD, EOS]] = -np.inf
    first = logits.argmax(axis=-1)
    for out in (greedy_decode(model, src, 10, BOS, EOS), beam_search(model, src, 10, BOS, EOS, beam_size=4)):
        assert out.shape[1] == 2 and np.array_equal(out[:, 0], first) and np.all(out[:, 1] == EOS)


def test_beam_search_layout_and_early_stop():
    model = small()
    model.out.bias.data[EOS] += 0.3  # some sources end early, some run to max_len
    out = beam_search(model, sources(), 10, BOS, EOS, beam_size=4)
    check_layout(out, 10)
    assert out.shape[1] == 10 and (out == EOS).any()

    model.out.bias.data[EOS] += 0.7  # now every beam ends soon
    steps = []
    decode = model.decode
    model.decode = lambda *args: steps.append(1) or decode(*args)
    out = beam_search(model, sources(), 10, BOS, EOS, beam_size=4)
    check_layout(out, 10)
    assert len(steps) < 10  # stopped once every beam had ended


@pytest.mark.parametrize("search", ["greedy", "beam, α 0.6", "beam, α 1.5"])
def test_a_limit_a_source_decodes_each_as_it_would_alone(search):
    """With one `max_len` a source, a row's output is the one it gets decoded alone with its own
    limit: the rows batched with it change nothing (a batch's one limit made a long-output
    search of a short source depend on the longest source beside it)."""
    model = small(dtype=np.float64)
    model.out.bias.data[EOS] += 0.3  # some rows end early, some run to their limit
    src, limits = sources(), np.arange(16) % 7 + 2
    if search == "greedy":
        decode = lambda s, limit: greedy_decode(model, s, limit, BOS, EOS)
    else:
        alpha = float(search.split("α ")[1])
        decode = lambda s, limit: beam_search(model, s, limit, BOS, EOS, beam_size=3, length_penalty=alpha)
    together = decode(src, limits)
    assert together.shape[1] <= limits.max()
    ran_to_limit = 0
    for row, limit in enumerate(limits):
        alone = decode(src[row:row + 1], int(limit))[0]
        np.testing.assert_array_equal(together[row, :len(alone)], alone)
        assert np.all(together[row, len(alone):] == PAD)
        ran_to_limit += len(alone) == limit and EOS not in alone
    assert ran_to_limit > 2, "the test needs rows cut at their own limits"


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="max_len must be at least 1"):
        greedy_decode(small(), sources(n=2), np.array([3, 0]), BOS, EOS)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_cached_decoding_equals_recomputing_the_prefix(norm_first):
    model = small(dtype=np.float64, norm_first=norm_first)
    src = sources(n=4)
    with tx.no_grad():
        memory = model.encode(src)
        cache = model.new_cache()
        tokens = np.full((4, 1), BOS)
        for _ in range(8):
            cached = model.decode(tokens[:, -1:], memory, src, cache).numpy()[:, -1]
            full = model.decode(tokens, memory, src).numpy()[:, -1]
            assert np.abs(cached - full).max() < 1e-6
            cached[:, PAD] = -np.inf  # fed tokens are never padding (decoding never generates it)
            tokens = np.concatenate([tokens, cached.argmax(-1)[:, None]], axis=1)
        assert cache[0].length == 8  # one position per step, not the whole prefix again


def test_gpt_cache_and_generate():
    tx.manual_seed(0)
    model = GPT(13, d_model=16, num_heads=4, num_layers=2, d_ff=32, dropout=0.0, max_len=24).eval()
    for _, t in model.named_tensors():
        t.data = t.data.astype(np.float64)
    prompt = np.random.default_rng(0).integers(0, 13, (3, 5))
    out = model.generate(prompt, 6)
    np.testing.assert_array_equal(out[:, :5], prompt)
    with tx.no_grad():
        full = model(out).numpy()
        cache = model.new_cache()
        cached = np.concatenate([model(out[:, :5], cache).numpy()] +
                                [model(out[:, t:t + 1], cache).numpy() for t in range(5, 11)], axis=1)
    assert np.abs(full - cached).max() < 1e-6
    np.testing.assert_array_equal(out[:, 5:], full[:, 4:-1].argmax(-1))  # greedy continuation
    sampled = model.generate(prompt, 6, temperature=1.0, rng=np.random.default_rng(1))
    assert sampled.shape == (3, 11) and sampled.min() >= 0 and sampled.max() < 13


def test_eval_makes_decoding_deterministic():
    model = small(dropout=0.3)
    src = sources()
    tgt = np.random.default_rng(0).integers(3, 12, (16, 5))
    model.train()
    assert np.abs(model(src, tgt).numpy() - model(src, tgt).numpy()).max() > 1e-3  # dropout is on
    model.eval()
    np.testing.assert_array_equal(model(src, tgt).numpy(), model(src, tgt).numpy())
    np.testing.assert_array_equal(greedy_decode(model, src, 8, BOS, EOS), greedy_decode(model, src, 8, BOS, EOS))
    np.testing.assert_array_equal(beam_search(model, src, 8, BOS, EOS), beam_search(model, src, 8, BOS, EOS))


@pytest.mark.parametrize("tie", [False, True])
def test_save_then_load_gives_identical_logits(tmp_path, tie):
    model = small(tie_embeddings=tie, norm_first=True)
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = Transformer.load(path)
    assert loaded.config == model.config
    src, tgt = sources(), np.random.default_rng(0).integers(3, 12, (16, 5))
    np.testing.assert_array_equal(model(src, tgt).numpy(), loaded.eval()(src, tgt).numpy())
    with pytest.raises(ValueError, match="not a GPT"):
        GPT.load(path)


def test_gpt_and_classifier_save_and_load(tmp_path):
    tx.manual_seed(0)
    ids = np.random.default_rng(0).integers(1, 9, (2, 6))
    for model in (GPT(9, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8),
                  EncoderClassifier(9, 3, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)):
        model.save(tmp_path / "m.npz")
        loaded = type(model).load(tmp_path / "m.npz")
        np.testing.assert_array_equal(model.eval()(ids).numpy(), loaded.eval()(ids).numpy())


class BigramModel:
    """A stand-in decoder whose next-token distribution depends only on the last token fed
    (`table[last]`), so the score of every hypothesis can be worked out by hand."""

    def __init__(self, table: dict[int, dict[int, float]], vocab: int):
        self.logp = np.full((vocab, vocab), -50.0)
        for last, nexts in table.items():
            for token, p in nexts.items():
                self.logp[last, token] = np.log(p)
        self.config, self.device = type("Config", (), {"pad_id": PAD})(), tx.default_device()

    def encode(self, src):
        return None

    def new_cache(self):
        return []

    def decode(self, tokens, memory, src, cache):
        return tx.Tensor(self.logp[np.asarray(tokens)[:, -1]][:, None, :])  # (B, 1, V)

    def score(self, row, alpha):
        """log p(row) / gnmt_penalty(len(row)) for a hypothesis ending with EOS."""
        tokens = [int(t) for t in row if t != PAD]
        logp = sum(self.logp[last, t] for last, t in zip([BOS] + tokens, tokens))
        return logp / gnmt_penalty(len(tokens), alpha)


def test_beam_search_never_scores_below_greedy_when_junk_ends_early():
    """Beam search scored below greedy when junk ended early. From BOS: a .45, EOS .35, b .20; then
    a -> c -> EOS (.99 each) and b -> EOS (.9). With 2 beams, [EOS] and [b, EOS] end by step 2,
    which used to mark the source done and drop the live [a, c], whose ending scores
    log(.45·.99·.99)/1.19 = -0.69 against log(.35)/1 = -1.05 for [EOS]: greedy found the better
    translation."""
    A, B, C = 3, 4, 5
    model = BigramModel({BOS: {A: .45, EOS: .35, B: .20}, A: {C: .99, EOS: .01}, B: {EOS: .9, C: .1},
                         C: {EOS: .99, C: .01}}, vocab=6)
    src = np.array([[A]])
    greedy = greedy_decode(model, src, 8, BOS, EOS)[0]
    np.testing.assert_array_equal(greedy, [A, C, EOS])
    for k in (2, 3, 4):
        beam = beam_search(model, src, 8, BOS, EOS, beam_size=k, length_penalty=0.6)[0]
        assert model.score(beam, 0.6) >= model.score(greedy, 0.6), f"beam {k}: {beam} below greedy {greedy}"


def test_decoding_copies_ids_not_scores_to_the_host(monkeypatch):
    """What comes back to the host per step is B ids (greedy) or each source's 2K best
    candidates (beam), never the (rows, V) scores: on a GPU that copy would cost more than
    the step. Counted through the backend's one door to the host."""
    vocab, B, K = 23, 3, 2
    model = small(vocab=vocab)
    model.out.bias.data[EOS] -= 5.0  # long outputs: many steps
    backend = tx.get_backend(model.device)
    copied, to_host = [], type(backend).to_host
    monkeypatch.setattr(type(backend), "to_host", lambda self, a: copied.append(a.shape) or to_host(self, a))
    src = sources(n=B, vocab=vocab)
    greedy_decode(model, src, 9, BOS, EOS)
    assert copied and all(shape == (B,) for shape in copied)
    copied.clear()
    beam_search(model, src, 9, BOS, EOS, beam_size=K)
    assert copied and all(shape == (B, 2 * K) for shape in copied)


# few distinct values, so that ties (also across the cut) and -inf are common
scores_with_ties = hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=30),
                              elements=st.sampled_from([-np.inf, -2.0, -1.0, -0.5, 0.0, 3.0, np.nan]))


@given(scores=scores_with_ties, k=st.integers(1, 35))
@example(scores=np.array([[np.nan, 1.0, np.nan, 0.0]]), k=3)  # more kept than there are numbers
def test_top_k_is_the_head_of_the_stable_sort(device, scores, k):
    """The beam search's candidates without a full sort: the same positions in the same order as
    argsort(-scores, kind="stable")[:, :k], ties at the cut and NaN included."""
    xp = tx.get_backend(device).xp
    expected = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(tx.get_backend(device).to_host(top_k(xp, xp.asarray(scores), k)), expected)
