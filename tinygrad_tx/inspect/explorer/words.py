"""One sentence in plain words for each step of the backward walk, beside the op's math.

`op_words(op)` says what an op's backward does *here*, with this step's numbers: how
many of a ReLU's inputs were positive, the range of a layer norm's σ, how many rows of
an embedding table receive a gradient. Generated words follow the values they describe:
a sign is never written, only computed (`signed`, `count_of`), so the text cannot say
"negative" of a number that is not.

`OpView` carries what a sentence may read: the op's title, its forward inputs, what it
saved, its keyword params, the gradient arriving and the gradients it sends (by input).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class OpView:
    """What one op step shows, as host (NumPy) arrays."""

    title: str
    shape: tuple  # its output's
    inputs: tuple = ()  # the arrays it read in forward, in order
    saved: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    grad: Any = None  # arriving: d root / d its output
    sent: dict = field(default_factory=dict)  # input index -> the gradient sent to it
    summed: dict = field(default_factory=dict)  # input index -> the shape a broadcast was summed back from


ORDINALS = ("first", "second", "third")


def signed(x: float, positive: str, negative: str, zero: str) -> str:
    """The words for x's sign: the only way a sentence here states one."""
    return positive if x > 0 else negative if x < 0 else zero


def count_of(k: int, n: int) -> str:
    """"all 36", "none of the 36", "30 of 36": how many of n."""
    return f"all {n}" if k == n and n > 1 else f"none of the {n}" if k == 0 else f"{k} of {n}"


def percent(k: float, n: float) -> str:
    return f"{100 * k / n:.0f}%" if n else "none"


def _n(shape: tuple) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _shape(s: tuple) -> str:
    return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"


def _broadcast(v: OpView) -> str:
    sums = [f"summed back from {_shape(tuple(s))} to input {k}'s shape" for k, s in sorted(v.summed.items())]
    return f" ({'; '.join(sums)})" if sums else ""


def _receivers(v: OpView) -> str:
    """"each input", or which one, when the others need no gradient (a constant)."""
    if len(v.sent) >= len(v.inputs) or not v.sent:
        return "each input"
    which = [ORDINALS[k] if k < len(ORDINALS) else f"input {k}" for k in sorted(v.sent)]
    return f"the {_list(which)} input alone (the other is a constant)"


def _cross_entropy(v: OpView) -> str:
    count, keep, target = v.saved.get("count"), v.saved.get("keep"), v.saved.get("target")
    g = v.sent.get(0)
    text = ("The loss starts the walk: it sends every score (softmax − target) / n, n = "
            f"{_fmt(float(count)) if count is not None else '?'} counted positions")
    eps = float(v.saved.get("eps") or 0.0)
    if eps:
        text += f", the target smoothed (1 − {eps:g} on the right piece, {eps:g} spread over every piece)"
    if g is None or target is None:
        return text + "."
    rows = np.arange(target.size)
    right = g.reshape(-1, g.shape[-1])[rows, target.reshape(-1)]  # (N,) the right piece's gradient
    if keep is not None:
        right = right[np.asarray(keep).reshape(-1)]
    neg, pos = int((right < 0).sum()), int((right > 0).sum())
    text += (f"; the right piece's score gets a negative gradient at {count_of(neg, right.size)} positions "
             "(raising it would lower the loss)")
    if pos:
        text += (f" and a positive one at {count_of(pos, right.size)}, where its probability is already above "
                 "its target")
    if keep is not None and not np.all(keep):
        text += "; padded positions get exactly 0"
    return text + "."


def _linear(v: OpView) -> str:
    rows = v.inputs[0].shape[0] if v.inputs else "?"
    text = ("The linear layer sends its input g·Wᵀ, and its weight xᵀ·g: each weight's gradient sums, over the "
            f"{rows} rows, the input that met it times the gradient at its output")
    return text + ("; the bias gets g summed over the rows." if 2 in v.sent else ".")


def _layer_norm(v: OpView) -> str:
    rstd = v.saved.get("rstd")
    spread = ""
    if rstd is not None:
        sigma = 1 / np.asarray(rstd, dtype=np.float64).reshape(-1)
        spread = f" (σ from {_fmt(sigma.min())} to {_fmt(sigma.max())} over its {sigma.size} positions)"
    return ("The layer norm passes the gradient back centred and rescaled by 1/σ of its input" + spread +
            ", with the part that would only shift or stretch a position's vector taken out; its scale and "
            "shift get g·x̂ and g summed over the positions.")


def _relu(v: OpView) -> str:
    x = v.inputs[0] if v.inputs else None
    if x is None:
        return "ReLU passes the gradient where its input was positive and sends 0 elsewhere."
    on = int((x > 0).sum())
    return (f"ReLU passes the gradient where its input was positive ({percent(on, x.size)} of its {x.size} "
            "values here) and sends 0 where it was not: those units were silent for this piece.")


def _embedding(v: OpView) -> str:
    weight = v.inputs[0] if v.inputs else None
    g = v.sent.get(0)
    if weight is None or g is None:
        return "The embedding adds each position's gradient into the table row of its id."
    used = int((np.abs(g).reshape(g.shape[0], -1).sum(axis=1) > 0).sum())
    return (f"The embedding adds each position's gradient into the table row of its id: {count_of(used, g.shape[0])} "
            "rows receive some (the ids in this batch); every other row gets 0.")


def _attention(v: OpView) -> str:
    norms = ", ".join(f"{name} {_fmt(float(np.linalg.norm(v.sent[k])))}" for k, name in enumerate("qkv") if k in v.sent)
    return ("Attention splits the gradient into shares for the queries, keys and values: the values get "
            "weightsᵀ·g, the queries and keys what the softmax's backward leaves, times each other"
            + (f" (norms: {norms})." if norms else "."))


