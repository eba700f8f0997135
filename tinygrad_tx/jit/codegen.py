"""A tape written out as Python source, so a replay runs as straight-line code.

Interpreting a tape op by op spends more time on the interpreting (fetch the next
step, look up its inputs, unpack its routes) than a small op spends on arithmetic.
So, like a compiler's back end, this writes each tape once as a Python function in
which every op's forward, every backward and every gradient route is its own line,
with the slot numbers, shapes and routes written in as constants, and lets Python
compile it. The function does exactly what the engine did, in the same order, so
a replay still equals eager execution bit for bit. `Tape.source()` shows the code:

    V[7] = f.forward(V[5], V[2])            # #3 Linear -> s3
    ...
    if G[3] is not None:  # step 2: #3 Linear
        gs = F[3].backward(G[3], V[5], V[2])
        gt = gs[0]
        if gt is not None:
            G[1] = gt if G[1] is None else G[1] + gt

`V` holds the slots (arrays), `F` the op objects kept for backward, `G` the
gradients pending at ops, by op number, as a backward plan (`tinygrad_tx/backward.py`) routes them, `LG`
the summed gradients of the leaves; a backward inside the function delivers
its leaves' gradients through the engine's `LeafSink`. Each backward is its
plan written out line by line: the same steps, routes, sums and deliveries.
"""
from __future__ import annotations

import itertools
import keyword
import linecache
import weakref
from typing import Any, Callable

from ..backward import sum_to
from ..leaf_sink import LeafSink
from ..function import no_grad
from ..tensor import Tensor
from .program import Live


_BUILDS = itertools.count()  # numbers each compiled function's file name
_LOCALS = {"run", "walk", "tensors", "g", "V", "F", "R", "G", "LG", "f", "gs", "gt", "sink", "k"}  # names the generated functions use for their own variables


class _Writer:
    """Lines of source, and the objects they refer to under readable names."""

    def __init__(self, tape, function: str, parameters: str):
        self.tape, self.function = tape, function
        self.lines = [f"def {function}({parameters}):"]
        self.names: dict[int, str] = {}  # id of a constant -> its name in the scope
        self.forward_at: dict[int, Any] = {}  # line number -> the op whose forward that line runs
        self.scope = {"LeafSink": LeafSink, "sum_to": sum_to, "no_grad": no_grad, "Wrap": Tensor._from_op}

    def __call__(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def name(self, obj: Any, hint: str) -> str:
        """A name in the function's scope for a constant (op class, backend, params, tensor)."""
        key = id(obj)
        if key not in self.names:
            base = hint if hint.isidentifier() and not keyword.iskeyword(hint) and not hint.startswith("__") else "k"
            name, n = base, 1
            while name in self.scope or name in _LOCALS:  # a tensor named "w6" may already hold "w" + "6"
                name, n = f"{base}_{n}", n + 1
            self.names[key], self.scope[name] = name, obj
        return self.names[key]

    def leaf(self, k: int) -> str:
        kind, ref = self.tape.leaves[k]
        return f"tensors[{ref}]" if kind == "arg" else self.name(ref, f"leaf{k}")

    def binding(self, b: tuple) -> str:
        kind, ref = b
        if kind == "slot":
            return f"V[{ref}]"
        if kind == "const":
            return self.name(ref, "const")
        return "(" + "".join(self.binding(x) + ", " for x in ref) + ")"

    @property
    def source(self) -> str:
        return "\n".join(self.lines)

    def build(self) -> Callable:
        """Compile the source; the function it defines. The source goes where the `traceback`
        module (pytest, IPython, Jupyter) looks for lines, `linecache`, so an error in a replay
        shows the record's line it came from (`V[2] = f.forward(V[1], V[0])  # #0 Embedding -> s0`)."""
        filename = f"<tape {self.function} {next(_BUILDS)}>"
        source = self.source
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), self.scope)
        function = self.scope.pop(self.function)  # not left in its own globals: no reference cycle to collect
        weakref.finalize(function, linecache.cache.pop, filename, None)  # an evicted record's lines go too
        function.forward_at = self.forward_at
        return function


