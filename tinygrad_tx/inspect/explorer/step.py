"""One call of a function of tensors, recorded for the explorer: its graph, then its backward.

`StepRecord(fn, args)` runs `fn(*args)` with two instruments on: `record_modules`
(which module call made each op, for the collapsible boxes) and one that notes
the source line that created each op. It then describes every node of the graph
behind the result (the first Tensor `fn` returns) while the graph still holds its
arrays, and runs backward from it (`backward.py`), so the page can show each
node's value, what it saved, and its gradient. The page asks for these as JSON:
`graph()`, `node(id)`, `walk()` and `walk_step(n)`, `compiled` (the `tx.jit` record of
the same call, made first) and `profiled()`.

Node ids say what a node is: `op3` is the op backward visits third (the numbers
`graph_text` and `trace_backward` print), `leaf2` a tensor that requires grad,
`const1` one that does not; `m4` is the fourth module call.
"""
from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable

from ...function import Function
from ...tensor import Tensor
from ..graph import tensors_in_graph
from ..instrument import Instrument, user_frames
from ..modules import record_modules
from ..profiler import profile
from .arrays import describe_value, heat, summary
from .backward import backward_steps, seed_gradient
from .compiled import link_lines, record_compiled


class BadRequest(ValueError):
    """Something the page asked for that does not exist; the server answers 4xx with the message."""


class _Sources(Instrument):
    """Notes on each op the frames outside the engine that created it (innermost first)."""

    def forward(self, fn, inputs, output, seconds, recorded) -> None:
        fn.created_at = user_frames(limit=4)


