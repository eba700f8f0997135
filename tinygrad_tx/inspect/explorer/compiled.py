"""The compiled step: what `tx.jit` records of a call (forward and backward) and the Python it
becomes, each line linked to the graph node whose op it runs, in the graph's numbers.

The record is made from its own call of the function (before the explorer's), so the
ops are the same kind and order but not the same objects: a line is linked to the
graph node of the same op at the same place in creation order. The codegen names an
op by its index on the tape (`# #0 MatMul`, `# step 0: #20 Mul`); the page has one
numbering, the graph's, so those comments are rewritten to it (`# #21 MatMul`,
`# backward #1 Mul`), and an op that does not reach the result (no graph node) says so.
The lines that only fetch the step's arrays (`V[k] = t3.data`) are marked, for the page
to fold.
"""
from __future__ import annotations

import re
from functools import partial
from typing import Any, Callable

from ... import Tensor
from ...jit import JitError, jit
from .backward import seed_gradient

FORWARD = re.compile(r"# #(\d+) (\w+)")  # codegen ends an op's forward line with "# #<index> <Op> -> s<k>"
BACKWARD = re.compile(r"# step (\d+): #(\d+) (\w+)")  # and opens its backward step with "# step <i>: #<index> <Op>"
FETCH = re.compile(r"\s*V\[\d+\] = [\w\[\]]+\.data\b")  # an argument's or a captured tensor's array


def record_compiled(fn: Callable, args: tuple, first_tensor: Callable[[Any], Tensor],
                    seed: Tensor | None = None) -> dict:
    """{"summary", "source", "ops"}: the tape of fn's forward plus a backward from its result, or
    {"refused": why} when `tx.jit` cannot record it."""
    # A partial, not a closure: the jit looks into what a partial binds, but not into the cells
    # of the engine's own functions, so a `fn` held in a closure here (a run's step, whose model
    # and batch it binds) would hide every weight it uses from the jit's checks, and be refused.
    jitted = jit(partial(_forward_and_backward, fn, first_tensor, seed))
    try:
        jitted(*args)
    except JitError as e:
        return {"refused": str(e)}
    tape = jitted.tape(*args)
    return {"summary": str(tape).splitlines()[0], "source": tape.source(),
            "ops": [(op.index, op.cls.__name__, op.recorded) for op in tape.ops]}


def _forward_and_backward(fn: Callable, first_tensor: Callable[[Any], Tensor], seed: Tensor | None,
                          *arguments: Any) -> Tensor:
    """The step the compiled view records: `fn`, then a backward from its result."""
    root = first_tensor(fn(*arguments))
    if root.requires_grad:  # (if not, the explorer says so itself)
        root.backward(seed if seed is not None else seed_gradient(root))
    return root


def link_lines(record: dict, graph_ops: list[tuple[str, str]]) -> dict:
    """The record's source as lines, each with the graph node id its op is (or None), its kind
    ("fetch", "forward", "backward" or None) and its text in the graph's numbers.

    `graph_ops`: (node id, op name) of the graph's ops in creation order. The record's
    ops kept for backward are matched to them in order, by name (the graph holds only
    those that reach the result, so it is a subsequence)."""
    if "refused" in record:
        return record
    node_of, queue = {}, list(graph_ops)
    for index, name, recorded in record["ops"]:
        if recorded and queue and queue[0][1] == name:
            node_of[index] = queue.pop(0)[0]
    lines = []
    for text in record["source"].splitlines():
        line = {"text": text, "node": None, "kind": "fetch" if FETCH.match(text) else None}
        for kind, pattern, words in (("forward", FORWARD, "# "), ("backward", BACKWARD, "# backward ")):
            match = pattern.search(text)
            if match:
                *_, index, op = match.groups()
                node = node_of.get(int(index))
                named = f"#{node[2:]} {op}" if node else f"{op}: not in the graph (it does not reach the result)"
                line.update(node=node, kind=kind, text=text[:match.start()] + words + named + text[match.end():])
        lines.append(line)
    return {"summary": record["summary"], "lines": lines}
