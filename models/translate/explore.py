"""`python -m models explore RUN_DIR`: the browser explorer on a translation run, live while it trains.

The engine's explorer (`tinygrad_tx.inspect.explorer`) serves the page and the views
of a step graph; this file adds what only a translation run has:
- the graph of one training step on a real batch (the first validation pairs), in
  training mode, so dropout and the label-smoothed loss are in it as they are in
  training, with last.npz's weights;
- translate: a sentence's pieces, the beam search as a tree, and the attention of
  every layer and head, computed by the same `translate` the CLI uses, with best.npz
  (as `python -m models translate` does);
- training: the run's metrics.jsonl and its list of checkpoints, sent again whenever
  they change (server-sent events), and the attention of one sentence at each kept
  checkpoint;
- a guided tour of the step (explore_tour.py).
Live means live: each view reads its checkpoint as it is on disk now (explore_files.py
loads a file again whenever it changed) and says which checkpoint and step it shows.
A run that has no checkpoint yet (before its first validation) can be opened at
once: those views say they wait for it, and fill in when it appears.
"""
from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx.inspect import attention_maps
from tinygrad_tx.inspect.explorer import (BadRequest, Explorer, SavedPage, StepRecord, Waiting, step_answers,
                                          step_endpoints)
from tinygrad_tx.inspect.explorer.export import check_page_path, write_page
from tinygrad_tx.inspect.explorer.params import text, whole

from .corpus import normalise
from ..text.data import BOS_ID, EOS, EOS_ID, PAD_ID, encode_pairs, pad
from ..transformer import Transformer
from .evaluation import MAX_BEAM, InputTooLong, encode_sources, translate
from .explore_files import CHECKPOINTS, Checkpoints, Damaged, RunFiles, read_run_files, stamp
from .explore_labels import predictions, token_labels
from .explore_tour import tour, training_mode, update_stops
from .explore_update import UpdateViews
from .layer_stats import STATS
from .run import MEMBERS, RunError, chosen_decoding, members, read_metrics
from ..beam_tree import BeamTree
from ..ensemble import Ensemble

STEP_PAIRS = 4
"""The batch of the step graph: this many validation pairs (a small graph a learner can follow)."""
POLL_S = 0.5
"""How often the training stream looks at metrics.jsonl and the checkpoints."""
KEEP_ALIVE_S = 10.0


def open_explorer(directory: str | Path, device: str = "cpu") -> Explorer:
    """The explorer of a run directory; a missing or damaged run raises RunError before anything is served.
    A run with no checkpoint yet is served at once."""
    views = RunViews(read_run_files(Path(directory)), device)
    views._decoding()  # a damaged decoding (a beam out of range, NaN) is refused here, as evaluate refuses it
    views.prepare()
    return Explorer(get={**step_endpoints(views.record), "/api/info": views.info, "/api/metrics": views.metrics,
                         "/api/checkpoint_attention": views.checkpoint_attention, "/api/tour": views.tour,
                         "/api/update": views.update, "/api/update_param": views.update_param,
                         "/api/layer_stats": views.layer_stats},
                    post={"/api/translate": views.translate},
                    streams={"/api/events/metrics": views.metric_events})


def save_page(directory: str | Path, path: str | Path, device: str = "cpu") -> SavedPage:
    """`explore RUN_DIR --html FILE`: the page as one file that needs no server (export.py). The path is
    checked before any work; a run with no checkpoint yet has nothing to save (RunError)."""
    check_page_path(path)
    views = RunViews(read_run_files(Path(directory)), device)
    try:
        answers = views.answers()
    except Damaged as e:
        raise RunError(f"nothing to save: {e}") from None
    except Waiting as e:
        raise RunError(f"nothing to save yet: {e}") from None
    return write_page(answers, path)


