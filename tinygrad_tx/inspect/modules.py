"""Seeing the model in the graph: parameter names, module calls, attention maps.

`record_modules()` remembers, for every op created in its block, the stack of
module calls it was made in (`encoder` > `encoder.layers.0` > …); the graph
views use it to draw a whole module call as one box. It works through the
global module hooks and the engine's observer list, so none of it costs
anything outside the block.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from inspect import signature
from typing import Any, Iterator

from ..nn.hooks import register_module_forward_hook, register_module_forward_pre_hook
from ..nn.module import Module
from ..tensor import Tensor
from .instrument import Instrument


def name_parameters(model: Module) -> Module:
    """Name every unnamed parameter by its path in `model` (`encoder.layers.0.self_attn.w_q.weight`),
    so graph pictures, traces and gradcheck messages can say which weight they mean.
    Names given by hand are kept."""
    for path, t in model.named_parameters():
        if t.name is None:
            t.name = path
    return model


@dataclass(eq=False)
class ModuleCall:
    """One call of a module while `record_modules` was active."""

    module: Module
    path: str  # in the outermost model called ("" for that model itself)
    number: int  # 1 for this module's first call, 2 for its second…
    calls_modules: bool = False  # whether its forward called other modules
    outputs: list[tuple] = field(default_factory=list)  # (shape, dtype) of each tensor returned

    @property
    def kind(self) -> str:
        """The module's class, as `nn.Linear` for the engine's layers: the op that a layer runs
        can have the same name (the `Linear` op), and pictures must tell them apart."""
        cls = type(self.module)
        return f"nn.{cls.__name__}" if cls.__module__.startswith("tinygrad_tx.nn") else cls.__name__

    @property
    def name(self) -> str:
        name = self.path or self.kind
        return name if self.number == 1 else f"{name} (call {self.number})"


class record_modules(Instrument):
    """`with record_modules() as rec: out = model(x)` records which module call made each op.

    `rec.calls` lists the calls in order. Each op made in the block gets a
    `scope` (the stack of calls it was made in, outermost first) that
    `graph_text`, `to_dot` and `render` use with `collapse=`. The outermost
    model's parameters are named by their paths (`name_parameters`).
    """

    def __init__(self):
        self.calls: list[ModuleCall] = []
        self._stack: tuple[ModuleCall, ...] = ()
        self._paths: dict[int, str] = {}
        self._count: Counter = Counter()

    def __enter__(self) -> "record_modules":
        super().__enter__()  # first: an observer that refuses it (a jit recording) leaves no hook behind
        self._handles = [register_module_forward_pre_hook(self._enter_call),
                         register_module_forward_hook(self._exit_call)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._stack = ()
        super().__exit__(*exc)

    def _enter_call(self, module: Module, args: tuple) -> None:
        if not self._stack and id(module) not in self._paths:  # a new outermost model
            self._paths.update((id(m), path) for path, m in module.named_modules())
            name_parameters(module)
        self._count[id(module)] += 1
        call = ModuleCall(module, self._paths.get(id(module), type(module).__name__), self._count[id(module)])
        if self._stack:
            self._stack[-1].calls_modules = True
        self.calls.append(call)
        self._stack += (call,)

    def _exit_call(self, module: Module, args: tuple, output: Any) -> None:
        items = output if isinstance(output, (tuple, list)) else (output,)
        self._stack[-1].outputs = [(t.shape, t.dtype) for t in items if isinstance(t, Tensor)]
        self._stack = self._stack[:-1]

    def forward(self, fn, inputs, params, output, seconds, recorded) -> None:
        fn.scope = self._stack


@contextmanager
def attention_maps(model: Module) -> Iterator[dict[str, list[Tensor]]]:
    """Record the attention weights of every submodule whose forward takes `return_weights`
    (such as `models.MultiHeadAttention`), without changing what the model returns.

        with attention_maps(model) as maps:
            model(src, tgt_in)
        maps["decoder.layers.0.cross_attn"][0]  # (B, h, T, S), one entry per call

    Two module hooks per attention module do it: a pre-hook asks forward for the
    weights, a forward hook keeps them and hands the caller the output alone.
    """
    maps: dict[str, list[Tensor]] = {}
    handles = []
    for path, module in model.named_modules():
        if "return_weights" in signature(module.forward).parameters:
            handles += _record_weights(module, maps.setdefault(path or type(module).__name__, []))
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()


def _record_weights(module: Module, store: list) -> list:
    wanted = []  # per call in progress: did the caller ask for the weights itself?

    def ask(module, args, kwargs):
        wanted.append(kwargs.get("return_weights", False))
        return args, {**kwargs, "return_weights": True}

    def keep(module, args, kwargs, output):
        out, weights = output
        store.append(weights)
        return output if wanted.pop() else out

    return [module.register_forward_pre_hook(ask, with_kwargs=True),
            module.register_forward_hook(keep, with_kwargs=True)]
