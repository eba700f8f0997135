"""Where a backward walk's gradients end: the leaves' `.grad`, or, for `tx.grad`, the tensors asked for.

A walk sums each leaf's gradient while it runs (`backward.py`) and gives it to the leaf once
(`LeafSink.deliver`): the leaf's hooks see the whole gradient, then `.grad` grows, then its
post-accumulate-grad hooks run. Callbacks queued during the walk (`queue_callback`: where
DataParallel waits for its all-reduces) run after the last delivery. Eager backward and a
`tx.jit` replay of a backward deliver through the same sink.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


class LeafSink:
    """The end of one walk: leaf k's gradient is summed at `grads[first + k]` while the walk runs
    and delivered once (`deliver`); `finish` delivers the rest in the plan's order, then runs the
    callbacks queued during the walk. While entered (`with`), it is the walk running."""

    def __init__(self, leaves: Sequence[Any], grads: list, first: int, wrap: Callable,
                 create_graph: bool = False, targets: Sequence[Any] | None = None):
        self.leaves, self.grads, self.first, self.wrap = leaves, grads, first, wrap
        self.create_graph, self.targets = create_graph, targets
        self.captured: dict[int, Any] = {}  # tx.grad: id of a tensor asked for -> its gradient
        self.owned: set[int] = set()  # the arrays a leaf's .grad holds (see _own)
        self.callbacks: list = []  # see queue_callback

    def __enter__(self) -> "LeafSink":
        _walks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _walks.pop()

    def deliver(self, k: int) -> None:
        """Give leaf `k` its summed gradient, if it got one (none: every use sent None)."""
        g, leaf = self.grads[self.first + k], self.leaves[k]
        if g is None:
            return
        self.grads[self.first + k] = None
        if leaf._hooks:
            raw = not self.create_graph
            t = run_hooks(leaf._hooks, self.wrap(g, leaf.backend) if raw else g, f"the leaf {leaf.name or leaf.shape}")
            g = t.data if raw else t
        if self.targets is not None:
            self.captured[id(leaf)] = g
            return
        g = g if self.create_graph else self.wrap(_own(g, self.owned, leaf.backend), leaf.backend)
        leaf.grad = g if leaf.grad is None else leaf.grad + g
        for hook in leaf._ready_hooks:
            hook(leaf)

    def finish(self) -> list | None:
        """Deliver the rest; the gradients asked for (`tx.grad`), or None after the callbacks ran."""
        for k in range(len(self.leaves)):
            self.deliver(k)
        if self.targets is not None:
            got = [self.captured.get(id(t)) for t in self.targets]
            if self.create_graph:
                return got
            return [None if g is None else self.wrap(g, t.backend) for g, t in zip(got, self.targets)]
        for callback in self.callbacks:
            callback()
        return None


def run_hooks(hooks: Sequence[Callable], g: Any, what: str) -> Any:
    """Call each hook with the gradient (a Tensor); a returned tensor replaces it, and must keep
    its shape and dtype: everything after it (`.grad`, the optimizer) expects them."""
    for hook in hooks:
        replaced = hook(g)
        if replaced is not None and (replaced.shape != g.shape or replaced.dtype != g.dtype):
            raise RuntimeError(f"a hook on {what} returned a gradient of shape {replaced.shape}, dtype "
                               f"{replaced.dtype} for one of shape {g.shape}, dtype {g.dtype}; a hook may "
                               "change the gradient's values, not its shape or dtype")
        g = g if replaced is None else replaced
    return g


def _own(g: Any, owned: set, backend: Any) -> Any:
    """`g` itself if no other leaf holds it and it is a plain writeable array, else a copy: an
    op may hand one array to two inputs (`a + b` gives both g), and one leaf's `.grad` must not
    change when another's is edited in place."""
    writeable = getattr(getattr(g, "flags", None), "writeable", True)  # CuPy flags have no writeable
    if id(g) in owned or getattr(g, "base", None) is not None or not writeable:
        g = backend.xp.array(g, copy=True)
    owned.add(id(g))
    return g


_walks: list[LeafSink] = []  # the walks running now (a hook may start another)


def queue_callback(callback: Callable[[], None]) -> None:
    """Call `callback()` once the walk now running has delivered every gradient (once
    per walk, however often it is queued). DataParallel waits for its all-reduces there,
    so that `loss.backward()` returns with the averaged gradients in place."""
    if not _walks:
        raise RuntimeError("queue_callback outside backward: call it from a gradient hook")
    callbacks = _walks[-1].callbacks
    if callback not in callbacks:
        callbacks.append(callback)