class RunViews(UpdateViews):
    """The endpoints of one run (each takes the request's parameters and returns JSON); those of
    the update and of the statistics over training are `UpdateViews`'."""

    def __init__(self, files: RunFiles, device: str = "cpu"):
        self.files = files
        self.checkpoints = Checkpoints(files, device)
        self._record: tuple[dict, StepRecord] | None = None
        self._update = None  # (the record's about, its UpdateRecord), made when first asked for
        self._stats_cache: dict = {}  # the statistics of the run's snapshots, while they stay as they are

    def _decoding(self) -> tuple[int, float]:
        """The beam width and length penalty the run chose on its validation set (the defaults
        until training ends)."""
        return chosen_decoding(self.files.directory, self.files.settings)

    def info(self, params: dict) -> dict:
        settings = self.files.settings.get("settings", {})
        what = settings.get("task") or settings.get("data") or "?"
        return {"title": f"{self.files.directory.name}: {what}",
                "views": ["graph", "update", "translate", "training", "compiled"],
                "example": self.files.valid[0][0], "beam": self._decoding()[0], "max_beam": MAX_BEAM,
                "live": True, "tour": True}

    def prepare(self) -> None:
        """Make the step graph and the optimizer's update now, before the address is printed, so that
        the page's first view and every step of its walk, the update's two included, answer at once
        (an M model's take seconds to make). A run with no checkpoint yet, or a damaged one, is
        served as it is: its views say so when asked."""
        try:
            self.update_record()  # (after the step graph's record, which it needs)
        except Waiting:
            pass

    # -- the step graph ---------------------------------------------------------------------
    def record(self) -> StepRecord:
        """The step graph with last.npz's weights as they are now (made again when the file changed)."""
        model, about = self.checkpoints.get("last.npz", "the graph of a training step")
        if self._record is None or self._record[0] is not about:
            self.batch = batch = self._batch()
            # a partial, not a closure: no frame of the explorer's between the loss line and the model's
            record = StepRecord(partial(self._training_loss, model, *batch), ())
            record.labels = token_labels(record, batch, self.files)  # heat-maps read as text (explore_labels.py)
            record.readings = predictions(record, batch, self.files)
            record.about = {**about, "mode": training_mode(model)}
            self.model = model
            self._record = (about, record)
        return self._record[1]

    def _batch(self) -> tuple[np.ndarray, np.ndarray, tx.Tensor]:
        """The first validation pairs as source ids, decoder input ids and target ids (B, S), (B, T), (B, T)."""
        files = self.files
        pairs = [(s, refs[0]) for s, refs in files.valid[:STEP_PAIRS]]
        src_ids, tgt_ids = encode_pairs(pairs, files.src_vocab, files.tgt_vocab, files.tokenizers)
        targets = tx.Tensor(pad([t + [EOS_ID] for t in tgt_ids]), name="target ids")
        return pad(src_ids), pad([[BOS_ID] + t for t in tgt_ids]), targets

    def _training_loss(self, model: Transformer, src: np.ndarray, tgt_in: np.ndarray, tgt_out: tx.Tensor) -> tx.Tensor:
        """The loss of one training step (training mode, dropout with a fixed seed)."""
        smoothing = self.files.settings["settings"].get("label_smoothing", 0.0)
        tx.manual_seed(0)
        model.train()
        try:
            logits = model(tx.Tensor(src, name="source ids"), tx.Tensor(tgt_in, name="decoder input ids"))  # (B, T, V)
            return F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=smoothing)
        finally:
            model.eval()

    def tour(self, params: dict) -> dict:
        try:
            record = self.record()
            update = self.update_record()
        except Waiting as e:
            return {"waiting": str(e)}
        stops = tour(record, self.files, self.batch)
        return {"stops": stops + update_stops(update.summary(self._parameter_nodes()), len(stops)),
                "shows": record.about}

    # -- translate -------------------------------------------------------------------------
    def translate(self, params: dict) -> dict:
        """A sentence's pieces, its translation, the beam-search tree and every attention map; or,
        for a sentence the model cannot take, {"problem": why} (a fine request, with a sad answer)."""
        sentence = text(params.get("sentence"), "sentence")
        beam = whole(params.get("beam", self._decoding()[0]), "beam", 1, MAX_BEAM)
        try:
            model, about = self.checkpoints.get("best.npz", "translation")
            decoder, about = self._ensemble(model, about)
        except Waiting as e:
            return {"waiting": str(e)}
        try:
            return {**self._translate(model, _sentence(sentence), beam, decoder), "shows": about}
        except (Untranslatable, InputTooLong) as e:
            return {"problem": str(e), "shows": about}

    def _ensemble(self, model: Transformer, about: dict) -> tuple[Transformer | Ensemble, dict]:
        """What translates, as `translate` does: the model, or for a run of `train --members N` the
        ensemble of every model's best.npz (the attention maps stay the first model's)."""
        n = members(self.files.directory, self.files.settings)
        if n == 1:
            return model, about
        others = []
        for number in range(2, n + 1):
            name = f"{MEMBERS}/{number}/best.npz"
            missing = (f"{name} is not there: the ensemble's translation needs the best.npz of each of its {n} "
                       "models (each writes its own at its validations)")  # the first has one: not "no checkpoint yet"
            others.append(self.checkpoints.get(name, "the ensemble's translation", missing)[0])
        return Ensemble([model, *others]), {**about, "checkpoint": f"best.npz of each of {n} models (attention: the "
                                                                   f"first's)",
                                            "attention": f"the first of the ensemble's {n} models"}

    def _translate(self, model: Transformer, sentence: str, beam: int,
                   decoder: Transformer | Ensemble | None = None) -> dict:
        """`model`'s translation of `sentence` (or `decoder`'s: an ensemble's) with its beam tree, and
        `model`'s attention maps."""
        files, (src_tok, tgt_tok) = self.files, self.files.tokenizers
        pieces = self._pieces(sentence)
        tree = BeamTree()
        started = time.perf_counter()
        output = translate(decoder or model, [sentence], files.src_vocab, files.tgt_vocab, files.tokenizers, beam,
                           record=tree, length_penalty=self._decoding()[1])[0]
        seconds = time.perf_counter() - started
        out_pieces = tgt_tok.encode(output)
        out_ids = files.tgt_vocab.encode(out_pieces)
        nodes = tree.nodes()
        for node in nodes:
            node["piece"] = files.tgt_vocab.tokens[node["token"]]
        maps = attention(model, encode_sources([sentence], files.src_vocab, src_tok, model.config.max_len),
                         out_ids, [p["piece"] for p in pieces], out_pieces)
        return {"sentence": sentence, "beam": beam, "output": output, "seconds": seconds, "pieces": pieces,
                "output_pieces": out_pieces + [EOS], "tree": nodes, "winner": tree.path(out_ids + [EOS_ID]),
                "attention": maps, "alignment": np.mean(last_cross(maps)["heads"], axis=0).tolist()}

    def _pieces(self, sentence: str) -> list[dict]:
        """The pieces the model reads, each with its id and whether training ever saw it; a sentence
        with no piece it knows is Untranslatable."""
        files = self.files
        pieces = files.tokenizers[0].encode(sentence)
        if not pieces:
            raise Untranslatable("the sentence has no tokens: type something to translate")
        known = [p in files.src_vocab.ids for p in pieces]
        if not any(known):
            raise Untranslatable(f"none of its pieces ({', '.join(map(repr, pieces[:8]))}) occurred in training: "
                                 "the model would read only <unk>")
        return [{"piece": p, "id": i, "known": k} for p, i, k in zip(pieces, files.src_vocab.encode(pieces), known)]

    # -- training --------------------------------------------------------------------------
    def metrics(self, params: dict) -> dict:
        return {"records": read_metrics(self.files.directory / "metrics.jsonl"),
                "checkpoints": self.checkpoints.names()}

    def metric_events(self, params: dict) -> Iterator[dict]:
        """The run's news: the records of metrics.jsonl as they are appended, the list of kept
        checkpoints and a version of last.npz, best.npz and layer_stats.jsonl (which change when
        `train` writes them again): all of it first, then whenever something changed (and an empty event every
        KEEP_ALIVE_S, by which the server learns that a tab was closed)."""
        path, sent, size, seen, quiet = self.files.directory / "metrics.jsonl", 0, -1, None, 0.0
        while True:
            now, kept = (path.stat().st_size if path.is_file() else 0), self.checkpoints.names()
            versions = {name: "-".join(map(str, stamp(self.files.directory / name) or ()))
                        for name in (*CHECKPOINTS, STATS)}
            if now != size or (kept, versions) != seen or quiet >= KEEP_ALIVE_S:
                records = read_metrics(path) if now != size else []
                if len(records) < sent and now != size:  # rewritten shorter (a resumed run): start again
                    sent = 0
                yield {"from": sent, "records": records[sent:], "checkpoints": kept, "versions": versions}
                sent, size, seen, quiet = max(sent, len(records)), now, (kept, versions), 0.0
            time.sleep(POLL_S)
            quiet += POLL_S

    def checkpoint_attention(self, params: dict) -> dict:
        """The cross-attention (last decoder layer) of one sentence under a kept checkpoint."""
        name, kept = params.get("name"), self.checkpoints.names()
        if name not in kept:
            raise BadRequest(f"checkpoint must be one this run kept: {', '.join(kept) or 'none yet'}")
        sentence = text(params.get("sentence"), "sentence")
        try:
            model, about = self.checkpoints.get(name, "its attention")
        except Waiting as e:
            return {"waiting": str(e)}
        files, (src_tok, tgt_tok) = self.files, self.files.tokenizers
        try:
            sentence = _sentence(sentence)
            pieces = self._pieces(sentence)
            output = translate(model, [sentence], files.src_vocab, files.tgt_vocab, files.tokenizers, 1)[0]
            src = encode_sources([sentence], files.src_vocab, src_tok, model.config.max_len)
        except (Untranslatable, InputTooLong) as e:
            return {"problem": str(e), "shows": about}
        out_pieces = tgt_tok.encode(output)
        maps = attention(model, src, files.tgt_vocab.encode(out_pieces), [p["piece"] for p in pieces], out_pieces)
        return {"name": name, "output": output, "pieces": pieces, "map": last_cross(maps), "shows": about}

    # -- a page to keep ----------------------------------------------------------------------
    def answers(self) -> dict:
        """Every answer a saved page holds: the step views, the tour, the translation of the run's
        example sentence, the curves and that sentence's attention at each kept checkpoint."""
        info = self.info({})
        answers = {**step_answers(self.record(), info["title"]), "/api/info": {**info, "live": False},
                   "/api/tour": self.tour({}), "/api/metrics": self.metrics({}), "/api/update": self.update({}),
                   "/api/layer_stats": self.layer_stats({})}
        for row in answers["/api/update"].get("params", []):
            answers[f"/api/update_param?{_query(name=row['name'])}"] = self.update_param({"name": row["name"]})
        request = {"sentence": info["example"], "beam": info["beam"]}
        answers["POST /api/translate " + _key(request)] = self.translate(request)
        for name in answers["/api/metrics"]["checkpoints"]:
            answers[f"/api/checkpoint_attention?{_query(name=name, sentence=info['example'])}"] = (
                self.checkpoint_attention({"name": name, "sentence": info["example"]}))
        return answers


def _key(body: dict) -> str:
    """A POST body as the page's JSON.stringify writes it (the key of a saved answer)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _query(**params: str) -> str:
    """A query string as the page's encodeURIComponent writes it."""
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())


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


def _sentence(text: str) -> str:
    sentence = normalise(text)
    if not sentence:
        raise Untranslatable("the sentence is empty: type something to translate")
    if len(sentence) > 2000:
        raise Untranslatable(f"the sentence is {len(sentence)} characters long; the explorer takes at most 2000")
    return sentence
