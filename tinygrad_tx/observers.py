"""Who watches the engine, and the one way the engine tells them.

Instruments (`tx.inspect`'s profiler, trace and anomaly finder, and `tx.jit`'s
recorder) put themselves on the list `active` for the length of a `with` block
(`inspect.Instrument`). The engine tells them what happens only through the
`show_*` functions below and `replayable`; each calls the method of the same
name on every active observer (`inspect.Instrument` documents the methods).

With no instrument on, `active` is empty and costs next to nothing: the two hot
paths, an op's forward and a backward step, check `if observers.active:` once;
the rarer announcements (a host read, a module call) simply call their function,
which loops over no observer.

This module imports nothing from the engine, so every layer, the backend
included, may announce through it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

active: list = []
"""The observers now watching, innermost last; empty unless an instrument is on."""


def show_forward(fn: Any, inputs: tuple, params: dict, output: Any, seconds: float, recorded: bool) -> None:
    """An op ran forward (`forward(fn, inputs, output, seconds, recorded)`, then `op(...)` with its params);
    `recorded`: its node is kept for backward."""
    for observer in tuple(active):
        observer.forward(fn, inputs, output, seconds, recorded)
        observer.op(fn, inputs, params, output, recorded)


def show_backward_begin(root: Any, grad: Any, plan: Any, create_graph: bool, inputs: Any) -> None:
    """A backward is about to run `plan` (a `BackwardPlan`) from `root` with gradient `grad`."""
    for observer in tuple(active):
        observer.backward_begin(root, grad, plan, create_graph, inputs)


def show_backward(fn: Any, grad: Any, grads: list, seconds: float) -> None:
    """A step of the plan ran `fn.backward` in `seconds`; `grads`: what it sent to each input
    (summed back to the input's shape; None where it sent nothing)."""
    for observer in tuple(active):
        observer.backward(fn, grad, grads, seconds)


def show_backward_end() -> None:
    """The backward announced by `show_backward_begin` has finished (or failed)."""
    for observer in tuple(active):
        observer.backward_end()


def show_read(t: Any, how: str = "read on the host (item(), numpy(), print or if)") -> None:
    """A value leaves the graph (`how`): read on the host, where Python may branch on it, or cast or
    copied outside ops; `t` None: numbers drawn outside ops (`tx.randn`). A recording such as
    `tx.jit`'s could only keep such a value fixed."""
    for observer in tuple(active):
        observer.read(t, how)


def show_side_effect(how: str) -> None:
    """A change made outside ops and replayable calls (`how`: a tensor's `.data` replaced, a hook
    registered, an instrument turned on). A recording such as `tx.jit`'s refuses it: a replay makes
    only the ops and calls, so it would not make this change again."""
    for observer in tuple(active):
        observer.side_effect(how)


def show_module(module: Any) -> None:
    """A module is called (what `tx.jit` records: its mode and hooks)."""
    for observer in tuple(active):
        observer.module(module)


def show_stateful(obj: Any) -> None:
    """An object whose state replayable calls change was made (an optimizer, a schedule). `tx.jit`
    refuses those calls on one made inside the function it records: eager makes a fresh one at each
    call, a replay would keep using the recording's."""
    for observer in tuple(active):
        observer.stateful(obj)


def show_collective(name: str, seconds: float) -> None:
    """Data parallelism spent `seconds` communicating (`name`: "all_reduce")."""
    for observer in tuple(active):
        observer.collective(name, seconds)


def replayable(function: Callable) -> Callable:
    """Mark a function that changes state outside the graph, on raw arrays (an optimizer's
    `step` and `zero_grad`, `clip_grad_norm`, reseeding), so that observers see each call as
    `call(function, args, kwargs, result)`: `tx.jit` records it and calls it again at replay."""

    @functools.wraps(function)
    def announced(*args, **kwargs):
        result = function(*args, **kwargs)
        for observer in tuple(active):
            observer.call(function, args, kwargs, result)
        return result

    return announced
