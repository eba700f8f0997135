"""The backward walk at the level a learner thinks: one step per module call.

The engine's walk visits every op, and most of a transformer's are plumbing: Reshape
and Transpose move numbers without changing them. Here the op-level walk (`backward.py`)
is grouped into *units*, each one step of the module-level walk:

- every op made inside a module call that calls no other module (an `nn.Linear`, an
  `nn.LayerNorm`, an embedding) belongs to that call: the Linear op and the reshapes
  around it are one step, "`out` (nn.Linear)";
- an op a bigger module makes itself (the residual's Add, attention's fused op), or one
  made outside any module (the loss), is a unit of its own, and the plumbing ops next to
  it in the same module are folded into it: the reshapes and transposes that split and
  merge attention's heads go with the Attention op they serve (the op they feed, or
  else the op that feeds them).

A unit's step says what arrives (the gradient at each of its outputs: an output is an
op whose result is used outside the unit, or the root) and what it sends (every
gradient an op of the unit sends out of it: to the module's input, to each of its
weights). Nothing is computed again: the arrays are the op-level walk's own, so the
two levels agree at every module boundary by construction, and the tests check both
against a plain backward and PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PLUMBING = frozenset({"Reshape", "Transpose", "Expand", "Getitem", "Cast"})
"""Ops that move, copy or view numbers without computing: folded into the op they serve."""


@dataclass(eq=False)
class ModuleStep:
    """One unit's turn in backward: which op steps it groups, what arrives and what it sends."""

    number: int
    name: str  # the module call's name ("decoder.layers.0.ff.linear2"), or the op's title outside modules
    kind: str  # "nn.Linear", "MultiHeadAttention · Attention", "op"
    call: str | None  # the page's id of the module call ("m7"), None outside modules
    ops: list[int] = field(default_factory=list)  # op steps (= node numbers), in the walk's order
    folded: list[int] = field(default_factory=list)  # those that are plumbing, folded into the others
    arrives: list[int] = field(default_factory=list)  # the op steps whose gradient arrives from outside
    sends: list[tuple[int, int]] = field(default_factory=list)  # (op step, index in its sends) leaving the unit

    def to_json(self, nodes: dict, steps: list, unit_of_node: dict) -> dict:
        """The step as the page reads it: names, shapes and, for each send, the module step it reaches."""
        def send(number: int, k: int) -> dict:
            s = steps[number - 1]
            route = s.sends[k]
            return {**route, "from": number, "shape": list(s.sent[k].shape),
                    "to_step": unit_of_node.get(route["to"]),
                    "kind": "weight" if nodes[route["to"]]["kind"] == "leaf" else "input"}
        return {"number": self.number, "name": self.name, "kind": self.kind, "call": self.call,
                "ops": self.ops, "folded": self.folded, "node": steps[self.main - 1].node,
                "nodes": [steps[n - 1].node for n in self.ops],
                "arrives": [{"node": steps[n - 1].node, "from": n, "shape": list(steps[n - 1].grad.shape)}
                            for n in self.arrives],
                "sends": [send(n, k) for n, k in self.sends]}

    @property
    def main(self) -> int:
        """The op step that does the work (the first one not folded; a unit of plumbing alone: its first)."""
        return next((n for n in self.ops if n not in self.folded), self.ops[0])


def module_steps(nodes: dict, calls: dict, steps: list) -> list[ModuleStep]:
    """The module-level walk of an op-level walk. `nodes`: the graph's nodes by id (with `title`,
    `kind`, `scope`, `inputs`); `calls`: the module calls by page id (with `name`, `kind`,
    `calls_modules`); `steps`: the op-level walk (`WalkStep`s, step k visits node op{k})."""
    users: dict[str, list[str]] = {}
    for nid, n in nodes.items():
        for i in n["inputs"]:
            users.setdefault(i, []).append(nid)

    def innermost(nid: str) -> str | None:
        scope = nodes[nid]["scope"]
        return scope[-1] if scope else None

    def leaf_call(nid: str) -> str | None:
        call = innermost(nid)
        return call if call is not None and not calls[call]["calls_modules"] else None

    def plumbing(nid: str) -> bool:
        return nodes[nid]["title"] in PLUMBING

    def served(nid: str, toward: dict[str, list[str]]) -> str | None:
        """The op a plumbing op serves along `toward` (users: the op it feeds; inputs: the op that
        feeds it), through other plumbing, in the same module and outside its leaf calls."""
        at = nid
        while plumbing(at):
            nxt = [u for u in toward(at) if nodes[u]["kind"] == "op"]
            if len(nxt) != 1 or innermost(nxt[0]) != innermost(nid) or leaf_call(nxt[0]):
                return None
            at = nxt[0]
        return at

    def unit(nid: str) -> tuple[str, str]:
        call = leaf_call(nid)
        if call is not None:
            return "call", call
        if plumbing(nid):
            to = served(nid, lambda u: users.get(u, [])) or served(nid, lambda u: nodes[u]["inputs"])
            return "op", to or nid
        return "op", nid

    units: dict[tuple[str, str], ModuleStep] = {}
    for s in steps:
        key = unit(s.node)
        if key not in units:
            units[key] = _new_step(key, nodes, calls, innermost)
        units[key].ops.append(s.number)
        if plumbing(s.node):
            units[key].folded.append(s.number)
    ordered = sorted(units.values(), key=lambda u: u.ops[0])
    member = {steps[n - 1].node: u for u in ordered for n in u.ops}
    for number, u in enumerate(ordered, 1):
        u.number = number
        u.ops.sort()
        u.folded.sort()
        for n in u.ops:
            s = steps[n - 1]
            if n == 1 or any(member.get(user) is not u for user in users.get(s.node, [])):
                u.arrives.append(n)
            u.sends += [(n, k) for k, route in enumerate(s.sends) if member.get(route["to"]) is not u]
    return ordered


def _new_step(key: tuple[str, str], nodes: dict, calls: dict, innermost) -> ModuleStep:
    kind, what = key
    if kind == "call":
        return ModuleStep(0, calls[what]["name"], calls[what]["kind"], what)
    call = innermost(what)
    title = nodes[what]["title"]
    if call is None:
        return ModuleStep(0, title, "op", None)
    return ModuleStep(0, calls[call]["name"], f"{calls[call]['kind']} · {title}", call)
