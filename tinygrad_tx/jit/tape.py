"""The record of one signature (`Tape`) and its replay on raw arrays.

A tape is a straight-line program over numbered slots: runs of `Op`s (forwards),
`Backward`s (the engine's plan of each walk, numbered for the record) and `Call`s
(optimizer steps and other state changes), in the order they happened (`program.py`). `record.py` writes it;
`Tape.run` plays it back (as Python written for it by `codegen.py`), and `Replayed` wraps a whole replay as one node when its
result is differentiated outside the function.
"""
from __future__ import annotations

from typing import Any, Callable

from ..function import OnceDifferentiable, is_grad_enabled, op_error
from ..observers import describe
from ..nn.hooks import GLOBAL_HOOKS
from ..tensor import Tensor
from .codegen import write_replay, write_walk
from .program import Backward, Op
from .reach import Links


class Tape:
    """One signature's record: a program over numbered slots (see the module docstring)."""

    def __init__(self):
        self.n_slots = 0
        self.slot_names: list[str] = []
        self.slot_types: list[tuple] = []
        self.args: list[tuple[int, int]] = []  # (slot, argument tensor number)
        self.captured: list[tuple[int, Tensor]] = []  # (slot, tensor whose .data is read live)
        self.leaves: list[tuple[str, Any]] = []  # ("arg", number) or ("tensor", tensor)
        self.ops: list[Op] = []
        self.program: list = []  # runs of Ops (lists), Backward and Call, in the order they happened
        self.calls = 0
        self.output: Any = None
        self.differentiable: tuple | None = None  # (slot, numbered plan) of a result with a graph left
        self.keep_alive: list = []  # argument objects whose identity is in the signature
        self.guard: tuple = ((), [])  # the captured tensors, and each one's `guard_state` when first used
        self.links = Links()  # the ways the function reached what the record holds (`reach.py`)
        self.modules: list = []  # the modules called while recording, and their train/eval modes
        self.modes: list[bool | None] = []
        self.confirmed = False  # replayed from now on (with verify: once recorded twice alike)
        self.functions: dict = {}  # the program compiled to Python, per kind (see `_compiled`)
        self.graph = None  # the program's device part as a CUDA graph, with cuda_graph=True (`graph.py`)

    # -- replay ----------------------------------------------------------------------------
    def still_valid(self) -> bool:
        """What the record assumed, as it was when the function used it (not as the function left
        it: a replay would not make its changes again): each captured tensor (a parameter) still
        found where the function found it (`links`), still requiring grad or not (a layer frozen
        since, or by the function after its use, records anew), its array of the same shape, dtype
        and device (shapes are constants of the record, and a replay checks no devices); and the
        modules called while recording in the mode they were in when the function called them
        first (None: the function set it itself before; a module the signature's search did not
        reach records anew), with no hook registered since (recording anew refuses it)."""
        tensors, states = self.guard
        return (list(map(guard_state, tensors)) == states and self.links.hold()
                and all(mode is None or m.training == mode for m, mode in zip(self.modules, self.modes))
                and not GLOBAL_HOOKS and not any(m._hooks for m in self.modules))

    def replay(self, tensors: list[Tensor]) -> Any:
        if self.differentiable is not None and is_grad_enabled():
            leaves = [self._leaf(k, tensors) for k in range(len(self.leaves))]
            result = Replayed.apply(*leaves, tape=self, tensors=tensors)  # in its place among the outputs
            replayed = result.grad_fn
            return self._build(self.output, replayed.values, replayed.results, tensors, result)
        values, results, _ = self.run(tensors)
        return self._build(self.output, values, results, tensors)

    def run(self, tensors: list[Tensor], keep: bool = False) -> tuple[list, list, list]:
        """Run the program on the arguments' arrays; returns the slots, the calls' results and
        the op objects (what a later backward outside the function needs, when `keep`). An
        op's error names the op and its input shapes, as in eager execution."""
        run = self._compiled(keep)
        try:
            return run(tensors)
        except (ValueError, IndexError) as e:
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code is not run.__code__:
                tb = tb.tb_next
            op = run.forward_at.get(tb.tb_lineno) if tb is not None else None
            if op is None:
                raise
            raise op_error(e, op.cls.__name__, [self.slot_types[i][0] for i in op.ins]) from None

    def backward_to_leaves(self, g: Any, values: list, fns: list) -> tuple:
        """The recorded walk from the differentiable result to the leaves (for `Replayed`)."""
        return tuple(self._compiled("walk")(g, values, fns))

    def _compiled(self, kind: Any) -> Callable:
        """The program (`keep` False or True) or the walk ("walk") as a Python function, written
        and compiled at its first use (see `codegen`)."""
        if kind not in self.functions:
            self.functions[kind] = (write_walk(self) if kind == "walk" else write_replay(self, kind)).build()
        return self.functions[kind]

    def source(self, keep: bool = False) -> str:
        """The Python a replay runs: what the record became (see `codegen`)."""
        return write_replay(self, keep).source  # written again, not compiled

    def _leaf(self, k: int, tensors: list) -> Tensor:
        kind, ref = self.leaves[k]
        return tensors[ref] if kind == "arg" else ref

    def _build(self, spec: Any, values: list, results: list, tensors: list, replayed: Any = None) -> Any:
        """The function's result, as recorded in `output`; `replayed`: the result with a graph."""
        kind = spec[0]
        if kind == "replayed" and replayed is not None:
            return replayed
        if kind in ("tensor", "replayed"):
            return Tensor._from_op(values[spec[1]], spec[2])
        if kind == "arg":  # an argument returned as it came, as eager gives it back
            return tensors[spec[1]]
        if kind == "grad":  # a leaf's .grad, as the replay left it
            owner_kind, owner = spec[1]
            return (tensors[owner] if owner_kind == "arg" else owner).grad
        if kind == "call":
            return results[spec[1]]
        if kind == "const":
            return spec[1]
        if kind == "dict":
            return {k: self._build(v, values, results, tensors, replayed) for k, v in spec[1]}
        items = [self._build(v, values, results, tensors, replayed) for v in spec[1]]
        return items if kind == "list" else tuple(items)

    # -- looking at it ---------------------------------------------------------------------------
    def nbytes(self) -> int:
        """The arrays the record holds: constant params (masks, lifted numbers) and seeds."""
        constants = [v for op in self.ops for v in op.params.values()]
        constants += [s.seed[1] for s in self.program if type(s) is Backward and s.seed[0] == "const"]
        return sum(getattr(v, "nbytes", 0) for v in constants)

    def __str__(self) -> str:
        names = self.slot_names
        recorded = sum(op.recorded for op in self.ops)
        backwards = [s for s in self.program if type(s) is Backward]
        lines = [f"Tape: {len(self.args)} argument array(s), {len(self.captured)} captured tensor(s), "
                 f"{self.nbytes()} bytes of constants; {len(self.ops)} ops "
                 f"({recorded} recorded for backward), {len(backwards)} backward, {self.calls} call(s)"]
        for step in self.program:
            if type(step) is list:
                for op in step:
                    ins = ", ".join(names[i] for i in op.ins)
                    params = ", ".join(f"{k}={_short(v)}" for k, v in op.params.items())
                    mark = "" if op.recorded else "   (no backward)"
                    lines.append(f"  #{op.index:<4}{op.cls.__name__:<13}({ins}{', ' if params else ''}{params})"
                                 f" -> {names[op.out]} {describe(*self.slot_types[op.out])}{mark}")
            elif type(step) is Backward:
                lines += ["  " + line for line in step.plan.format(self._op_name, self._leaf_name).splitlines()]
            else:
                lines.append(f"  call {step.function.__qualname__}")
        return "\n".join(lines)

    def _op_name(self, step) -> str:
        return f"#{step.node} {step.op}"

    def _leaf_name(self, k: int) -> str:
        kind, ref = self.leaves[k]
        if kind == "arg":
            return f"arg{ref}"
        return next(self.slot_names[slot] for slot, t in self.captured if t is ref)


def guard_state(t: Tensor) -> tuple:
    """What a record assumes of a tensor it reads live: whether it requires grad, its array's shape,
    dtype and device."""
    return t.requires_grad, t.data.shape, t.data.dtype, t.backend


def _short(v: Any) -> str:
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"<{tuple(v.shape)} {v.dtype}>"
    if callable(v):
        return getattr(v, "__name__", type(v).__name__)
    text = repr(v)
    return text if len(text) < 30 else text[:27] + "..."


class Replayed(OnceDifferentiable, register=False):
    """A whole replay as one node, when its result is differentiated outside the function: its
    inputs are the record's leaves (arguments and parameters that take gradients)."""

    saved = ("tape", "values", "results", "fns")

    def forward(self, *leaf_arrays, tape, tensors):
        self.tape = tape
        self.values, self.results, self.fns = tape.run(tensors, keep=True)
        return self.values[tape.differentiable[0]]

    def backward(self, g, *leaf_arrays):
        # freed by a backward inside, or an input changed after its op used it (an optimizer step
        # inside the function): refused, as eager refuses it, not replayed with the old values
        self.tape.differentiable[1].check_runnable()
        return self.tape.backward_to_leaves(g, self.values, self.fns)