def first_tensor(result: Any) -> Tensor:
    """The Tensor a function returned (the first one, for a tuple or list)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    found = next((t for t in items if isinstance(t, Tensor)), None)
    if found is None:
        raise TypeError(f"explore: the function returned {type(result).__name__}, not a Tensor")
    return found


class StepRecord:
    """The graph behind `fn(*args)` and the backward walk from it, ready to be served as JSON."""

    def __init__(self, fn: Callable, args: tuple):
        compiled = record_compiled(fn, args, first_tensor)  # first: the gradients it leaves are cleared below
        with profile() as self.profile:
            with record_modules(), _Sources():
                root = first_tensor(fn(*args))
            if root.grad_fn is None:
                raise ValueError("explore: the function's result has no graph (no input requires grad), "
                                 "so there is nothing to walk back through")
            self._name_nodes(root)
            self.calls = _calls(self._ops.values())
            self.to_host = root.backend.to_host
            self._saved: dict[str, dict] = {}
            self.nodes = {nid: self._describe(nid) for nid in self._tensors}  # while the graph holds its arrays
            for t in self._tensors.values():
                t.grad = None  # the page shows the gradients of this call alone
            grad = seed_gradient(root)
            self.seeded_with = "1" if grad is None else f"ones{tuple(root.shape)} (the result is not a scalar)"
            self.steps = backward_steps(root, grad, self.node_id)
        self._grads = {s.node: s.grad for s in self.steps}
        self.root = self.node_id(root.grad_fn)
        creation_order = sorted(self._ops.items(), key=lambda item: item[1].seq)
        self.compiled = link_lines(compiled, [(nid, fn.name) for nid, fn in creation_order])

    def _name_nodes(self, root: Tensor) -> None:
        tensors = list(tensors_in_graph(root))
        ops = sorted((t for t in tensors if t.grad_fn is not None), key=lambda t: t.grad_fn.seq, reverse=True)
        self._ops = {f"op{i}": t.grad_fn for i, t in enumerate(ops, 1)}
        self._tensors = {f"op{i}": t for i, t in enumerate(ops, 1)}
        counts = {"leaf": 0, "const": 0}
        for t in tensors:
            if t.grad_fn is None:
                kind = "leaf" if t.requires_grad else "const"
                counts[kind] += 1
                self._tensors[f"{kind}{counts[kind]}"] = t
        self._ids = {id(fn): nid for nid, fn in self._ops.items()}
        self._ids.update((id(t), nid) for nid, t in self._tensors.items() if t.grad_fn is None)

    def node_id(self, node: Function | Tensor) -> str:
        """The page's id of an op (a Function), of the tensor an op made, or of a leaf."""
        if isinstance(node, Tensor) and node.grad_fn is not None:
            node = node.grad_fn
        return self._ids[id(node)]

    def _describe(self, nid: str) -> dict:
        """What the graph view needs of a node, and (kept aside) the values backward will release."""
        t = self._tensors[nid]
        fn = t.grad_fn
        node = {"id": nid, "kind": nid.rstrip("0123456789"), "shape": list(t.shape), "dtype": str(t.dtype)}
        if fn is None:
            value = t.data if t.size == 1 else None
            title = t.name or ("constant" if value is None else f"{float(self.to_host(value).ravel()[0]):.4g}")
            return {**node, "title": title, "inputs": [], "scope": []}
        self._saved[nid] = fn.saved_values()
        frames = [{"file": f, "line": n, "function": name, "code": linecache.getline(f, n).strip()}
                  for f, n, name in getattr(fn, "created_at", [])]
        return {**node, "title": fn.name, "number": int(nid[2:]), "inputs": [self.node_id(u) for u in fn.inputs],
                "scope": [self.calls[id(call)]["id"] for call in getattr(fn, "scope", ())], "frames": frames,
                "line": f"{frames[0]['file'].rsplit('/', 1)[-1]}:{frames[0]['line']}" if frames else ""}

    # -- the JSON the page asks for ---------------------------------------------------------
    def graph(self) -> dict:
        """Every node (without its arrays) and every module call, for the graph view."""
        nodes = [{k: v for k, v in n.items() if k != "frames"} for n in self.nodes.values()]
        return {"nodes": nodes, "calls": list(self.calls.values()), "root": self.root,
                "seeded_with": self.seeded_with}

    def node(self, nid: str) -> dict:
        """All there is to know about one node, with its gradient after backward."""
        if nid not in self.nodes:
            raise BadRequest(f"no node {nid!r} in this graph")
        t = self._tensors[nid]
        grad = self._grads.get(nid) if t.grad_fn is not None else (None if t.grad is None else t.grad.data)
        detail = {**self.nodes[nid], "value": self._array(t.data), "grad": None if grad is None else self._array(grad)}
        if t.grad_fn is not None:
            detail["saved"] = [{"name": name, **describe_value(v, self.to_host)}
                               for name, v in self._saved[nid].items()]
            detail["op"] = _op_source(type(t.grad_fn))
        return detail

    def profiled(self) -> dict:
        """Time and memory per op name over the explorer's call and backward (`tx.inspect.profile`,
        with the explorer's own instruments on, so slower than a plain step), with the graph
        nodes of each op."""
        nodes: dict[str, list[str]] = {}
        for nid, fn in self._ops.items():
            nodes.setdefault(fn.name, []).append(nid)
        rows = [{"op": name, "calls": s.calls, "forward_ms": s.forward_s * 1e3, "backward_ms": s.backward_s * 1e3,
                 "held_bytes": s.held_bytes, "nodes": nodes.get(name, [])}
                for name, s in sorted(self.profile.stats.items(), key=lambda item: -item[1].total_s)]
        return {"rows": rows}

    def _array(self, a: Any) -> dict:
        a = self.to_host(a)
        return {**summary(a), "heat": heat(a)}

    def walk(self) -> dict:
        """The backward walk, one entry per node visited, in the engine's order (the arrays'
        values come one step at a time, from `walk_step`: a big model's would take seconds)."""
        steps = [{"number": s.number, "node": s.node, "op": s.op, "shape": list(s.grad.shape),
                  "sends": [{**send, "shape": list(a.shape)} for send, a in zip(s.sends, s.sent)],
                  "releases": s.releases} for s in self.steps]
        return {"steps": steps, "seeded_with": self.seeded_with}

    def walk_step(self, number: int) -> dict:
        """One step's arrays: the gradient arriving, and each one sent (statistics and heat-map)."""
        if not 1 <= number <= len(self.steps):
            raise BadRequest(f"backward has steps 1 to {len(self.steps)}, not {number}")
        s = self.steps[number - 1]
        return {"number": number, "node": s.node, "grad": self._array(s.grad),
                "sends": [self._array(a) for a in s.sent]}


def _calls(fns) -> dict[int, dict]:
    """Each module call that made an op, by id(): its page id, name, class and enclosing call."""
    calls: dict[int, dict] = {}
    for fn in sorted(fns, key=lambda fn: fn.seq):
        parent = None
        for call in getattr(fn, "scope", ()):
            if id(call) not in calls:
                calls[id(call)] = {"id": f"m{len(calls) + 1}", "name": call.name, "kind": call.kind,
                                   "parent": parent, "calls_modules": call.calls_modules}
            parent = calls[id(call)]["id"]
    return calls


def _op_source(cls: type) -> dict:
    """The op class's forward and backward, as written, with where they are."""
    def source(method: str) -> dict:
        code = getattr(cls, method)
        lines, start = inspect.getsourcelines(code)
        return {"file": inspect.getsourcefile(code), "line": start, "code": "".join(lines)}

    doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
    return {"name": cls.__name__, "doc": doc, "forward": source("forward"), "backward": source("backward")}
