"""See inside in a browser: `tx.inspect.explore(fn, *args)` serves a page about one call of `fn`.

    tx.inspect.explore(loss_of, x, w_q, w_k, w_v, w_o, target)
    # explorer at http://127.0.0.1:PORT/  (Ctrl-C to stop)
    tx.inspect.explore(loss_of, x, w_q, w_k, w_v, w_o, target, html="step.html")
    # the same page as one file, no server (shown inline when it ends a Jupyter cell)

The page shows the graph behind `fn`'s result (module calls fold into boxes,
a click opens them), and a click on a node shows the line that created it, its
inputs, value, gradient and saved arrays, and its op's text, forward and backward.
Backward can be walked step by step (buttons or arrow keys) in the engine's own
order, with each gradient as it arrives; an attention node opens into its parts.
The engine computes all of it (`step.py`, `backward.py`, `parts.py`); the page
only draws. For a trained translation run, `python -m models explore RUN_DIR` adds
translation and training views to the same page (models/translate/explore.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .export import SavedPage, check_page_path, write_page
from .params import BadRequest, text
from .parts import attention_parts
from .server import Explorer
from .step import StepRecord

__all__ = ["explore", "explorer_for", "step_endpoints", "step_answers", "Explorer", "StepRecord", "BadRequest",
           "Waiting", "SavedPage"]


class Waiting(Exception):
    """What a view shows is not there yet (a run before its first checkpoint): the page says so and asks again."""


def step_endpoints(current: StepRecord | Callable[[], StepRecord], title: str = "explore") -> dict[str, Callable]:
    """The JSON endpoints of the graph, backward and compiled views of one recorded step.

    `current`: the record, or a function giving the record to show now (it may change, as
    a training run writes a new checkpoint, or raise `Waiting`); each answer carries the
    record's `about` (which checkpoint and step it shows)."""
    def view(answer: Callable[[StepRecord, dict], Any]) -> Callable[[dict], Any]:
        def endpoint(params: dict) -> Any:
            try:
                record = current() if callable(current) else current
            except Waiting as e:
                return {"waiting": str(e)}
            return {**answer(record, params), "shows": getattr(record, "about", {})}
        return endpoint

    return {
        "/api/info": lambda params: {"title": title, "views": ["graph", "compiled"]},
        "/api/graph": view(lambda r, params: r.graph()),
        "/api/node": view(lambda r, params: r.node(text(params.get("id"), "id"))),
        "/api/walk": view(lambda r, params: r.walk()),
        "/api/walk_step": view(lambda r, params: r.walk_step(params.get("n"))),
        "/api/module_step": view(lambda r, params: r.module_step(params.get("n"))),
        "/api/compiled": view(lambda r, params: r.compiled),
        "/api/profile": view(lambda r, params: r.profiled()),
        "/api/parts": view(lambda r, params: _parts(r, params)),
        "/api/part_node": view(lambda r, params: _part(r, params).node(text(params.get("part"), "part"))),
        "/api/part_step": view(lambda r, params: _part(r, params).walk_step(params.get("n"))),
    }


def _parts_of(record: StepRecord, params: dict) -> dict:
    """The parts of the attention node `params["id"]`, made on first asking and kept with the record."""
    nid = text(params.get("id"), "id")
    if nid not in record.parts_made:
        record.parts_made[nid] = attention_parts(record, nid)
    return record.parts_made[nid]


def _parts(record: StepRecord, params: dict) -> dict:
    made = _parts_of(record, params)
    return {"graph": made["record"].graph(), "walk": made["record"].walk(), "roles": made["roles"],
            "check": made["check"]}


def _part(record: StepRecord, params: dict) -> StepRecord:
    return _parts_of(record, params)["record"]


def step_answers(record: StepRecord, title: str) -> dict[str, Any]:
    """Every answer the step views can give, by request (for a saved page, which has no server)."""
    get = step_endpoints(record, title)
    answers = {path: get[path]({}) for path in ("/api/info", "/api/graph", "/api/walk", "/api/compiled",
                                                "/api/profile")}
    for nid in record.nodes:
        answers[f"/api/node?id={nid}"] = get["/api/node"]({"id": nid})
    for step in record.steps:
        answers[f"/api/walk_step?n={step.number}"] = get["/api/walk_step"]({"n": str(step.number)})
    for module in record.modules:
        answers[f"/api/module_step?n={module.number}"] = get["/api/module_step"]({"n": str(module.number)})
    for nid, node in record.nodes.items():
        if node["title"] == "Attention":
            answers[f"/api/parts?id={nid}"] = get["/api/parts"]({"id": nid})
            parts = _part(record, {"id": nid})
            for part in parts.nodes:
                answers[f"/api/part_node?id={nid}&part={part}"] = get["/api/part_node"]({"id": nid, "part": part})
            for step in parts.steps:
                answers[f"/api/part_step?id={nid}&n={step.number}"] = get["/api/part_step"](
                    {"id": nid, "n": str(step.number)})
    return answers


def explorer_for(fn: Callable, *args: Any) -> Explorer:
    """The explorer of one call `fn(*args)`, not yet serving (see `Explorer.serve`)."""
    return Explorer(get=step_endpoints(StepRecord(fn, args), getattr(fn, "__qualname__", "explore")))


def explore(fn: Callable, *args: Any, port: int | None = None, open: bool = False, host: str = "127.0.0.1",
            html: str | Path | None = None) -> SavedPage | None:
    """Call `fn(*args)`, run backward from its result, and serve the page about it until Ctrl-C;
    or, with `html=FILE`, write the page as one self-contained file instead (no server) and
    return it as an object Jupyter shows inline.

    `fn` returns a Tensor (or a tuple whose first Tensor is the result); a result
    that is not a scalar is walked back from a gradient of ones. `port` None picks
    a free one; `open` opens the page in the default browser (or the saved file).
    """
    if html is not None:
        check_page_path(html)  # before any work
        title = getattr(fn, "__qualname__", "explore")
        page = write_page(step_answers(StepRecord(fn, args), title), html)
        if open:
            import webbrowser

            webbrowser.open(page.path.resolve().as_uri())
        return page
    explorer_for(fn, *args).serve(host, port, open)
    return None
