"""Arrays of a translation step read as text: labels for their heat-maps, the prediction beside the target.

- rows of an array (B, ..., L, x) of the batch: the first pair's pieces at each position;
- columns of the output scores (the loss's input, every array of the module call that
  made it, and that call's weights, whose last axis is the target vocabulary): the
  target pieces they score;
- rows of an embedding table: the pieces of the vocabulary its ids come from (the
  source's or the target's, told by the ids the step looked up);
- for the loss and the scores, a table: at each position of the first pair, the piece
  fed in, the right piece, the model's choice, and their probabilities.
"""
from __future__ import annotations

import numpy as np

from tinygrad_tx.inspect.explorer import StepRecord

from ..text.data import PAD, PAD_ID
from .explore_files import RunFiles


def token_labels(record: StepRecord, batch: tuple, files: RunFiles):
    """labels(shape, node id) -> (row labels, column labels) for the heat-maps of `record`'s arrays."""
    positions = _position_labels(batch, files)
    src, tgt_in, _ = batch
    source, target = files.src_vocab.tokens, files.tgt_vocab.tokens
    rows: dict[str, list[str]] = {}
    for n in record.nodes.values():
        if n["title"] == "Embedding":  # inputs: the table, the ids
            table, ids = n["inputs"][0], record.to_host(record.tensor(n["inputs"][1]).data)
            vocab = source if np.array_equal(ids, src) else target if np.array_equal(ids, tgt_in) else None
            if vocab is not None:
                rows[table] = vocab
    columns = dict.fromkeys(_scores(record), target)

    def labels(shape: tuple, nid: str | None = None) -> tuple:
        return rows.get(nid) or positions(shape), columns.get(nid)
    return labels


def _scores(record: StepRecord) -> set[str]:
    """The output scores' nodes: the loss's input, the ops of the module call that made it, their weights."""
    root = record.nodes[record.root]
    if root["title"] != "CrossEntropy":
        return set()
    logits = record.nodes[root["inputs"][0]]
    call = logits["scope"][-1] if logits["scope"] else None
    found = {logits["id"]}
    for n in record.nodes.values():
        if call is not None and n["kind"] == "op" and n["scope"] and n["scope"][-1] == call:
            found.add(n["id"])
            found.update(i for i in n["inputs"] if record.nodes[i]["kind"] == "leaf")
    return found


def _position_labels(batch: tuple, files: RunFiles):
    """Row labels for an array (B, ..., L, x) of this batch whose L is the source length S or the
    target length T: the pieces of the first pair at each position (<pad> where it is padding).
    Where S == T the two cannot be told apart by shape: the rows are then numbered, and marked
    <pad> where both sides are padding."""
    src, tgt_in, _ = batch
    batch_size, (S, T) = len(src), (src.shape[1], tgt_in.shape[1])
    source = [files.src_vocab.tokens[i] for i in src[0]]
    target = [files.tgt_vocab.tokens[i] for i in tgt_in[0]]
    by_length = {S: source, T: target} if S != T else {
        S: [PAD if a == b == PAD else str(i) for i, (a, b) in enumerate(zip(source, target))]}

    def labels(shape: tuple) -> list[str] | None:
        return by_length.get(shape[-2]) if len(shape) >= 3 and shape[0] == batch_size else None
    return labels


def predictions(record: StepRecord, batch: tuple, files: RunFiles) -> dict[str, dict]:
    """The prediction beside the target at each position of the first pair, as a table the page shows
    with the loss and with the scores (by node id)."""
    root = record.nodes[record.root]
    if root["title"] != "CrossEntropy":
        return {}
    _, tgt_in, targets = batch
    targets = record.to_host(targets.data)  # (B, T)
    right = targets[0]  # (T,)
    z = record.to_host(record.tensor(root["inputs"][0]).data).astype(np.float64)
    z = z.reshape(*targets.shape, z.shape[-1])[0]  # (T, V): the first pair's scores
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    pieces = files.tgt_vocab.tokens
    rows = []
    for t in range(len(right)):
        if right[t] == PAD_ID:
            continue
        best = int(p[t].argmax())
        rows.append([t, pieces[tgt_in[0, t]], pieces[right[t]], pieces[best], round(float(p[t, right[t]]), 4),
                     round(float(p[t, best]), 4), "✓" if best == right[t] else "✗"])
    correct = sum(r[-1] == "✓" for r in rows)
    table = {"title": f"the first pair, position by position: the model's choice beside the right piece "
                      f"({correct} of {len(rows)} right)",
             "columns": ["position", "fed in", "right piece", "model's choice", "p(right)", "p(choice)", ""],
             "rows": rows}
    return {record.root: table, root["inputs"][0]: table}
