"""A guided tour of one training step of the run's own model, for a first visit to the explorer.

About a dozen stops, from the tokens to the loss and back: embedding, positions, one
attention head, layer norm, the feed-forward, the decoder's causal attention and its
look at the source, the output scores, the loss; then backward through the loss, the
attention, the layer norm and into the embedding table. Each stop names a node of
the step graph (the page opens the boxes around it and shows it) and says what
happens there in a short paragraph written with the step's own values, in the spirit
of Transformer Explainer, but on the model you trained. A stop whose node the model
does not have (another layout) is left out.
"""
from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from tinygrad_tx import optim
from tinygrad_tx.inspect.explorer import StepRecord
from tinygrad_tx.inspect.explorer.words import signed

from ..text.data import PAD, PAD_ID


def tour(record: StepRecord, files: Any, batch: tuple) -> list[dict]:
    """The stops, in order: {"title", "node", "show" ("value" or "grad"), "phase", "text"}."""
    find = _finder(record)
    src, tgt_in, targets = batch
    host = record.to_host
    value = lambda nid: host(record.tensor(nid).data).astype(np.float64)  # noqa: E731
    grad = lambda nid: host(record.gradient(nid)).astype(np.float64)  # noqa: E731
    source = [files.src_vocab.tokens[i] for i in src[0] if files.src_vocab.tokens[i] != PAD]
    fed = [files.tgt_vocab.tokens[i] for i in tgt_in[0] if files.tgt_vocab.tokens[i] != PAD]
    stops = []

    def stop(title: str, nid: str | None, show: str, text: str, phase: str = "forward") -> None:
        if nid is not None:
            stops.append({"title": title, "node": nid, "show": show, "phase": phase, "text": text})

    embed = find("Embedding", "encoder.embed")
    if embed:
        v = value(embed)  # (B, S, d)
        stop("1. Tokens become vectors", embed, "value",
             f"The step trains on {v.shape[0]} sentence pairs at once, padded to {v.shape[1]} source pieces. "
             f"The first source is read as {len(source)} pieces ({' '.join(source)}), each an id into a vocabulary "
             f"of {len(files.src_vocab)} entries. Embedding looks up one row of a learned table per id: "
             f"“{source[0]}” becomes {_vector(v[0, 0])}, {v.shape[2]} numbers that training has been shaping.")
    positions = find("Add", "encoder.embed.positions")
    if positions:
        pe = next((i for i in record.nodes[positions]["inputs"] if record.nodes[i]["kind"] == "const"), None)
        added = value(pe) if pe else None
        stop("2. Where each piece stands", positions, "value",
             "Attention alone would not know word order, so a fixed pattern of sines and cosines, different at "
             "each position, is added to every vector" + (f": position 0 adds {_vector(added[0])}, position 1 "
                                                          f"{_vector(added[1])}" if added is not None else "") +
             ". The same piece at two places now has two different vectors.")
    attn = find("Attention", "encoder.layers.0.self_attn")
    if attn:
        p = host(record.saved_of(attn)["p"])[0, 0]  # (S, S): head 0 of the first pair
        looks = [f"“{source[i]}” looks most at “{source[j]}” ({p[i, j]:.2f})"
                 for i, j in enumerate(p.argmax(axis=-1)[:min(3, len(source))]) if j < len(source)]
        stop("3. One attention head", attn, "value",
             "Self-attention lets every position gather from every other: it scores each pair of positions by "
             "a dot product of a query and a key, turns each row of scores into weights that sum to 1 (softmax), "
             f"and adds up the values with those weights. In head 0, {'; '.join(looks)} (the weights are p, "
             "under “saved for backward”). Press “open into its parts” in the panel to step through scores, "
             "scale, mask, softmax and the weighted sum.")
    norm = find("LayerNorm", "encoder.layers.0.attn_res")
    if norm:
        before = value(record.nodes[norm]["inputs"][0])[0, 0]
        after = value(norm)[0, 0]
        stop("4. Add, then layer norm", norm, "value",
             "What attention found is added to what came in (the residual), and layer norm rescales each "
             f"position's vector: before it, position 0 has mean {before.mean():.2f} and spread {before.std():.2f}; "
             "after subtracting the mean, dividing by the spread and applying a learned scale and shift, "
             f"mean {after.mean():.2f} and spread {after.std():.2f}. This keeps the numbers in a range "
             "where training is stable.")
    ff = find("Relu", "encoder.layers.0.ff") or find("Gelu", "encoder.layers.0.ff")
    if ff:
        h = value(ff)  # (B, S, d_ff)
        zero = float((h == 0).mean()) * 100
        stop("5. The feed-forward network", ff, "value",
             f"Each position then goes through the same small network on its own: {h.shape[-1]} hidden units "
             f"from a linear layer, then {record.nodes[ff]['title']} ({zero:.0f}% of them are 0 here: those "
             "units stay silent for this piece), then a linear layer back to the model's width.")
    causal = find("Attention", "decoder.layers.0.self_attn")
    if causal:
        p = host(record.saved_of(causal)["p"])[0, 0]  # (T, T)
        above = float(np.triu(p, 1).max()) if p.shape[0] > 1 else 0.0
        stop("6. The decoder reads what it has written", causal, "value",
             f"The decoder reads the target shifted right, <bos> first ({' '.join(fed)}), and its self-attention "
             "is causal: position i may look only at positions up to i, so it cannot peek at the piece it must "
             f"predict. The largest weight above the diagonal of head 0 is {above:.2g}.")
    cross = find("Attention", "decoder.layers.0.cross_attn")
    if cross:
        p = host(record.saved_of(cross)["p"])[0, 0]  # (T, S)
        i = min(1, len(fed) - 1)
        j = int(p[i].argmax())
        stop("7. Looking at the source", cross, "value",
             "Cross-attention is where translation happens: each target position sends a query to the encoder's "
             f"output for every source piece. After reading “{fed[i]}”, head 0 looks most at “"
             f"{source[j] if j < len(source) else PAD}” ({p[i, j]:.2f}).")
    loss = record.root
    logits = record.nodes[loss]["inputs"][0] if record.nodes[loss]["title"] == "CrossEntropy" else None
    if logits:
        z = value(logits)[0]  # (T, V)
        prob = np.exp(z - z.max(axis=-1, keepdims=True))
        prob /= prob.sum(axis=-1, keepdims=True)
        right = int(host(targets.data)[0, 0])
        top = int(prob[0].argmax())
        choice = ("which is also the model's first choice" if top == right else
                  f"and the model's first choice is “{files.tgt_vocab.tokens[top]}” ({prob[0, top]:.2f})")
        stop("8. A score for every piece", logits, "value",
             f"A final linear layer turns each position's vector into {z.shape[-1]} scores, one per target piece; "
             f"softmax makes them probabilities. At position 0 the right piece “{files.tgt_vocab.tokens[right]}” "
             f"gets p = {prob[0, right]:.2f}, {choice}.")
        t = host(targets.data)
        real = int((t != PAD_ID).sum())
        smoothing = files.settings["settings"].get("label_smoothing", 0.0)
        stop("9. The loss", loss, "value",
             f"The loss is the mean over the {real} real target pieces of −log p(right piece), padding left out"
             + (f", with label smoothing {smoothing}: a small part of each target is spread over every piece"
                if smoothing else "") + f". Here it is {value(loss).item():.3f}; a model guessing uniformly would "
             f"score log {z.shape[-1]} = {math.log(z.shape[-1]):.2f}.")
        g = grad(logits)[0, 0]  # (V,)
        wrong = int(np.argmax(np.where(np.arange(len(g)) == right, -np.inf, g)))  # the wrong piece with the most
        aim = 1 - smoothing + smoothing / len(g)  # the right piece's target probability, smoothed
        padded = real < t.size
        stop("10. Backward starts at the loss", logits, "grad",
             "Backward asks how the loss changes with every number that made it, walking the graph from the loss "
             "back to the weights. The loss sends the scores (softmax − target) / n: at position 0 "
             + score_gradients(g[right], g[wrong], prob[0, right], aim, files.tgt_vocab.tokens[wrong])
             + (" Padded positions get exactly 0." if padded else ""), "backward")
    if cross and record.gradient(cross) is not None:
        stop("11. Back through attention", cross, "grad",
             f"The gradient reaching cross-attention's output (norm {np.linalg.norm(grad(cross)):.3g}) is split "
             "by its backward into shares for the queries (the decoder's side) and for the keys and values: "
             "the encoder learns only through these. Open it into its parts to see the softmax's backward.",
             "backward")
    if norm and record.gradient(norm) is not None:
        stop("12. Back through layer norm", norm, "grad",
             f"Layer norm's backward (norm of the gradient arriving: {np.linalg.norm(grad(norm)):.3g}) removes "
             "the part of the gradient that would only shift or stretch a position's vector, which the "
             "normalisation undoes anyway.", "backward")
    table = next((nid for nid, n in record.nodes.items() if n["title"] == "encoder.embed.tokens.weight"), None)
    if table and record.tensor(table).grad is not None:
        g = host(record.tensor(table).grad.data)
        used = int((np.abs(g).sum(axis=1) > 0).sum())
        stop("13. Into the embedding table", table, "grad",
             f"Only the rows of pieces that occur in the batch receive a gradient: {used} of {g.shape[0]} rows "
             "are not zero. Every weight now has its gradient: next, the optimizer moves them.", "backward")
    return stops


