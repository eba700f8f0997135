"""Pictures of a tensor's history: an indented text tree, Graphviz DOT, and a rendered file.

The views walk the graph itself (tensor -> `grad_fn` -> its input tensors), so
they show exactly what backward will walk. One node per op, one per leaf;
a tensor used twice is one node with two outgoing edges (in the text tree,
its second appearance is a reference `↑ #k` to the first).

Ops are numbered in the order backward visits them (#1 is the tensor you
look at), the numbers `trace_backward` prints, so a picture and a trace can be
read side by side. Each op shows its output's shape and dtype; a tensor that
has a `.grad` also shows the gradient's norm. Leaves always keep `.grad`; intermediate tensors do
so after `retain_grad()`, which `retain_grads(t)` calls on the whole graph.
Backward releases the graph unless told to keep it, so the recipe to see every
gradient is

    retain_grads(loss)
    loss.backward(retain_graph=True)
    print(graph_text(loss))

A Transformer step has thousands of ops. Run its forward under
`record_modules()` and pass `collapse=1` (each child of the model: encoder,
decoder, …) or `collapse=2` (each layer), and every module call at that depth
is drawn as one box; parameters used only inside a box disappear into it.
"""
from __future__ import annotations

import shutil
import subprocess
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..files import write_atomically
from ..tensor import Tensor
from .instrument import describe, norm


@dataclass(eq=False)
class GraphNode:
    """One box of a picture: an op, a leaf, a constant, or a collapsed module call."""

    kind: str  # "op", "leaf", "const" or "module"
    title: str  # op name, leaf name, constant value, or module path
    shape: tuple
    dtype: Any
    grad_norm: float | None = None
    detail: str = ""  # a module box: its class and how many ops it holds
    inputs: list["GraphNode"] = field(default_factory=list)
    seq: int = -1  # an op's creation number (for a box, its last op's); leaves have none
    scope: tuple = ()  # the module calls an op was created in, outermost first (record_modules)
    number: int = 0  # ops and boxes: the position in backward's order, from 1; then leaves

    def lines(self) -> list[str]:
        """The label: title, type, and the gradient's norm when there is one."""
        lines = [self.title] + ([self.detail] if self.detail else []) + [describe(self.shape, self.dtype)]
        return lines + ([f"grad norm {self.grad_norm:.4g}"] if self.grad_norm is not None else [])


# -- the graph behind a tensor ------------------------------------------------------------

def _key(t: Tensor) -> int:
    """What makes a node: the op that produced a tensor, or, for a leaf, the tensor itself."""
    return id(t.grad_fn) if t.grad_fn is not None else id(t)


def _inputs(t: Tensor) -> tuple:
    fn = t.grad_fn
    if fn is None:
        return ()
    if fn.released:
        raise RuntimeError(f"the graph behind this tensor was released by backward() (at {fn.name}): look at "
                           "it before backward, or call backward(retain_graph=True) to keep it")
    return tuple(fn.inputs)


def tensors_in_graph(root: Tensor) -> Iterator[Tensor]:
    """Every tensor in `root`'s history, one per node, found with an explicit stack (deep graphs
    do not hit the recursion limit)."""
    seen, stack = {_key(root)}, [root]
    while stack:
        t = stack.pop()
        yield t
        for u in _inputs(t):
            if _key(u) not in seen:
                seen.add(_key(u))
                stack.append(u)


def retain_grads(root: Tensor) -> None:
    """`retain_grad()` on every intermediate tensor behind `root`, so that after backward each
    keeps its `.grad` and the graph views can show every gradient."""
    for t in tensors_in_graph(root):
        t.retain_grad()


def _node(t: Tensor) -> GraphNode:
    grad = None if t.grad is None else norm(t.grad)
    fn = t.grad_fn
    if fn is not None:
        return GraphNode("op", fn.name, t.shape, t.dtype, grad, seq=fn.seq, scope=getattr(fn, "scope", ()))
    if t.requires_grad:
        return GraphNode("leaf", t.name or "leaf", t.shape, t.dtype, grad, detail="leaf" if t.name else "")
    title = t.name or (f"{t.item():.4g}" if t.size == 1 else "constant")
    return GraphNode("const", title, t.shape, t.dtype, detail="constant" if title != "constant" else "")


def build_graph(root: Tensor, collapse: int | None = None) -> list[GraphNode]:
    """The nodes behind `root`, linked to their inputs and numbered: `root`'s node first,
    then every op in the order backward visits them (descending creation number), then leaves."""
    tensors = list(tensors_in_graph(root))
    nodes = {_key(t): _node(t) for t in tensors}
    for t in tensors:
        nodes[_key(t)].inputs = [nodes[_key(u)] for u in _inputs(t)]
    shown = list(nodes.values()) if collapse is None else _collapse(list(nodes.values()), collapse)
    shown.sort(key=lambda n: n.seq, reverse=True)  # stable: leaves keep the order they were found in
    for number, node in enumerate(shown, 1):
        node.number = number
    return shown


def _collapse(nodes: list[GraphNode], depth: int) -> list[GraphNode]:
    """The graph with the nodes of each module call at nesting `depth` replaced by one box.

    A box's inputs are the nodes outside it that its members read, each once.
    """
    owner = _box_owners(nodes, depth)
    members = defaultdict(list)
    for n in nodes:
        members[owner.get(n, n)].append(n)
    for group, inside in members.items():
        inputs = [owner.get(i, i) for m in inside for i in m.inputs]
        if group.kind == "module":
            count = sum(m.kind == "op" for m in inside)
            group.detail = ", ".join(filter(None, [group.detail, f"{count} op{'s' * (count != 1)}"]))
            inputs = [i for i in dict.fromkeys(inputs) if i is not group]
        group.inputs = inputs
    return list(members)


