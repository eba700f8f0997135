"""`Module`: the base of every layer and model — parameters, state dicts, modes, devices.

A module finds its parameters by looking through its attributes, including
lists, tuples and dicts: a parameter kept in a plain list still trains. A
parameter reachable by two paths (tied weights) is listed once, under the first.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..observers import replayable
from ..backends import get_backend
from ..tensor import Tensor
from .hooks import GLOBAL_HOOKS, HookSet, RemovableHandle, call_with_hooks


class Module:
    training = True
    _hooks: HookSet | None = None  # made by the first register_*_hook (see nn/hooks.py)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._hooks or GLOBAL_HOOKS):
            return self.forward(*args, **kwargs)
        return call_with_hooks(self, args, kwargs)

    # -- hooks (see nn/hooks.py) ------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, with_kwargs: bool = False) -> RemovableHandle:
        """`hook(module, args)` before each forward; may return new args (PyTorch's semantics)."""
        return self._hook_set().add("forward_pre", (hook, with_kwargs))

    def register_forward_hook(self, hook: Callable, *, with_kwargs: bool = False) -> RemovableHandle:
        """`hook(module, args, output)` after each forward, to record activations; may return a new output."""
        return self._hook_set().add("forward", (hook, with_kwargs))

    def register_full_backward_pre_hook(self, hook: Callable) -> RemovableHandle:
        """`hook(module, grad_output)` when the gradient of the output is ready; may return a replacement."""
        return self._hook_set().add("backward_pre", hook)

    def _hook_set(self) -> HookSet:
        if self._hooks is None:
            self._hooks = HookSet()
        return self._hooks

    # -- walking the tree ---------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        for name, value in vars(self).items():
            for path, item in _flatten(name, value):
                if isinstance(item, Module):
                    yield path, item

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator["Module"]:
        return (m for _, m in self.named_modules())

    def named_tensors(self) -> Iterator[tuple[str, Tensor]]:
        """Every Tensor attribute in the tree (parameters and fixed buffers), each once."""
        seen = set()
        for prefix, module in self.named_modules():
            for name, value in vars(module).items():
                for path, item in _flatten(name, value):
                    if isinstance(item, Tensor) and id(item) not in seen:
                        seen.add(id(item))
                        yield (f"{prefix}.{path}" if prefix else path), item

    def named_parameters(self) -> Iterator[tuple[str, Tensor]]:
        """Tensors with requires_grad=True, by dotted path (`encoder.layers.0.attn.w_q`)."""
        return ((n, t) for n, t in self.named_tensors() if t.requires_grad)

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self.named_parameters()]

    # -- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Host copies of every parameter, by path."""
        return {name: t.numpy() for name, t in self.named_parameters()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy arrays into the parameters; every key must match in name and shape."""
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        state = {name: value.numpy() if isinstance(value, Tensor) else value for name, value in state.items()}
        for name, t in params.items():
            array = np.asarray(state[name])
            if array.shape != t.shape:
                raise ValueError(f"load_state_dict: {name} has shape {array.shape} in the state dict "
                                 f"but {t.shape} in the model")
        for name, t in params.items():  # all checked first: a failed load changes nothing
            t.data = t.backend.from_host(np.array(state[name], dtype=t.dtype))  # a copy: no shared memory

    # -- modes and devices --------------------------------------------------------------
    @replayable  # timed by the profiler; `model.eval()` inside a jitted function is made again at each replay
    def train(self, mode: bool = True) -> "Module":
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, device: str) -> "Module":
        """Move every tensor in place, so optimizers holding the parameters keep working."""
        backend = get_backend(device)
        for _, t in self.named_tensors():
            if t.backend is not backend:
                t.data, t.backend = backend.from_host(t.backend.to_host(t.data)), backend
                t.grad = None if t.grad is None else t.grad.to(device)
        return self

    @replayable  # timed by the profiler; inside a jitted step made again at each replay, as the optimizer's
    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for module in self.modules():
            fn(module)
        return self

    def __repr__(self) -> str:
        children = "".join(f"\n  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self.named_children())
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self) -> str:
        return ""


def _flatten(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(path, item) for an attribute, looking inside lists, tuples and dicts."""
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _flatten(f"{name}.{i}", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(f"{name}.{key}", item)
    else:
        yield name, value


class Sequential(Module):
    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def named_children(self):
        return ((str(i), m) for i, m in enumerate(self.layers))  # paths "0", "1", … as in PyTorch

    def forward(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)


class ModuleList(Module):
    """A list of modules whose parameters are found (a plain list works too; this reads clearer)."""

    def __init__(self, modules: list[Module] | None = None):
        self.items = list(modules or [])

    def named_children(self):
        return ((str(i), m) for i, m in enumerate(self.items))

    def __getitem__(self, i: int) -> Module:
        return self.items[i]

    def __iter__(self) -> Iterator[Module]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def append(self, module: Module) -> None:
        self.items.append(module)
