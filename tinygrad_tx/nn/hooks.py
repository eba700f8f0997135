"""Module hooks, as in PyTorch: functions called around a module's forward and backward.

They let you look inside a model without editing it: record activations, read
attention maps, watch or change the gradient leaving a block. Every
`register_*` returns a `RemovableHandle`; `handle.remove()` (or leaving
`with handle:`) takes the hook off again.

- forward pre-hook `hook(module, args)`: before forward; may return new args.
- forward hook `hook(module, args, output)`: after forward; may return a new output.
  With `with_kwargs=True` both also get (and a pre-hook may return) the keyword arguments.
- full backward pre-hook `hook(module, grad_output)`: when the gradient of the
  module's output is ready; `grad_output` is a 1-tuple, and a returned 1-tuple
  replaces it. A module returning several tensors calls it once per tensor that
  takes part in the graph, since their gradients are ready at different times.

`register_module_forward_pre_hook` and `register_module_forward_hook` install a
hook on every module at once (`tinygrad_tx.inspect.record_modules` uses them).
Global pre-hooks run before a module's own, global forward hooks after its own,
so they see the call as the caller does. A module without hooks pays one check
per call and nothing else.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable

from ..tensor import Tensor

_keys = itertools.count()


class RemovableHandle:
    """Takes one hook off again: `handle.remove()`, or at the end of `with handle:`."""

    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class HookSet:
    """The hooks of one module (or, in `GLOBAL_HOOKS`, of all modules), in registration order.

    Forward hooks are stored as (function, with_kwargs) pairs.
    """

    def __init__(self):
        self.forward_pre: dict[int, tuple[Callable, bool]] = {}
        self.forward: dict[int, tuple[Callable, bool]] = {}
        self.backward_pre: dict[int, Callable] = {}

    def __bool__(self) -> bool:
        return bool(self.forward_pre or self.forward or self.backward_pre)

    def add(self, kind: str, entry: Any) -> RemovableHandle:
        hooks = getattr(self, kind)
        key = next(_keys)
        hooks[key] = entry
        return RemovableHandle(hooks, key)


GLOBAL_HOOKS = HookSet()
_NO_HOOKS = HookSet()


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """`hook(module, args)` before every module's forward (PyTorch's function of the same name)."""
    return GLOBAL_HOOKS.add("forward_pre", (hook, False))


def register_module_forward_hook(hook: Callable) -> RemovableHandle:
    """`hook(module, args, output)` after every module's forward (PyTorch's function of the same name)."""
    return GLOBAL_HOOKS.add("forward", (hook, False))


def call_with_hooks(module: Any, args: tuple, kwargs: dict) -> Any:
    """`module.forward(*args, **kwargs)` with the global hooks and the module's own around it.
    (`module` is a `Module`; module.py imports this file, so the class is not imported back.)"""
    own = module._hooks or _NO_HOOKS
    for hook, with_kwargs in (*GLOBAL_HOOKS.forward_pre.values(), *own.forward_pre.values()):
        if with_kwargs:
            args, kwargs = hook(module, args, kwargs) or (args, kwargs)
        else:
            args = _as_args(hook(module, args)) or args
    output = module.forward(*args, **kwargs)
    for hook, with_kwargs in (*own.forward.values(), *GLOBAL_HOOKS.forward.values()):
        result = hook(module, args, kwargs, output) if with_kwargs else hook(module, args, output)
        output = output if result is None else result
    if own.backward_pre:
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(functools.partial(_backward_pre, module, tuple(own.backward_pre.values())))
    return output


def _as_args(result: Any) -> tuple | None:
    """A pre-hook may return one new argument or a tuple of them, as in PyTorch."""
    return result if result is None or isinstance(result, tuple) else (result,)


def _tensors(output: Any) -> list[Tensor]:
    """The tensors a module returned: the output itself, or those in a returned tuple or list."""
    items = output if isinstance(output, (tuple, list)) else (output,)
    return [t for t in items if isinstance(t, Tensor)]


def _backward_pre(module: Any, hooks: tuple, grad: Tensor) -> Tensor:
    """The tensor hook that runs a module's backward pre-hooks on its output's gradient."""
    for hook in hooks:
        result = hook(module, (grad,))
        grad = grad if result is None else result[0]
    return grad
