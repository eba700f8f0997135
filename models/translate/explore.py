"""`python -m models explore RUN_DIR`: the browser explorer on a trained translation run.

The engine's explorer (`tinygrad_tx.inspect.explorer`) serves the page and the views
of a step graph; this file adds what only a translation run has:
- the graph of one training step on a real batch (the first validation pairs), in
  training mode, so dropout and the label-smoothed loss are in it as they are in training;
- translate: a sentence's pieces, the beam search as a tree, and the attention of
  every layer and head, computed by the same `translate` the CLI uses;
- training: the run's metrics.jsonl, sent again whenever the trainer appends to it
  (server-sent events), and the attention of one sentence at each kept checkpoint.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx.inspect import attention_maps
from tinygrad_tx.inspect.explorer import BadRequest, Explorer, StepRecord, step_endpoints
from tinygrad_tx.inspect.explorer.arrays import number

from .corpus import normalise
from ..text.data import BOS_ID, EOS, EOS_ID, PAD_ID, encode_pairs, pad
from .evaluation import InputTooLong, encode_sources, translate
from .run import SNAPSHOTS, Run, load_model, open_run, read_metrics
from ..beam_tree import BeamTree

STEP_PAIRS = 4
"""The batch of the step graph: this many validation pairs (a small graph a learner can follow)."""
MAX_BEAM = 16
CHECKPOINTS = ("best.npz", "last.npz")
POLL_S = 0.5
"""How often the training stream looks at metrics.jsonl."""
KEEP_ALIVE_S = 10.0


def open_explorer(directory: str | Path, device: str = "cpu") -> Explorer:
    """The explorer of a run directory; a missing or damaged run raises RunError before anything is served."""
    views = RunViews(open_run(directory, device))
    return Explorer(get={**step_endpoints(views.record), "/api/info": views.info, "/api/metrics": views.metrics,
                         "/api/checkpoint_attention": views.checkpoint_attention},
                    post={"/api/translate": views.translate},
                    streams={"/api/events/metrics": views.metric_events})


class RunViews:
    """The endpoints of one run (each takes the request's parameters and returns JSON)."""

    def __init__(self, run: Run):
        self.run = run
        self.record = StepRecord(self._training_loss, ())
        self._models = {"best.npz": run.model}

    def info(self, params: dict) -> dict:
        settings = self.run.settings.get("settings", {})
        what = settings.get("task") or settings.get("data") or "?"
        return {"title": f"{self.run.directory.name}: {what}", "views": ["graph", "translate", "training", "compiled"],
                "example": self.run.held_out("valid")[0][0], "beam": self.run.decoding()[0], "max_beam": MAX_BEAM}

    def _training_loss(self) -> tx.Tensor:
        """The loss of one training step on the first validation pairs (training mode, fixed seed)."""
        pairs = [(s, refs[0]) for s, refs in self.run.held_out("valid")[:STEP_PAIRS]]
        src_ids, tgt_ids = encode_pairs(pairs, self.run.src_vocab, self.run.tgt_vocab, self.run.tokenizers)
        src, tgt_in, tgt_out = pad(src_ids), pad([[BOS_ID] + t for t in tgt_ids]), pad([t + [EOS_ID] for t in tgt_ids])
        model, smoothing = self.run.model, self.run.settings["settings"].get("label_smoothing", 0.0)
        tx.manual_seed(0)
        model.train()
        try:
            logits = model(src, tgt_in)  # (B, T, V)
            return F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=smoothing)
        finally:
            model.eval()

    # -- translate -------------------------------------------------------------------------
    def translate(self, params: dict) -> dict:
        """A sentence's pieces, its translation, the beam-search tree and every attention map; or,
        for a sentence the model cannot take, {"problem": why} (a fine request, with a sad answer)."""
        text, beam = _text(params.get("sentence")), _beam(params.get("beam", self.run.decoding()[0]))
        try:
            return self._translate(_sentence(text), beam)
        except (Untranslatable, InputTooLong) as e:
            return {"problem": str(e)}

    def _translate(self, sentence: str, beam: int) -> dict:
        run, (src_tok, tgt_tok) = self.run, self.run.tokenizers
        pieces = src_tok.encode(sentence)
        if not pieces:
            raise Untranslatable("the sentence has no tokens: type something to translate")
        known = [p in run.src_vocab.ids for p in pieces]
        if not any(known):
            raise Untranslatable(f"none of its pieces ({', '.join(map(repr, pieces[:8]))}) occurred in training: "
                                 "the model would read only <unk>")
        tree = BeamTree()
        started = time.perf_counter()
        output = translate(run.model, [sentence], run.src_vocab, run.tgt_vocab, run.tokenizers, beam, record=tree,
                           length_penalty=run.decoding()[1])[0]
        seconds = time.perf_counter() - started
        out_pieces = tgt_tok.encode(output)
        out_ids = run.tgt_vocab.encode(out_pieces)
        nodes = tree.nodes()
        for node in nodes:
            node["piece"] = run.tgt_vocab.tokens[node["token"]]
        maps = attention(run.model, encode_sources([sentence], run.src_vocab, src_tok, run.model.config.max_len),
                         out_ids, pieces, out_pieces)
        return {"sentence": sentence, "beam": beam, "output": output, "seconds": seconds,
                "pieces": [{"piece": p, "id": i, "known": k}
                           for p, i, k in zip(pieces, run.src_vocab.encode(pieces), known)],
                "output_pieces": out_pieces + [EOS], "tree": nodes, "winner": tree.path(out_ids + [EOS_ID]),
                "attention": maps, "alignment": np.mean(last_cross(maps)["heads"], axis=0).tolist()}

    # -- training --------------------------------------------------------------------------
    def kept_checkpoints(self) -> list[str]:
        """The snapshots of `train --snapshots` in step order, then last.npz and best.npz: the names
        the page may ask for (looked up in this list, never joined to a path as given)."""
        snapshots = [f"{SNAPSHOTS}/{path.name}" for path in sorted(self.run.directory.glob(f"{SNAPSHOTS}/step_*.npz"))]
        return snapshots + [name for name in reversed(CHECKPOINTS) if (self.run.directory / name).is_file()]

    def metrics(self, params: dict) -> dict:
        return {"records": finite_metrics(self.run.directory / "metrics.jsonl"), "checkpoints": self.kept_checkpoints()}

    def metric_events(self, params: dict) -> Iterator[dict]:
        """The records of metrics.jsonl as they are appended: all of them first, then each new batch
        (and an empty one every KEEP_ALIVE_S, by which the server learns that a tab was closed)."""
        path, sent, size, quiet = self.run.directory / "metrics.jsonl", 0, -1, 0.0
        while True:
            now = path.stat().st_size if path.is_file() else 0
            if now != size or quiet >= KEEP_ALIVE_S:
                records = finite_metrics(path) if now != size else []
                if len(records) < sent and now != size:  # rewritten shorter (a resumed run): start again
                    sent = 0
                yield {"from": sent, "records": records[sent:]}
                sent, size, quiet = max(sent, len(records)), now, 0.0
            time.sleep(POLL_S)
            quiet += POLL_S

    def checkpoint_attention(self, params: dict) -> dict:
        """The cross-attention (last decoder layer) of one sentence under a kept checkpoint."""
        name, kept = params.get("name"), self.kept_checkpoints()
        if name not in kept:
            raise BadRequest(f"checkpoint must be one this run kept: {', '.join(kept)}")
        if name not in self._models:
            self._models[name] = load_model(self.run.directory / name).to(self.run.model.device).eval()
        model, (src_tok, tgt_tok) = self._models[name], self.run.tokenizers
        run = self.run
        try:
            sentence = _sentence(_text(params.get("sentence")))
            output = translate(model, [sentence], run.src_vocab, run.tgt_vocab, run.tokenizers, 1)[0]
            src = encode_sources([sentence], run.src_vocab, src_tok, model.config.max_len)
        except (Untranslatable, InputTooLong) as e:
            return {"problem": str(e)}
        out_pieces = tgt_tok.encode(output)
        maps = attention(model, src, run.tgt_vocab.encode(out_pieces), src_tok.encode(sentence), out_pieces)
        return {"name": name, "output": output, "map": last_cross(maps)}


