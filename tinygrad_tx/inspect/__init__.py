"""Instruments for looking inside autograd (`tx.inspect`); docs/inspect.md is a tour of
them with their output.

- graph views: `graph_text(t)`, `to_dot(t)`, `render(t, "graph.svg")`, with
  `retain_grads(t)` to keep every gradient and, for models, `record_modules()`
  and `collapse=` to draw each module call as one box;
- `backward_plan(t)` (also `tx.backward_plan`): the walk backward will make, printed step by step;
- `trace_backward()`: every node backward visits, in order, with its gradients;
- `detect_anomaly()`: the first NaN or Inf, with its op and line;
- `profile()`: time and memory per op;
- `name_parameters(model)` and `attention_maps(model)`; module hooks live on `nn.Module`;
- `explore(fn, *args)`: all of the above for one call of `fn`, in a browser page.

All of them observe the engine through one list of observers (`tinygrad_tx/observers.py`,
whose `Observer` they subclass: `Instrument` here), which is empty, and so free, unless one
of them is active.
"""
from ..plan import BackwardPlan, PlanStep, backward_plan
from .anomaly import AnomalyError, detect_anomaly
from .graph import build_graph, graph_text, render, retain_grads, tensors_in_graph, to_dot
from .instrument import Instrument
from .modules import ModuleCall, attention_maps, name_parameters, record_modules
from .profiler import OpStats, profile
from .trace import trace_backward



def explore(fn, *args, port: int | None = None, open: bool = False, host: str = "127.0.0.1", html=None):
    """Serve a browser page about one call `fn(*args)`: its graph, backward step by step, its
    compiled form; or, with `html=FILE`, write it as one self-contained file and return it
    (shown inline in Jupyter). See `tinygrad_tx.inspect.explorer`, imported here only when
    used: the web server's modules would slow down every `import tinygrad_tx`."""
    from .explorer import explore as serve

    return serve(fn, *args, port=port, open=open, host=host, html=html)


__all__ = ["graph_text", "to_dot", "render", "retain_grads", "build_graph", "tensors_in_graph", "trace_backward",
           "detect_anomaly", "AnomalyError", "profile", "OpStats", "record_modules", "ModuleCall",
           "name_parameters", "attention_maps", "Instrument", "explore", "backward_plan", "BackwardPlan", "PlanStep"]
