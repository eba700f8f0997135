"""What a `Tape` holds: the instructions of its program, in the order they happened.

An `Op` is one forward, a `Backward` one walk (the engine's plan, numbered for the
record), a `Call` one state change outside the graph; a call's argument that a replay
takes from its own call is a `Live`. `record.py` writes them, `codegen.py` writes
them out as Python, `tape.py` runs that.
"""
from __future__ import annotations


class Op:
    """One op of the record: `values[out] = cls().forward(*values[ins], **params)`."""

    __slots__ = ("index", "cls", "backend", "ins", "params", "dynamic", "out", "needs_grad", "frees", "recorded")

    def __init__(self, index, cls, backend, ins, params, dynamic, out, needs_grad):
        self.index, self.cls, self.backend = index, cls, backend
        self.ins, self.params, self.dynamic, self.out = ins, params, dynamic, out
        self.needs_grad = needs_grad  # for ops recorded for backward, else None
        self.recorded = needs_grad is not None
        self.frees: tuple = ()  # slots whose last use is this op's forward


class Backward:
    """A backward inside the function: the engine's `BackwardPlan` of that walk, its nodes op numbers
    and its leaves leaf numbers of the record, run from `seed` (a slot, or a constant array)."""

    def __init__(self, plan, seed, backend):
        self.plan, self.seed, self.backend = plan, seed, backend
        self.frees: dict[int, tuple] = {}  # plan step -> slots whose last use is that step's backward


class Call:
    """A state change outside the graph, made again at each replay (`optimizer.step()`,
    `dist.all_reduce(loss)`); an argument that is one of this call's tensors is a `Live`."""

    def __init__(self, index, function, args, kwargs):
        self.index, self.function, self.args, self.kwargs = index, function, args, kwargs
        self.frees: tuple = ()  # slots whose last use is this call


class Live:
    """A call's argument that a replay takes from its own call, not from the recording: an
    argument of the function ("arg", number), the `.grad` of one or of a captured tensor
    ("grad", (kind, owner)), or an op's result ("slot", k), given as a Tensor on `backend`."""

    __slots__ = ("kind", "ref", "backend")

    def __init__(self, kind, ref, backend=None):
        self.kind, self.ref, self.backend = kind, ref, backend