def write_replay(tape, keep: bool) -> _Writer:
    """`run(tensors) -> (V, R, F)`: the whole program; with `keep`, forward frees nothing
    (a backward outside the function still needs what it saved)."""
    w = _Writer(tape, "run", "tensors")
    w(f"V, F, R = [None] * {tape.n_slots}, [None] * {len(tape.ops)}, [None] * {tape.calls}")
    _inputs(w)
    _program(w, tape.program, keep)
    w("return V, R, F")
    return w


def write_parts(tape, start: int, stop: int, hoisted: list[int]) -> tuple[_Writer, _Writer, _Writer]:
    """The program as three functions of `(tensors, V, F, R)`, for a CUDA graph (`graph.py`):
    `enter` (the inputs' arrays, the steps before `start` and the calls `hoisted` out of the
    rest), `device` (the other steps from `start` to `stop`: ops and backwards, captured once
    and launched as a graph) and `leave` (the steps from `stop` on, as in a replay)."""
    program = tape.program
    parts = [_Writer(tape, name, "tensors, V, F, R") for name in ("enter", "device", "leave")]
    device = [step for i, step in enumerate(program[start:stop], start) if i not in hoisted]
    _inputs(parts[0])
    for w, steps in zip(parts, (program[:start] + [program[i] for i in hoisted], device, program[stop:])):
        _program(w, steps, keep=False)
        w("return V, R, F")
    return parts


def _inputs(w: _Writer) -> None:
    for slot, number in w.tape.args:
        w(f"V[{slot}] = tensors[{number}].data  # {w.tape.slot_names[slot]}")
    for slot, t in w.tape.captured:
        w(f"V[{slot}] = {w.name(t, w.tape.slot_names[slot].replace('.', '_'))}.data")


def _program(w: _Writer, steps: list, keep: bool) -> None:
    for step in steps:
        if type(step) is list:
            for op in step:
                _forward(w, op, keep)
        elif hasattr(step, "plan"):  # a Backward (tape.py, which imports this module)
            _backward(w, step)
        else:
            _call(w, step, keep)


def write_walk(tape) -> _Writer:
    """`walk(g, V, F) -> leaf gradients`: the plan of the function's differentiable result, run
    when that result is differentiated outside the function (`Replayed`)."""
    w = _Writer(tape, "walk", "g, V, F")
    w(f"LG = [None] * {len(tape.leaves)}")
    _steps(w, tape.differentiable[1], "g", depth=1, frees={}, sink=False)
    w("return LG")
    return w


def _forward(w: _Writer, op, keep: bool) -> None:
    cls, backend = w.name(op.cls, op.cls.__name__), w.name(op.backend, op.backend.name)
    dynamic = dict(op.dynamic or ())
    args = [f"V[{i}]" for i in op.ins]
    static = {k: v for k, v in op.params.items() if k not in dynamic}
    if static:
        args.append("**" + w.name(static, "params"))
    args += [f"{k}={w.binding(b)}" for k, b in dynamic.items()]
    w(f"f = {cls}(); f.backend, f.xp = {backend}, {backend}.xp")
    w.forward_at[len(w.lines) + 1] = op
    w(f"V[{op.out}] = f.forward({', '.join(args)})  # #{op.index} {op.cls.__name__} -> {w.tape.slot_names[op.out]}")
    if op.recorded:
        w(f"f.needs_grad = {tuple(op.needs_grad)}; F[{op.index}] = f")
    if not keep and op.frees:
        w(" = ".join(f"V[{s}]" for s in op.frees) + " = None")


def _call(w: _Writer, step, keep: bool) -> None:
    """A replayable call (`R[0] = step(sgd)`), its arguments written one by one: this call's
    tensors where the recording had its own (`all_reduce(Wrap(V[4], cpu), op='sum')`)."""
    args = [_argument(w, v) for v in step.args]
    args += [f"{k}={_argument(w, v)}" if k.isidentifier() and not keyword.iskeyword(k)
             else f"**{{{k!r}: {_argument(w, v)}}}" for k, v in step.kwargs.items()]
    w(f"R[{step.index}] = {w.name(step.function, step.function.__name__)}({', '.join(args)})")
    if not keep and step.frees:
        w(" = ".join(f"V[{s}]" for s in step.frees) + " = None")


