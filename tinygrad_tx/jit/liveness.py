"""When a replay gives each slot back: at its last use, as eager lets go of an array.

The eager graph frees an array once the last node holding it is released: forward
reads it, backward reads it, then never. `plan_frees` finds that last reader in a
finished record (an op, a call, or a step of a backward) and writes the slots it
frees there (`frees`), which `codegen.py` turns into `V[k] = None`.
"""
from __future__ import annotations

from typing import Any

from .program import Backward, Call, Live, Op
from .tape import Tape


def plan_frees(tape: Tape) -> None:
    """Write into each op, call and backward step of `tape` the slots whose last reader it is
    (`frees`); slots the result, or a later walk outside the function, still needs are kept."""
    last: dict[int, Any] = {}  # slot -> its last reader
    keep = set(_slots_in(tape.output))  # what the result or a later walk outside the function still needs
    if tape.differentiable is not None:
        slot, plan = tape.differentiable
        keep.add(slot)
        keep.update(i for step in plan.steps for i in tape.ops[step.node].ins)
    for step in tape.program:
        if type(step) is list:
            for op in step:
                for slot in (*op.ins, *_dynamic_slots(op)):
                    last[slot] = op
        elif type(step) is Call:
            for slot in _live_slots((step.args, tuple(step.kwargs.values()))):
                last[slot] = step
        elif type(step) is Backward:
            if step.seed[0] == "slot":
                last[step.seed[1]] = None  # kept: no later reader frees it
            for i, plan_step in enumerate(step.plan.steps):
                for slot in tape.ops[plan_step.node].ins:
                    last[slot] = (step, i)
    owners: dict[Any, list] = {}
    captured = {slot for slot, _ in tape.captured} | {slot for slot, _ in tape.args}
    for slot, user in last.items():
        if user is not None and slot not in keep and slot not in captured:
            owners.setdefault(user, []).append(slot)
    for user, slots in owners.items():
        if type(user) is tuple:  # (a backward, its step): freed after that step
            user[0].frees[user[1]] = tuple(slots)
        else:
            user.frees = tuple(slots)


def _dynamic_slots(op: Op) -> list[int]:
    out = []

    def walk(binding):
        kind, ref = binding
        if kind == "slot":
            out.append(ref)
        elif kind == "tuple":
            for b in ref:
                walk(b)

    for _, binding in op.dynamic or ():
        walk(binding)
    return out


def _live_slots(value: Any) -> list[int]:
    """The slots a call's arguments pass (`Live` op results, inside tuples and lists too)."""
    if type(value) is Live:
        return [value.ref] if value.kind == "slot" else []
    if type(value) in (list, tuple):
        return [s for v in value for s in _live_slots(v)]
    return []


def _slots_in(spec: tuple) -> list[int]:
    kind = spec[0]
    if kind in ("tensor", "replayed"):
        return [spec[1]]
    if kind in ("tuple", "list"):
        return [s for v in spec[1] for s in _slots_in(v)]
    if kind == "dict":
        return [s for _, v in spec[1] for s in _slots_in(v)]
    return []