def finite_metrics(path: Path) -> list[dict]:
    """metrics.jsonl's records with NaN and ±Inf (a run that diverged) as None: JSON has no NaN."""
    return [{k: number(v) if isinstance(v, float) else v for k, v in r.items()} for r in read_metrics(path)]


def attention(model, src, out_ids: list[int], pieces: list[str], out_pieces: list[str]) -> list[dict]:
    """Every attention map of one sentence, teacher-forced on the model's own output (BOS + output):
    one entry per attention module, in the model's order, each with its heads (h, rows, cols).

    A row is the position that produced an output token (labelled with that token, EOS last);
    the columns are the source pieces (encoder self-attention, cross-attention) or the tokens
    fed to the decoder (decoder self-attention)."""
    fed = ["<bos>"] + out_pieces
    with tx.no_grad(), attention_maps(model) as maps:
        model(src, np.array([[BOS_ID, *out_ids]], dtype=np.int64))  # (1, T + 1)
    layers = []
    for path, calls in maps.items():
        weights = calls[-1].numpy()[0]  # (h, rows, cols)
        kind = "encoder self" if path.startswith("encoder") else "cross" if "cross" in path else "decoder self"
        rows = pieces if kind == "encoder self" else out_pieces + [EOS]
        cols = fed if kind == "decoder self" else pieces
        layers.append({"name": path, "kind": kind, "rows": rows, "cols": cols, "heads": weights.tolist()})
    return layers


def last_cross(maps: list[dict]) -> dict:
    """The last decoder layer's cross-attention: the one closest to the output."""
    return [m for m in maps if m["kind"] == "cross"][-1]


class Untranslatable(ValueError):
    """A sentence the model cannot take (empty, too long, nothing it knows): said in the page."""


def _text(value) -> str:
    if not isinstance(value, str):
        raise BadRequest("give a sentence (text) to translate")
    return value


def _sentence(text: str) -> str:
    sentence = normalise(text)
    if not sentence:
        raise Untranslatable("the sentence is empty: type something to translate")
    if len(sentence) > 2000:
        raise Untranslatable(f"the sentence is {len(sentence)} characters long; the explorer takes at most 2000")
    return sentence


def _beam(value) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_BEAM:
        raise BadRequest(f"the beam width must be a whole number from 1 to {MAX_BEAM}")
    return value