def score_gradients(right: float, wrong: float, p: float, aim: float, wrong_piece: str) -> str:
    """What the loss sends the right piece's score and the wrong piece's, the words following each sign:
    with label smoothing the right piece's gradient is positive once its p is above its target `aim`."""
    return (f"the right piece's score gets {right:+.3g} "
            + signed(right, f"(positive: its p = {p:.4g} is already above its target {aim:.4g}, so lowering it "
                            "lowers the loss)", "(negative: raising it lowers the loss)",
                     "(zero: the loss is flat there)")
            + f" and the wrong piece “{wrong_piece}” {wrong:+.3g} "
            + signed(wrong, "(positive: lowering it lowers the loss).", "(negative: raising it lowers the loss).",
                     "(zero: the loss is flat there)."))


def _finder(record: StepRecord):
    """find(op title, module call name prefix) -> the id of the first such op in creation order (or None)."""
    names = {c["id"]: c["name"] for c in record.calls.values()}
    ops = sorted((n for n in record.nodes.values() if n["kind"] == "op"), key=lambda n: -n["number"])

    def find(title: str, call: str) -> str | None:
        return next((n["id"] for n in ops if n["title"] == title
                     and any(names[c].startswith(call) for c in n["scope"])), None)
    return find


def _vector(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in v[:4]) + (", …]" if len(v) > 4 else "]")