def _argument(w: _Writer, value: Any) -> str:
    """The expression for one argument of a call: a `Live` tensor, a container holding one, a
    literal, or a constant of the record by name."""
    if type(value) is Live:
        if value.kind == "arg":
            return f"tensors[{value.ref}]"
        if value.kind == "grad":
            kind, owner = value.ref
            return (f"tensors[{owner}]" if kind == "arg" else w.name(owner, "owner")) + ".grad"
        return f"Wrap(V[{value.ref}], {w.name(value.backend, value.backend.name)})"
    if type(value) in (list, tuple) and any(type(v) is Live for v in value):
        items = "".join(_argument(w, v) + ", " for v in value)
        return f"[{items}]" if type(value) is list else f"({items})"
    if value is None or type(value) in (bool, int, str):
        return repr(value)
    return w.name(value, type(value).__name__.lower())


def _backward(w: _Writer, step) -> None:
    """A backward inside the function: its plan's steps, with the leaves' gradients summed and
    delivered through a `LeafSink` (the engine's: hooks, `.grad`, queued callbacks), under no_grad."""
    plan = step.plan
    seed = f"V[{step.seed[1]}]" if step.seed[0] == "slot" else f"{w.name(step.seed[1], 'seed')}.copy()"
    leaves = "(" + "".join(w.leaf(k) + ", " for k in plan.leaves) + ")"
    w(f"LG = [None] * {len(plan.leaves)}  # each leaf's gradient, summed")
    w(f"with LeafSink({leaves}, LG, 0, Wrap) as sink, no_grad():")
    if plan.steps:
        _steps(w, plan, seed, depth=2, frees=step.frees, sink=True)
    else:
        w(f"LG[0] = {seed}  # backward from a leaf", 2)
    w("sink.finish()", 2)


def _steps(w: _Writer, plan, seed: str, depth: int, frees: dict, sink: bool) -> None:
    """The steps of a numbered plan as lines: each step's backward, its gradients sent along its
    routes (stored on a first arrival, added on a later one, summed back where the plan says),
    the step's op object and last-used slots dropped where the plan releases it, and, with a
    `sink`, leaves delivered where the plan delivers them."""
    def line(text: str, indent: int = 0) -> None:
        w(text, depth + indent)

    n = len(plan.nodes)
    line(f"G = [None] * {len(w.tape.ops)}")
    line(f"G[{plan.nodes[0]}] = {seed}")
    for step in plan.steps:
        op = step.node
        if step.freed:
            line(f"# step {step.number}: #{op} {step.op}, freed by an earlier backward (never reached: see Replayed)")
            continue
        ins = ", ".join(f"V[{s}]" for s in w.tape.ops[op].ins)
        line(f"if G[{op}] is not None:  # step {step.number}: #{op} {step.op}")
        line(f"gs = F[{op}].backward(G[{op}], {ins})", 1)
        for (k, to, shape), adds in zip(step.routes, step.adds):
            line(f"gt = gs[{k}]", 1)
            line("if gt is not None:", 1)
            if shape is not None:
                line(f"if gt.shape != {shape!r}:", 2)
                line(f"gt = sum_to(gt, {shape!r})", 3)
            if to >= n:  # a leaf: with a sink, LG holds its sums by the plan's leaf number; else by the record's
                target = f"LG[{to - n}]" if sink else f"LG[{plan.leaves[to - n]}]"
            else:
                target = f"G[{plan.nodes[to]}]"
            line(f"{target} = gt if {target} is None else {target} + gt" if adds else f"{target} = gt", 2)
        released = [f"F[{op}]", *(f"V[{s}]" for s in frees.get(step.index, ()))] if step.releases else []
        line(" = ".join([f"G[{op}]", *released]) + " = None")
        for k in step.delivers if sink else ():
            line(f"sink.deliver({k})  # its post-accumulate-grad hooks run now")
