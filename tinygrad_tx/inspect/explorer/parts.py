"""An attention node opened into its parts: the same computation in public tensor ops, walked backward.

The fused `Attention` op computes softmax(q kᵀ · scale, masked) · v in one step, and
its backward in one step too, so in the graph it is one opaque node. Here it is
written out again in the ops a learner knows, from the node's own inputs and params:

    scores = q @ kᵀ                     (..., Tq, Tk)
    scaled = scores * scale             scale = 1/√d
    masked = scaled.masked_fill(~keep, most negative float)
    weights = softmax(masked)           each row sums to 1 over the keys it may see
    out = weights @ v                   (..., Tq, d_v): the weighted sum of the values

(with the node's dropout mask, and a row with no key left set to zero, where the node
has them), and recorded as a graph of its own (`StepRecord`), whose backward starts
from the gradient the real walk brought to the node. The page draws and steps it like
the main graph, and shows the check that makes it more than a drawing: the parts give
the node's output, and q, k and v receive the gradients the fused op sent them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ... import Tensor, where
from .params import BadRequest
from .step import StepRecord

ROLES = ("kᵀ", "scores = q kᵀ", "scaled = scores · scale", "masked", "weights = softmax(masked)",
         "weights with no key left set to 0", "dropout", "out = weights @ v")


def attention_parts(record: StepRecord, nid: str) -> dict:
    """The parts of attention node `nid` of `record`: their graph, walk and the check against the node."""
    fn = record.function(nid)
    if type(fn).__name__ != "Attention":
        raise BadRequest(f"{record.name_of(nid)} is not an attention node: only attention opens into its parts")
    q, k, v = record.inputs_of(nid)
    params = record.sources.params.get(id(fn), {})
    drop = record.saved_of(nid).get("drop")
    keep = _keep(record.to_host, params, q.shape[-2], k.shape[-2])
    made: dict[str, Tensor] = {}

    def attention_from_parts(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        made[ROLES[0]] = kt = k.swapaxes(-1, -2)  # (..., d, Tk)
        made[ROLES[1]] = scores = q @ kt  # (..., Tq, Tk)
        made[ROLES[2]] = h = scores * params.get("scale", 1.0)
        if keep is not None:
            made[ROLES[3]] = h = h.masked_fill(Tensor(~keep, device=q.device), float(np.finfo(h.dtype).min))
        made[ROLES[4]] = h = h.softmax(axis=-1)
        if keep is not None and not keep.any(axis=-1).all():
            made[ROLES[5]] = h = where(Tensor(keep.any(axis=-1, keepdims=True), device=q.device), h, 0.0)
        if drop is not None:
            made[ROLES[6]] = h = h * Tensor(drop)
        made[ROLES[7]] = out = h @ v  # (..., Tq, d_v)
        return out

    leaves = [Tensor(a, requires_grad=True, name=name) for a, name in zip((q, k, v), "qkv")]
    parts = StepRecord(attention_from_parts, tuple(leaves), seed=Tensor(record.gradient(nid)), compiled=False,
                       labels=record.labels)
    roles = {parts.node_id(t): role for role, t in made.items()}
    parts.labels = _labels(record, roles, tuple(k.shape))
    fused = {send["input"]: a for send, a in record.sent_by(nid)}
    check = [{"what": "output", "max_abs_diff": _diff(parts.tensor(parts.root).data, record.tensor(nid).data,
                                                      record.to_host)}]
    for i, leaf in enumerate(leaves):
        if i in fused:
            check.append({"what": f"gradient of {leaf.name}", "max_abs_diff": _diff(leaf.grad.data, fused[i],
                                                                                     record.to_host)})
    return {"record": parts, "roles": roles, "check": check}


def _labels(record: StepRecord, roles: dict[str, str], k_shape: tuple):
    """Heat-map labels of the parts: rows as the main graph labels them (the queries' tokens), and
    the columns of the (..., Tq, Tk) parts and of kᵀ by the keys' tokens."""
    keys = record.labels(k_shape, None)[0]
    by_key = {nid for nid, role in roles.items() if role != ROLES[-1]}

    def labels(shape: tuple, nid: str | None) -> tuple:
        rows = None if roles.get(nid) == ROLES[0] else record.labels(shape, None)[0]
        return rows, keys if nid in by_key else None
    return labels


def _keep(to_host, params: dict, t_q: int, t_k: int) -> np.ndarray | None:
    """The keep-mask the node used: its mask and, if causal, query i sees keys up to its position
    i + (t_k - t_q) (with a key/value cache the queries are the last t_q positions)."""
    mask = params.get("mask")
    keep = None if mask is None else to_host(mask)
    if params.get("causal"):
        tri = np.tri(t_q, t_k, k=t_k - t_q, dtype=bool)
        keep = tri if keep is None else keep & tri
    return keep


def _diff(a: Any, b: Any, to_host) -> float:
    return float(np.max(np.abs(to_host(a).astype(np.float64) - to_host(b).astype(np.float64)), initial=0.0))