def _dropout(v: OpView) -> str:
    keep = v.saved.get("scaled_keep")
    if keep is None:
        return "Dropout passes the gradient where a unit was kept, scaled, and 0 where it was dropped."
    kept = keep != 0
    scale = float(keep[kept].flat[0]) if kept.any() else 0.0
    return (f"Dropout passes the gradient where a unit was kept ({percent(int(kept.sum()), keep.size)} here), times "
            f"{_fmt(scale)} as in forward, and 0 where it was dropped.")


def _masked_fill(v: OpView) -> str:
    mask = v.saved.get("mask")
    k = int(np.asarray(mask).sum()) if mask is not None else None
    where = f" ({k} of {v.grad.size if v.grad is not None else '?'} cells)" if k is not None else ""
    return f"The mask stops the gradient at the cells it filled{where} and passes the others unchanged."


def _mul(v: OpView) -> str:
    scalars = [a for a in v.inputs if getattr(a, "size", 2) == 1]
    if len(v.inputs) == 2 and scalars:
        return f"A product with {_fmt(float(np.asarray(scalars[0]).ravel()[0]))}: the gradient is sent on times that number."
    return "A product sends each input the gradient times the other input" + _broadcast(v) + "."


def _reshape(v: OpView) -> str:
    old = tuple(v.inputs[0].shape) if v.inputs else None
    back = f" to {_shape(old)}" if old is not None else ""
    return (f"Only the layout changes: the same {_n(v.shape)} numbers read as {_shape(v.shape)}, so the gradient "
            f"is read back{back} unchanged.")


def _transpose(v: OpView) -> str:
    axes = v.saved.get("axes")
    which = f" {tuple(axes)}" if axes is not None else ""
    return f"The axes are permuted{which}: the gradient is permuted back, no number changes."


WORDS: dict[str, Callable[[OpView], str]] = {
    "CrossEntropy": _cross_entropy, "Linear": _linear, "LayerNorm": _layer_norm, "Relu": _relu,
    "Embedding": _embedding, "Attention": _attention, "Dropout": _dropout, "MaskedFill": _masked_fill,
    "Mul": _mul, "Reshape": _reshape, "Transpose": _transpose,
    "Add": lambda v: "An addition passes the gradient on unchanged to " + _receivers(v) + _broadcast(v) + ".",
    "Sub": lambda v: "A difference passes the gradient to its first input and its negative to the second"
                     + _broadcast(v) + ".",
    "Neg": lambda v: "Negation sends the gradient back with every sign flipped.",
    "Div": lambda v: "A quotient a / b sends a the gradient / b, and b −gradient·a / b²" + _broadcast(v) + ".",
    "MatMul": lambda v: "A product a @ b sends a the gradient @ bᵀ, and b aᵀ @ the gradient.",
    "Softmax": lambda v: ("For each row the softmax sends the weights times (the gradient minus its weighted mean), "
                          "so a row's gradients sum to 0."),
    "LogSoftmax": lambda v: "For each row: the gradient minus the softmax times the row's sum of the gradient.",
    "Exp": lambda v: "The exponential sends the gradient times its own output, eˣ.",
    "Log": lambda v: "The logarithm sends the gradient divided by its input.",
    "Sqrt": lambda v: "The square root sends the gradient divided by twice its output.",
    "Tanh": lambda v: "tanh sends the gradient times 1 − tanh², small where it saturated.",
    "Sigmoid": lambda v: "The sigmoid sends the gradient times σ·(1 − σ), small where it saturated.",
    "Gelu": lambda v: "GELU sends the gradient times its slope at each input (about 1 for large inputs, 0 far below 0).",
    "Abs": lambda v: "The absolute value sends the gradient times the sign of its input.",
    "PowScalar": lambda v: f"xᵏ sends the gradient times k·xᵏ⁻¹ (k = {v.saved.get('exponent', '?')}).",
    "Sum": lambda v: "A sum copies the gradient back to every element it added up.",
    "Max": lambda v: "A maximum sends the gradient to the element(s) that were largest, 0 to the others.",
    "Expand": lambda v: "A broadcast copy: the gradients of the copies are summed back to the original.",
    "Getitem": lambda v: "A slice puts the gradient back where its elements came from, 0 everywhere else.",
    "Cast": lambda v: "A change of number type: the gradient is converted back, its values unchanged.",
    "Cat": lambda v: "A concatenation hands each input the slice of the gradient that it filled.",
    "Where": lambda v: "A choice sends the gradient to the input each element was taken from, 0 to the other.",
}


def op_words(v: OpView) -> str:
    """The sentence of one op step (an op without its own words says so, and the math beside says the rest)."""
    words = WORDS.get(v.title)
    return words(v) if words else f"{v.title} sends each input its share of the gradient as its backward computes it."


def module_words(main: list[str], folded: list[str]) -> str:
    """The sentence of a module step: its ops' sentences, and the plumbing folded into them named."""
    text = main[0]
    for then in main[1:]:  # one sentence: "…; then the embedding adds…"
        text = text.rstrip(".") + "; then " + then[0].lower() + then[1:]
    if folded:
        kinds = sorted(set(folded), key=folded.index)
        counted = [f"{folded.count(k)} {k.lower()}{'s' if folded.count(k) > 1 else ''}" for k in kinds]
        text += f" The {_list(counted)} around it only move numbers: folded into this step."
    return text


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