# -- the update: the step's end ---------------------------------------------------------------

def training_mode(model: Any) -> str:
    """How the step graph's forward ran, in words: dropout's rates as the model has them."""
    cfg = model.config
    rates = {"dropout": cfg.dropout, "attention": cfg.attention_p, "feed-forward": cfg.activation_p}
    if not any(rates.values()):
        return "training mode: no dropout (its rates are 0)"
    return "training mode: " + ", ".join(f"{name} {p:g}" for name, p in rates.items()) + ", seeded"


def optimizer_rule(name: str) -> str:
    """The update rule of optimizer `name`, as its class's docstring states it."""
    cls = getattr(optim, name, None)
    return inspect.cleandoc(cls.__doc__) if isinstance(cls, type) and cls.__doc__ else ""


def update_stops(update: dict, before: int) -> list[dict]:
    """The tour's last stop: the optimizer's step (`update`: `UpdateRecord.summary`), after `before`
    stops; it shows the parameter the step moved most against its size."""
    moved = [p for p in update["params"] if p["ratio"] is not None]
    if not moved:
        return []
    most, least = max(moved, key=lambda p: p["ratio"]), min(moved, key=lambda p: p["ratio"])
    memory = (f"its running means of each weight's gradients (m) and of their squares (v), saved after "
              f"{update['t_saved']} steps, take in this gradient, and " if update["optimizer"].startswith("Adam")
              else "")
    moves = (f"Against its own size, {most['name']} moves most (‖Δw‖/‖w‖ = {most['ratio']:.2g}) and "
             f"{least['name']} least ({least['ratio']:.2g})." if most["ratio"] > 0 else
             "No weight moves: Δw is 0 everywhere.")
    return [{"title": f"{before + 1}. The update", "node": most["node"], "param": most["name"], "show": "update",
             "phase": "update",
             "text": f"Backward is done; the step ends with the optimizer. {update['words']['clip']} "
                     f"{update['optimizer']}: {memory}every weight moves at the learning rate {update['lr']:.3g}. "
                     f"{moves} {update['words']['loss']} That is one step of training: the run repeats it for "
                     "every batch."}]
