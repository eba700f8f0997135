"""One call of a function of tensors, recorded for the explorer: its graph, then its backward.

`StepRecord(fn, args)` runs `fn(*args)` with two instruments on: `record_modules`
(which module call made each op, for the collapsible boxes) and `_Sources`, which
notes the source lines that created each op and the op's keyword params. It then
describes every node of the graph behind the result (the first Tensor `fn` returns)
while the graph still holds its arrays, and runs backward from it (`backward.py`), so
the page can show each node's value, what it saved, and its gradient. The page asks
for these as JSON: `graph()`, `node(id)`, `walk()` and `walk_step(n)`, `compiled` (the
`tx.jit` record of the same call, made first), `profiled()` and `parts(id)` (an
attention node opened into its parts, `parts.py`).

One numbering everywhere: `#k` is the k-th op backward visits (the numbers
`graph_text` and `trace_backward` print), so backward step k is node #k; the
compiled view and the profile are written in the same numbers. Node ids say what a
node is: `op3` is #3, `leaf2` a tensor that requires grad, `const1` one that does
not; `m4` is the fourth module call.
"""
from __future__ import annotations

import inspect
import linecache
import sys
from typing import Any, Callable

from ... import Tensor
from ..graph import tensors_in_graph
from ..instrument import ENGINE_DIR, Instrument
from ..modules import record_modules
from ..profiler import profile
from .arrays import describe_value, heat, summary
from .backward import backward_steps, seed_gradient
from .compiled import link_lines, record_compiled
from .module_walk import module_steps
from .params import BadRequest, whole
from .words import OpView, module_words, op_words

FRAMES = 4
"""How many frames of the user's code "created by" shows, innermost first."""
BIG = 1 << 20
"""The walk's arrays of at least this many values have their statistics made with the record: those of
an M model's (32, 64, 8000) logits take 40 ms, most of a walk step's 100."""
RowLabels = Callable[[tuple, "str | None"], "tuple[list[str] | None, list[str] | None]"]
"""An array's shape and node id -> labels of the rows and columns of its heat-map (None: none), e.g. tokens."""


class _Sources(Instrument):
    """Notes, for each op, the user's frames that created it and its keyword params.

    The user's frames are those outside the engine and below `outside`, the frames
    that called the explorer (its command line, a notebook's runner): only the code
    that `fn` runs is the user's."""

    def __init__(self, outside: set):
        self.outside, self.frames, self.params = outside, {}, {}

    def forward(self, fn, inputs, params, output, seconds, recorded) -> None:
        frames, frame = [], sys._getframe(1)
        while frame is not None and frame not in self.outside and len(frames) < FRAMES:
            if not frame.f_code.co_filename.startswith(ENGINE_DIR):
                frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        self.frames[id(fn)] = frames
        self.params[id(fn)] = params


