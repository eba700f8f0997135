"""The compiled step: what `tx.jit` records of a call (forward and backward) and the Python it
becomes, each line linked to the graph node whose op it runs.

The record is made from its own call of the function (before the explorer's), so the
ops are the same kind and order but not the same objects: a line is linked to the
graph node of the same op at the same place in creation order. Ops that do not
reach the result (no graph node) and the lines that are not an op stay unlinked.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ...tensor import Tensor
from .backward import seed_gradient

OP_COMMENT = re.compile(r"# #(\d+) (\w+)")  # codegen ends an op's line with "# #<index> <Op>"


def record_compiled(fn: Callable, args: tuple, first_tensor: Callable[[Any], Tensor]) -> dict:
    """{"summary", "source", "ops"}: the tape of fn's forward plus a backward from its result, or
    {"refused": why} when `tx.jit` cannot record it."""
    from ...jit import JitError, jit  # here: tx.jit itself watches the engine through tx.inspect

    def step(*arguments):
        root = first_tensor(fn(*arguments))
        if root.requires_grad:  # (if not, the explorer says so itself)
            root.backward(seed_gradient(root))
        return root

    jitted = jit(step)
    try:
        jitted(*args)
    except JitError as e:
        return {"refused": str(e)}
    tape = jitted.tape(*args)
    return {"summary": str(tape).splitlines()[0], "source": tape.source(),
            "ops": [(op.index, op.cls.__name__, op.recorded) for op in tape.ops]}


def link_lines(record: dict, graph_ops: list[tuple[str, str]]) -> dict:
    """The record's source as lines, each with the graph node id its op is (or None).

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
        match = OP_COMMENT.search(text)
        lines.append({"text": text, "node": node_of.get(int(match[1])) if match else None})
    return {"summary": record["summary"], "lines": lines}