def _box_owners(nodes: list[GraphNode], depth: int) -> dict[GraphNode, GraphNode]:
    """The box each collapsed node goes into.

    An op belongs to the box of the call `scope[depth]` when it was made that
    deep, or to the box of its innermost call when that call is shallower but
    calls no module itself (a Linear, a LayerNorm): so every module is a box,
    down to `depth`, and only the ops a shallower forward makes itself stay
    visible. A leaf or constant joins a box when only that box uses it (a layer's weights).
    """
    ops = [n for n in nodes if n.kind == "op"]
    if ops and not any(n.scope for n in ops):
        raise ValueError("collapse needs to know which module call made each op: run the forward "
                         "under tinygrad_tx.inspect.record_modules()")
    owner: dict[GraphNode, GraphNode] = {}
    boxes: dict[int, GraphNode] = {}
    for n in ops:
        call = _box_call(n.scope, depth)
        if call is not None:
            if id(call) not in boxes:
                shape, dtype = call.outputs[0] if call.outputs else ((), "")
                boxes[id(call)] = GraphNode("module", call.name, shape, dtype, detail=call.kind if call.path else "")
            owner[n] = boxes[id(call)]
            owner[n].seq = max(owner[n].seq, n.seq)
    users = defaultdict(set)
    for n in nodes:
        for i in n.inputs:
            users[i].add(owner.get(n, n))
    for n in nodes:
        if n.kind != "op" and len(users[n]) == 1 and next(iter(users[n])).kind == "module":
            owner[n] = next(iter(users[n]))
    return owner


def _box_call(scope: tuple, depth: int):
    """The module call whose box an op made in `scope` belongs to, or None (see `_collapse`)."""
    if len(scope) > depth:
        return scope[depth]
    return scope[-1] if scope and not scope[-1].calls_modules else None


# -- text ---------------------------------------------------------------------------------

def graph_text(t: Tensor, collapse: int | None = None, max_depth: int = 100) -> str:
    """An indented tree of `t`'s history: op, output shape and dtype, gradient norm where known.

    A node reached a second time is not repeated: `↑ #k` points to where it was
    first printed. `collapse` draws module calls as boxes (see the module
    docstring); the tree stops `max_depth` levels down, so a very deep graph
    (a 10,000-op chain) stays printable.
    """
    lines, printed = [], set()
    stack = [(build_graph(t, collapse)[0], "", "")]  # (node, prefix of its line, prefix of its inputs' lines)
    while stack:
        node, head, tail = stack.pop()
        if node in printed:
            lines.append(f"{head}↑ #{node.number} {node.title}")
            continue
        if len(tail) > 3 * max_depth:
            lines.append(f"{head}… #{node.number} {node.title} and its inputs: deeper than max_depth={max_depth}")
            continue
        printed.add(node)
        lines.append(f"{head}#{node.number} " + "  ".join(node.lines()))
        for i, child in reversed(list(enumerate(node.inputs))):
            last = i == len(node.inputs) - 1
            stack.append((child, tail + ("└─ " if last else "├─ "), tail + ("   " if last else "│  ")))
    return "\n".join(lines)


# -- DOT and files ------------------------------------------------------------------------

STYLES = {
    "op": 'shape=box, style="rounded,filled", fillcolor="#dbe8f6"',
    "leaf": 'shape=ellipse, style=filled, fillcolor="#d9f2d9"',
    "const": 'shape=ellipse, style=filled, fillcolor="#eeeeee", fontsize=9',
    "module": 'shape=box3d, style=filled, fillcolor="#fff2cc"',
}


def to_dot(t: Tensor, collapse: int | None = None) -> str:
    """Graphviz DOT text of `t`'s history: data flows from the leaves (top) to `t` (bottom).

    Node ids say what a node is: `op3` is the op backward visits third, `leaf12`
    and `const13` are leaves, `module4` a collapsed module call.
    """
    nodes = build_graph(t, collapse)
    lines = ["digraph autograd {", '  node [fontname="Helvetica", fontsize=10];']
    for node in nodes:
        label = node.lines()
        if node.kind in ("op", "module"):
            label[0] = f"#{node.number} {label[0]}"
        label = "\\n".join(_escape(line) for line in label)
        lines.append(f'  {node.kind}{node.number} [label="{label}", {STYLES[node.kind]}];')
    for node in nodes:
        lines += [f"  {i.kind}{i.number} -> {node.kind}{node.number};" for i in node.inputs]
    return "\n".join(lines + ["}"]) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render(t: Tensor, path: str | Path, collapse: int | None = None) -> Path:
    """Write `t`'s graph as a picture (format from the suffix: .svg, .png, .pdf) and return its path.

    The DOT text is always written next to it (`graph.dot`). The picture needs
    Graphviz's `dot` program; without it a warning says how to install it, and
    the returned path is the `.dot` file.
    """
    path = Path(path)
    dot_path = path.with_suffix(".dot")
    dot = to_dot(t, collapse).encode()
    write_atomically(dot_path, lambda f: f.write(dot))
    if path.suffix == ".dot":
        return dot_path
    program, fmt = shutil.which("dot"), path.suffix.lstrip(".") or "svg"
    if program is None:
        warnings.warn(f"Graphviz's `dot` program is not installed, so only {dot_path} was written. Install "
                      "Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: "
                      f"conda install graphviz), then run: dot -T{fmt} {dot_path} -o {path}", stacklevel=2)
        return dot_path
    picture = subprocess.run([program, f"-T{fmt}", str(dot_path)], check=True, capture_output=True).stdout
    write_atomically(path, lambda f: f.write(picture))  # whole or not at all, as every file written here
    return path
