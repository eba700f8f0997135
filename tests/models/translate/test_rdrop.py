"""R-Drop (`train --rdrop`): its term against PyTorch, and what doubling the batch must not change."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tinygrad_tx as tx
from models.text.data import PAD_ID
from models.translate.settings import TrainSettings
from models.translate.losses import rdrop_term
from models.translate.training import Trainer

from .test_cli import Quiet


def test_the_term_and_its_gradient_match_pytorch(torch, rng):
    """Two copies of 3 pairs, padding in both halves' targets: the symmetric KL per real token of
    the doubled batch (fairseq's normalisation), in float64, value and gradient."""
    logits = rng.normal(size=(6, 4, 9))  # (2B, T, V)
    tgt_out = rng.integers(1, 9, size=(3, 4))
    tgt_out[0, 3] = tgt_out[2, 2:] = PAD_ID
    tgt_out = np.concatenate([tgt_out, tgt_out])  # the batch twice, as the trainer makes it
    n_tokens = float((tgt_out != PAD_ID).sum())
    x = tx.Tensor(logits, requires_grad=True)
    ours = rdrop_term(x, tx.Tensor(tgt_out), tx.Tensor(np.float64(n_tokens)))
    ours.backward()

    t = torch.tensor(logits, requires_grad=True)
    logp = t.log_softmax(-1)
    p, q = logp[:3], logp[3:]
    kl = torch.nn.functional.kl_div
    both = kl(q, p, log_target=True, reduction="none").sum(-1) + kl(p, q, log_target=True, reduction="none").sum(-1)
    real = torch.tensor(tgt_out[:3] != PAD_ID)
    theirs = (both / 2 * real).sum() / n_tokens
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-15)


def losses(tmp_path, name: str, **given) -> list[float]:
    settings = TrainSettings(task="reverse", out=str(tmp_path / name), steps=12, eval_every=1000, log_every=1,
                             d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                             n_train=200, batch_size=16, n_held_out=20, **given)
    trainer = Trainer(settings)
    trainer.start()
    trainer.train(Quiet())
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [record["loss"] for record in map(json.loads, lines) if "loss" in record]


def test_without_dropout_the_doubled_batch_trains_as_the_plain_one(tmp_path):
    """With no dropout the two copies predict alike, so the KL term is 0 and the mean over the
    doubled batch is the mean over the batch: the same losses step after step. A term that did
    not vanish, or a count of tokens not doubled with the batch, would part them."""
    plain = losses(tmp_path, "plain", dropout=0.0)
    doubled = losses(tmp_path, "rdrop", dropout=0.0, rdrop=5.0)
    assert len(plain) == 12
    np.testing.assert_allclose(doubled, plain, rtol=1e-5)


def test_with_dropout_the_term_is_added(tmp_path):
    """With dropout the two copies differ: the loss is the cross-entropy plus a positive term,
    from the first step on (the same weights, the same batch)."""
    plain = losses(tmp_path, "plain", dropout=0.3)
    doubled = losses(tmp_path, "rdrop", dropout=0.3, rdrop=5.0)
    assert doubled[0] > plain[0] + 0.2  # here the term is about 0.55, masks move the cross-entropy by about 0.03
