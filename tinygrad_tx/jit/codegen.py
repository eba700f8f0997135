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
    gs = F[3].backward(G[3], V[5], V[2])    # #3 Linear
    gt = gs[0]
    if gt is not None:
        G[1] = gt if G[1] is None else G[1] + gt

`V` holds the slots (arrays), `F` the op objects kept for backward, `G` the
gradients pending at ops, `LG` the summed gradients of the leaves.
"""
from __future__ import annotations

import itertools
import keyword
import linecache
import weakref
from typing import Any, Callable

from .. import autograd
from ..autograd import _Sink, sum_to
from ..tensor import Tensor


_BUILDS = itertools.count()  # numbers each compiled function's file name
_LOCALS = {"run", "walk", "tensors", "g", "V", "F", "R", "G", "LG", "arrived", "f", "gs", "gt", "sink",
           "leaves", "k"}  # names the generated functions use for their own variables


class _Writer:
    """Lines of source, and the objects they refer to under readable names."""

    def __init__(self, tape, function: str, parameters: str):
        self.tape, self.function = tape, function
        self.lines = [f"def {function}({parameters}):"]
        self.names: dict[int, str] = {}  # id of a constant -> its name in the scope
        self.forward_at: dict[int, Any] = {}  # line number -> the op whose forward that line runs
        self.scope = {"Sink": _Sink, "sum_to": sum_to, "no_grad": autograd.no_grad, "walks": autograd._walks,
                      "Wrap": Tensor._from_op}

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
    for slot, number in tape.args:
        w(f"V[{slot}] = tensors[{number}].data  # {tape.slot_names[slot]}")
    for slot, t in tape.captured:
        w(f"V[{slot}] = {w.name(t, tape.slot_names[slot].replace('.', '_'))}.data")
    for step in tape.program:
        if type(step) is list:
            for op in step:
                _forward(w, op, keep)
        elif hasattr(step, "nodes"):  # a Backward (tape.py, which imports this module)
            _backward(w, step)
        else:
            _call(w, step, keep)
    w("return V, R, F")
    return w


def write_walk(tape) -> _Writer:
    """`walk(g, V, F) -> leaf gradients`: the recorded walk from the function's differentiable
    result, run when that result is differentiated outside the function (`Replayed`)."""
    w = _Writer(tape, "walk", "g, V, F")
    _, root, nodes = tape.differentiable
    _walk(w, nodes, root, "g", release=False, in_function=False)
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
    from .tape import Live  # tape.py imports this module

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
    """A backward inside the function: gradients summed per leaf, delivered as the engine does
    (a leaf with a post-accumulate-grad hook as soon as the walk is past its last use, the
    others at the end), with the sink on the engine's stack of walks for `queue_callback`."""
    seed = f"V[{step.seed[1]}]" if step.seed[0] == "slot" else f"{w.name(step.seed[1], 'seed')}.copy()"
    backend = w.name(step.backend, step.backend.name)
    w(f"sink = Sink(None, {backend}); walks.append(sink)")
    w("try:")
    if step.root is None:
        w(f"sink.add({w.leaf(step.root_leaf)}, {seed})  # backward from a leaf", 2)
    else:
        w(f"leaves = ({''.join(w.leaf(k) + ', ' for k in range(len(w.tape.leaves)))})", 2)
        w(f"# backward from #{step.root}", 2)
        _walk(w, step.nodes, step.root, seed, release=not step.retain_graph, in_function=True)
        w("for k in arrived:  # in the order the leaves first got a gradient, as the engine's sink", 2)
        w("if LG[k] is not None:", 3)
        w("sink.add(leaves[k], LG[k])", 4)
    w("with no_grad():", 2)
    w("sink.finish(False)", 3)
    w("finally:")
    w("walks.pop()", 2)


def _walk(w: _Writer, nodes: list, root: int, seed: str, release: bool, in_function: bool) -> None:
    """The recorded graph walk: each node's backward, its gradients routed on, summed on fan-out
    in the engine's order and back over broadcast axes; with `release`, op objects and
    arrays dropped after their last use, as the eager graph releases them. In a backward
    inside the function (written in a `try:`, with `sink` and `leaves`), a leaf with a
    post-accumulate-grad hook gets its gradient right after the last node that sends it one."""
    def line(text: str, indent: int = 0) -> None:
        w(text, 1 + in_function + indent)

    last_use = {target: node.index for node in nodes for _, to_node, target, _, _ in node.routes if not to_node}
    finished_after: dict[int, list[int]] = {}  # node -> leaves no later node sends a gradient
    for leaf, node in last_use.items():
        finished_after.setdefault(node, []).append(leaf)
    line(f"G, LG, arrived = [None] * {len(w.tape.ops)}, [None] * {len(w.tape.leaves)}, []")
    line(f"G[{root}] = {seed}")
    for node in nodes:
        i = node.index
        line(f"if G[{i}] is not None:  # #{i} {w.tape.ops[i].cls.__name__}")
        line(f"gs = F[{i}].backward(G[{i}], {', '.join(f'V[{s}]' for s in node.ins)})", 1)
        for k, to_node, target, shape, reduce in node.routes:
            line(f"gt = gs[{k}]", 1)
            line("if gt is not None:", 1)
            if reduce:
                line(f"gt = sum_to(gt, {shape!r})", 2)
            if to_node:
                line(f"G[{target}] = gt if G[{target}] is None else G[{target}] + gt", 2)
            else:
                line(f"if LG[{target}] is None:", 2)
                line(f"LG[{target}] = gt; arrived.append({target})", 3)
                line("else:", 2)
                line(f"LG[{target}] = LG[{target}] + gt", 3)
        frees = [f"F[{i}]", *(f"V[{s}]" for s in node.frees)] if release else []
        line(" = ".join([f"G[{i}]", *frees]) + " = None")
        for k in finished_after.get(i, []) if in_function else []:
            line(f"if leaves[{k}]._ready_hooks and LG[{k}] is not None:  # no node left sends it more")
            line("with no_grad():", 1)
            line(f"sink._deliver(leaves[{k}], LG[{k}], False)", 2)
            line(f"LG[{k}] = None", 1)
