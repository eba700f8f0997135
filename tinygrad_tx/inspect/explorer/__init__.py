"""See inside in a browser: `tx.inspect.explore(fn, *args)` serves a page about one call of `fn`.

    tx.inspect.explore(loss_of, x, w_q, w_k, w_v, w_o, target)
    # explorer at http://127.0.0.1:PORT/  (Ctrl-C to stop)

The page shows the graph behind `fn`'s result (module calls fold into boxes,
a click opens them), and a click on a node shows the line that created it, its
inputs, value, gradient and saved arrays, and its op's forward and backward
source. Backward can be walked step by step (buttons or arrow keys) in the
engine's own order, with each gradient as it arrives. The engine computes all
of it (`step.py`, `backward.py`); the page only draws. For a trained
translation run, `python -m models explore RUN_DIR` adds translation and
training views to the same page (models/translate/explore.py).
"""
from __future__ import annotations

from typing import Any, Callable

from .server import Explorer
from .step import BadRequest, StepRecord

__all__ = ["explore", "explorer_for", "step_endpoints", "Explorer", "StepRecord", "BadRequest"]


def step_endpoints(record: StepRecord, title: str = "explore") -> dict[str, Callable[[dict], Any]]:
    """The JSON endpoints of the graph, backward and compiled views of one recorded step."""
    return {
        "/api/info": lambda params: {"title": title, "views": ["graph", "compiled"]},
        "/api/graph": lambda params: record.graph(),
        "/api/node": lambda params: record.node(str(params.get("id", ""))),
        "/api/walk": lambda params: record.walk(),
        "/api/walk_step": lambda params: record.walk_step(_whole(params.get("n"), "n")),
        "/api/compiled": lambda params: record.compiled,
        "/api/profile": lambda params: record.profiled(),
    }


def _whole(text: Any, name: str) -> int:
    if not isinstance(text, str) or not text.isdigit():
        raise BadRequest(f"{name} must be a whole number, not {text!r}")
    return int(text)


def explorer_for(fn: Callable, *args: Any) -> Explorer:
    """The explorer of one call `fn(*args)`, not yet serving (see `Explorer.serve`)."""
    return Explorer(get=step_endpoints(StepRecord(fn, args), getattr(fn, "__qualname__", "explore")))


def explore(fn: Callable, *args: Any, port: int | None = None, open: bool = False,
            host: str = "127.0.0.1") -> None:
    """Call `fn(*args)`, run backward from its result, and serve the page about it until Ctrl-C.

    `fn` returns a Tensor (or a tuple whose first Tensor is the result); a result
    that is not a scalar is walked back from a gradient of ones. `port` None picks
    a free one; `open` opens the page in the default browser.
    """
    explorer_for(fn, *args).serve(host, port, open)