def first_tensor(result: Any) -> Tensor:
    """The Tensor a function returned (the first one, for a tuple or list)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    found = next((t for t in items if isinstance(t, Tensor)), None)
    if found is None:
        raise TypeError(f"explore: the function returned {type(result).__name__}, not a Tensor")
    return found


def argument_names(fn: Callable, args: tuple) -> dict[int, str]:
    """id(tensor) -> the name of `fn`'s parameter it was passed as (`ws[1]` inside a list), so a
    tensor the user did not name still has one on the page: `target`, not "constant"."""
    try:
        bound = inspect.signature(fn).bind_partial(*args).arguments
    except (TypeError, ValueError):  # a builtin, or more args than parameters: no names
        return {}
    names = {}
    for name, value in bound.items():
        values = value if isinstance(value, (tuple, list)) else [value]
        for i, v in enumerate(values):
            if isinstance(v, Tensor):
                names.setdefault(id(v), name if values is not value else f"{name}[{i}]")
    return names


class StepRecord:
    """The graph behind `fn(*args)` and the backward walk from it, ready to be served as JSON.

    `seed`: the gradient backward starts from (default 1 for a scalar, ones otherwise);
    `labels`: names the rows and columns of an array's heat-map (the run's tokens);
    `compiled`: also record the step with `tx.jit` for the compiled view."""

    def __init__(self, fn: Callable, args: tuple, seed: Tensor | None = None, labels: RowLabels | None = None,
                 compiled: bool = True):
        outside = set(_stack())
        # first: the gradients the jit's call leaves are cleared below
        record = record_compiled(fn, args, first_tensor, seed) if compiled else {"refused": "not recorded"}
        self.labels = labels or (lambda shape, nid: (None, None))
        self.about: dict = {}  # which checkpoint and step it shows (set by a run's views)
        self.parts_made: dict[str, dict] = {}  # attention nodes opened into their parts (`parts.py`)
        self.readings: dict[str, dict] = {}  # a node's array read as a table (a run's prediction beside its target)
        self._summaries: dict[int, tuple] = {}  # id(array) -> (the array, its statistics): `_statistics`
        self.titles = argument_names(fn, args)
        with profile() as self.profile:
            with record_modules(), _Sources(outside) as sources:
                root = first_tensor(fn(*args))
            if root.grad_fn is None:
                raise ValueError("explore: the function's result has no graph (no input requires grad), "
                                 "so there is nothing to walk back through")
            self.sources = sources
            self._name_nodes(root)
            self.calls = _calls(self._ops.values())
            self.to_host = root.backend.to_host
            self._saved: dict[str, dict] = {}
            self._inputs: dict[str, tuple] = {}  # the arrays each op read (for its parts, `parts.py`)
            self.nodes = {nid: self._describe(nid) for nid in self._tensors}  # while the graph holds its arrays
            for t in self._tensors.values():
                t.grad = None  # the page shows the gradients of this call alone
            grad = seed if seed is not None else seed_gradient(root)
            if seed is not None:
                self.seeded_with = f"the given gradient {tuple(root.shape)}"
            else:
                self.seeded_with = "1" if grad is None else f"ones{tuple(root.shape)} (the result is not a scalar)"
            self.steps = backward_steps(root, grad, self.node_id)
        self._grads = {s.node: s.grad for s in self.steps}
        for a in (a for s in self.steps for a in (s.grad, *s.sent) if a.size >= BIG):
            self._statistics(a)  # now, with the record: the step that shows it answers at once
        self.modules = module_steps(self.nodes, {c["id"]: c for c in self.calls.values()}, self.steps)
        self._module_of = {self.steps[n - 1].node: m.number for m in self.modules for n in m.ops}
        self.root = self.node_id(root.grad_fn)
        creation_order = sorted(self._ops.items(), key=lambda item: item[1].seq)
        self.compiled = link_lines(record, [(nid, fn.name) for nid, fn in creation_order])

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

    def node_id(self, node: Any) -> str:
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
            title = t.name or self.titles.get(id(t)) or (
                self._constant_name(t) if value is None else f"{float(self.to_host(value).ravel()[0]):.4g}")
            return {**node, "title": title, "inputs": [], "scope": []}
        self._saved[nid] = fn.saved_values()
        self._inputs[nid] = tuple(fn.arrays)
        frames = [{"file": f, "line": n, "function": name, "code": linecache.getline(f, n).strip()}
                  for f, n, name in self.sources.frames.get(id(fn), [])]
        return {**node, "title": fn.name, "number": int(nid[2:]), "inputs": [self.node_id(u) for u in fn.inputs],
                "scope": [self.calls[id(call)]["id"] for call in getattr(fn, "scope", ())], "frames": frames,
                "line": f"{frames[0]['file'].rsplit('/', 1)[-1]}:{frames[0]['line']}" if frames else ""}

    def _constant_name(self, t: Tensor) -> str:
        """An unnamed constant, named by where it is used: "constant in encoder.embed.positions",
        the module call of the first op that reads it (or "constant" outside any module)."""
        users = [fn for fn in self._ops.values() if any(u is t for u in fn.inputs)]
        scope = getattr(min(users, key=lambda fn: fn.seq), "scope", ()) if users else ()
        return f"constant in {scope[-1].name}" if scope else "constant"

    # -- the JSON the page asks for ---------------------------------------------------------
    def graph(self) -> dict:
        """Every node (without its arrays) and every module call, for the graph view."""
        nodes = [{k: v for k, v in n.items() if k != "frames"} for n in self.nodes.values()]
        return {"nodes": nodes, "calls": list(self.calls.values()), "root": self.root,
                "seeded_with": self.seeded_with}

    def node(self, nid: str) -> dict:
        """All there is to know about one node, with its gradient after backward."""
        if nid not in self.nodes:
            raise BadRequest(f"no node {nid[:40]!r} in this graph")
        t = self._tensors[nid]
        grad = self._grads.get(nid) if t.grad_fn is not None else (None if t.grad is None else t.grad.data)
        detail = {**self.nodes[nid], "value": self.array(t.data, nid),
                  "grad": None if grad is None else self.array(grad, nid),
                  "used_by": [n["id"] for n in self.nodes.values() if nid in n["inputs"]]}
        if t.grad_fn is not None:
            detail["saved"] = [{"name": name, **(self.array(v) if _is_array(v) else describe_value(v, self.to_host))}
                               for name, v in self._saved[nid].items()]
            detail["params"] = [{"name": name, **describe_value(v, self.to_host)}
                                for name, v in self.sources.params.get(id(t.grad_fn), {}).items()]
            detail["op"] = op_text(type(t.grad_fn))
        if nid in self.readings:
            detail["reading"] = self.readings[nid]
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

    def array(self, a: Any, nid: str | None = None) -> dict:
        """An array (of node `nid`) as the page shows it: statistics and a heat-map, labelled where we can."""
        host = self.to_host(a)
        return {**self._statistics(a, host), "heat": heat(host, *self.labels(tuple(host.shape), nid))}

    def _statistics(self, a: Any, host: Any = None) -> dict:
        """`summary(a)`, made once per array: the walk meets most arrays twice (sent by one step,
        arriving at the next), and a big one's statistics take most of a step's time."""
        if id(a) not in self._summaries:  # the array is kept with them, so that its id is never another's
            self._summaries[id(a)] = (a, summary(self.to_host(a) if host is None else host))
        return self._summaries[id(a)][1]

    def walk(self) -> dict:
        """The backward walk at both levels: one entry per node visited, in the engine's order, and
        one per module call (`module_walk.py`). The arrays come one step at a time, from `walk_step`
        and `module_step` (a big model's would take seconds)."""
        steps = [{"number": s.number, "node": s.node, "op": s.op, "shape": list(s.grad.shape),
                  "sends": [{**send, "shape": list(a.shape)} for send, a in zip(s.sends, s.sent)],
                  "releases": s.releases, "module": self._module_of[s.node]} for s in self.steps]
        modules = [m.to_json(self.nodes, self.steps, self._module_of) for m in self.modules]
        return {"steps": steps, "modules": modules, "seeded_with": self.seeded_with}

    def walk_step(self, n: Any) -> dict:
        """One op step's arrays (the gradient arriving, each one sent: statistics and heat-map), its
        sentence in plain words and its op's math. `n`: 1 to the number of steps."""
        number = whole(n, "n", 1, len(self.steps))
        s = self.steps[number - 1]
        return {"number": number, "node": s.node, "grad": self.array(s.grad, s.node),
                "sends": [self.array(a, send["to"]) for send, a in zip(s.sends, s.sent)],
                "words": op_words(self._view(s)), "doc": op_doc(type(self._ops[s.node])),
                "readings": [self.readings[s.node]] if s.node in self.readings else []}

    def module_step(self, n: Any) -> dict:
        """One module step's arrays (what arrives at its outputs, what it sends out of it) and its
        sentence. `n`: 1 to the number of module steps."""
        m = self.modules[whole(n, "n", 1, len(self.modules)) - 1]
        main = [self.steps[k - 1] for k in m.ops if k not in m.folded] or [self.steps[m.main - 1]]
        folded = [self.steps[k - 1].op for k in m.folded if len(main) > 1 or k != main[0].number]
        return {"number": m.number, "arrives": [self.array(self.steps[k - 1].grad, self.steps[k - 1].node)
                                                for k in m.arrives],
                "sends": [self.array(self.steps[k - 1].sent[i], self.steps[k - 1].sends[i]["to"]) for k, i in m.sends],
                "words": module_words([op_words(self._view(s)) for s in main], folded),
                "docs": [{"number": s.number, "op": s.op, "doc": op_doc(type(self._ops[s.node]))}
                         for s in main],
                "readings": [self.readings[node] for node in dict.fromkeys(self.steps[k - 1].node for k in m.arrives)
                             if node in self.readings]}

    def _view(self, s) -> OpView:
        """What the sentence of op step `s` may read, on the host."""
        host = self.to_host
        fn = self._ops[s.node]
        return OpView(s.op, tuple(s.grad.shape), tuple(host(a) for a in self._inputs[s.node]),
                      {k: host(v) if _is_array(v) else v for k, v in self._saved[s.node].items()},
                      self.sources.params.get(id(fn), {}), host(s.grad),
                      {send["input"]: host(a) for send, a in zip(s.sends, s.sent)},
                      {send["input"]: send["summed_from"] for send in s.sends if send["summed_from"]})

    # -- one node's pieces, for `parts.py` ----------------------------------------------------
    def tensor(self, nid: str) -> Tensor:
        """The tensor of node `nid` (its op's output, or the leaf)."""
        return self._tensors[nid]

    def function(self, nid: str) -> Any:
        """The op (a Function) of node `nid`; a request for anything else is a BadRequest."""
        if nid not in self._ops:
            raise BadRequest(f"no op {nid[:40]!r} in this graph")
        return self._ops[nid]

    def name_of(self, nid: str) -> str:
        """How the page names a node: "#3 Softmax", or a leaf's title."""
        node = self.nodes[nid]
        return f"#{node['number']} {node['title']}" if node["kind"] == "op" else node["title"]

    def inputs_of(self, nid: str) -> tuple:
        """The arrays op `nid` read in forward."""
        return self._inputs[nid]

    def saved_of(self, nid: str) -> dict:
        """What op `nid` saved for backward, by name."""
        return self._saved[nid]

    def gradient(self, nid: str) -> Any:
        """The gradient that arrived at node `nid` in the walk (None: none did)."""
        return self._grads.get(nid)

    def sent_by(self, nid: str) -> list[tuple[dict, Any]]:
        """What op `nid` sent its inputs in the walk: (route as JSON, array) pairs."""
        step = next(s for s in self.steps if s.node == nid)
        return list(zip(step.sends, step.sent))


def _is_array(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype")


def _stack() -> list:
    """The frames calling this one, outermost last."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


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


def op_text(cls: type) -> dict:
    """The op class's own docstring (its forward math and each input's gradient) and its forward
    and backward as written (through any decorator that wraps them), with where they are."""
    def source(method: str) -> dict:
        code = inspect.unwrap(getattr(cls, method))
        lines, start = inspect.getsourcelines(code)
        return {"file": inspect.getsourcefile(code), "line": start, "code": "".join(lines)}

    return {"name": cls.__name__, "doc": op_doc(cls), "forward": source("forward"), "backward": source("backward")}


def op_doc(cls: type) -> str:
    """The op class's own docstring ("" for none)."""
    own = cls.__dict__.get("__doc__")  # not inspect.getdoc: that gives a base class's text to an op without one
    return inspect.cleandoc(own) if own else ""
