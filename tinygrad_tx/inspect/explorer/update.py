"""The optimizer's update of one step, as the optimizer itself makes it, for the explorer's update view.

`UpdateRecord(loss_of, named, optimizer, clip_norm)` takes one whole training step on
tensors made for it (a copy of the model's weights, an optimizer that loaded the saved
state): the loss, backward, the trainer's clipping (`optim.clip_grad_norm`) and the
optimizer's own `step()`. It keeps, for each parameter, the weight before, the gradient
as the optimizer received it, the optimizer's state before and after (Adam's m and v),
and Δw = w_after − w_before; then the loss again on the same inputs (`loss_of` draws the
same dropout mask each call). Nothing here restates an update rule: every number after
the step is read off what `step()` left behind.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ... import Tensor, no_grad
from ...optim import Optimizer, clip_grad_norm
from .arrays import heat, norm, summary
from .params import BadRequest
from .words import signed


class UpdateRecord:
    """One optimizer step on `named` (name, parameter) pairs, which `optimizer` updates."""

    def __init__(self, loss_of: Callable[[], Tensor], named: list[tuple[str, Tensor]], optimizer: Optimizer,
                 clip_norm: float = 0.0):
        index = {id(p): i for i, p in enumerate(optimizer.params)}
        missing = [name for name, p in named if id(p) not in index]
        if missing:
            raise ValueError(f"the optimizer does not update {', '.join(missing[:3])}")
        self.named = named
        saved = optimizer.state_dict()  # host copies: the state as loaded, before the step
        self.optimizer, self.hyper, self.t_saved = saved["optimizer"], saved["hyperparameters"], saved["t"]
        self.lr = float(optimizer.lr)
        self.w_before = {name: p.numpy() for name, p in named}
        self.state_before = {name: saved["state"].get(str(index[id(p)]), {}) for name, p in named}
        optimizer.zero_grad()
        loss = loss_of()
        loss.backward()
        self.loss_before = float(loss.item())
        self.g_raw = {name: _host(p.grad) for name, p in named}
        total = clip_grad_norm([p for _, p in named], clip_norm) if clip_norm else None
        self.g = {name: _host(p.grad) for name, p in named}  # what step() reads
        self.g_norm = {name: None if g is None else norm(g) for name, g in self.g.items()}
        self.clip = None
        if total is not None:
            after = float(np.sqrt(sum(n * n for n in self.g_norm.values() if n is not None)))
            clipped = total > clip_norm  # clip_grad_norm's own rule: then max_norm / (total + 1e-6) < 1
            self.clip = {"max_norm": float(clip_norm), "norm": float(total), "norm_after": after,
                         "scale": after / total if clipped else 1.0}  # not the ratio of two sums of another rounding
        optimizer.step()
        state = optimizer.state_dict()
        self.t = state["t"]
        self.state_after = {name: state["state"].get(str(index[id(p)]), {}) for name, p in named}
        self.dw = {name: p.numpy() - self.w_before[name] for name, p in named}
        with no_grad():
            self.loss_after = float(loss_of().item())
        self.rows = self._rows()

    def summary(self, nodes: dict[str, str] | None = None) -> dict:
        """The step in numbers: the optimizer and its settings, the learning rate, the clipping, the
        loss before and after, and per parameter the norms of w, its gradient and Δw, and ‖Δw‖/‖w‖
        (`nodes`: the graph node of each parameter, by name, for the page's links)."""
        rows = [{**row, "node": (nodes or {}).get(row["name"])} for row in self.rows]
        hyper = {k: v for k, v in self.hyper.items() if k not in ("lr", "no_decay")}
        return {"optimizer": self.optimizer, "hyperparameters": hyper, "lr": self.lr, "t_saved": self.t_saved,
                "t": self.t, "clip": self.clip, "loss_before": self.loss_before, "loss_after": self.loss_after,
                "params": rows, "words": {"clip": clip_words(self.clip),
                                          "loss": loss_words(self.loss_before, self.loss_after)}}

    def _rows(self) -> list[dict]:
        """Each parameter's norms (made once, with the step: a big model's take a walk step's time, and
        the walk's last two steps and the update view each ask for them)."""
        rows = []
        for name, _ in self.named:
            w, dw = self.w_before[name], self.dw[name]
            w_norm, dw_norm = norm(w), norm(dw)
            rows.append({"name": name, "shape": list(w.shape), "w_norm": w_norm, "g_norm": self.g_norm[name],
                         "g_raw_norm": None if self.g_raw[name] is None else norm(self.g_raw[name]),
                         "dw_norm": dw_norm, "ratio": dw_norm / w_norm if w_norm else None,
                         "state": sorted(self.state_after[name])})
        return rows

    def parameter(self, name: str) -> dict:
        """One parameter's arrays (statistics and heat-map each): the weight before the step, the
        gradient the optimizer got, its state as saved and after the step, and Δw; and how often Δw
        went against the gradient's sign."""
        if name not in self.w_before:
            raise BadRequest(f"no parameter {name[:60]!r} in this model")
        show = lambda a: {**summary(a), "heat": heat(a)}  # noqa: E731
        w, g, dw = self.w_before[name], self.g[name], self.dw[name]
        moved = (dw != 0) & (g != 0) if g is not None else np.zeros(dw.shape, bool)
        against = int((np.sign(dw) == -np.sign(g))[moved].sum()) if g is not None else 0
        return {"name": name, "w": show(w), "grad": None if g is None else show(g), "dw": show(dw),
                "saved": {k: show(np.asarray(v)) for k, v in sorted(self.state_before[name].items())},
                "after": {k: summary(np.asarray(v)) for k, v in sorted(self.state_after[name].items())},
                "words": against_words(against, int(moved.sum()), int(dw.size), g is not None)}


def clip_words(clip: dict | None) -> str:
    """What the clipping did, in words that follow its numbers."""
    if clip is None:
        return "The run does not clip its gradients: the optimizer gets them as backward left them."
    if clip["norm"] > clip["max_norm"]:
        return (f"The gradients' global norm is {clip['norm']:.3g}, over the bound {clip['max_norm']:g}, so every "
                f"gradient is scaled by {clip['scale']:.3g} (to a global norm of {clip['norm_after']:.3g}).")
    return (f"The gradients' global norm is {clip['norm']:.3g}, within the bound {clip['max_norm']:g}, so they "
            "are used as they are.")


def loss_words(before: float, after: float) -> str:
    """How the loss on the step's own batch changed, in words that follow the sign."""
    change, goes = after - before, f"On the same batch the loss goes from {before:.4f} to {after:.4f}"
    return signed(change, f"{goes}: up by {change:.3g}, so this step went too far for this batch.",
                  f"{goes}: down by {-change:.3g}.", f"On the same batch the loss stays at {before:.4f}: the step did "
                  "not change it.")


def against_words(against: int, moved: int, size: int, has_grad: bool) -> str:
    """How often a parameter's Δw went against its gradient's sign, in words."""
    if not has_grad:
        return "No gradient reached it in this step."
    if not moved:
        return f"None of its {size} entries moved where its gradient is not zero."
    share = against / moved
    rest = ("" if against == moved else f"; at the other {moved - against} the optimizer's memory of earlier "
            "gradients (momentum) outweighed this one")
    return (f"Δw has the opposite sign of the gradient at {against} of the {moved} entries where both are not zero "
            f"({share:.0%}): a step goes down the slope{rest}.")


def _host(grad: Tensor | None) -> np.ndarray | None:
    return None if grad is None else grad.numpy()


def parameter_nodes(named: list[tuple[str, Tensor]], node_id: Callable[[Any], str]) -> dict[str, str]:
    """The graph node of each parameter that is in the graph, by name."""
    nodes = {}
    for name, p in named:
        try:
            nodes[name] = node_id(p)
        except KeyError:  # a parameter this step does not use
            continue
    return nodes
