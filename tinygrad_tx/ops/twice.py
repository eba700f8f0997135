"""One gradient formula an op, fast on raw arrays and differentiable again: the two ways.

An op's `backward` is its gradient's formula, written once with operators and `self.xp`, so that
the engine can run it on raw arrays (a step's backward) and on Tensors (`create_graph=True`,
where every step of it is recorded and can be differentiated again). Two kinds of op need more
than operators to be fast, and each has a way that keeps the formula one:

- **A gradient that is an op of its own** (Chainer's `_SoftmaxGrad`). Getitem's and Embedding's
  gradient is a scatter-add, `ScatterAdd`, whose own gradient is indexing again. `grad_op(self,
  ScatterAdd, g, ...)` in a backward runs the op's forward on raw arrays, and on Tensors applies
  it, a node of the graph. The same serves a value that forward saved as a plain array, which
  a graph would see as a constant (softmax's output): the formula asks for it again as an op.
- **A gradient computed in place.** LayerNorm, CrossEntropy, Attention and the tanh-GELU write
  their gradient on raw arrays into buffers they just made, from what forward saved, with the
  fast row reductions of kernels.py: three to five times fewer passes over memory. The op shows
  the readable formula as its `backward`; `@fast_backward(kernel)` names the in-place version,
  which lives in kernels.py and runs in the formula's place on raw arrays. tests/ops/
  test_gradients.py checks, for every case of every op, that both give the same gradient.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from ..function import Function


def grad_op(op: Function, cls: type[Function], *inputs: Any, **params: Any) -> Any:
    """`cls` applied to `inputs` inside `op`'s backward: on Tensors (create_graph) a node of the
    graph, differentiable in its turn; on raw arrays its forward alone, with nothing recorded."""
    if op.creating_graph:
        return cls.apply(*inputs, **params)
    inner = cls()
    inner.backend, inner.xp = op.backend, op.xp
    return inner.forward(*inputs, **params)


def fast_backward(kernel: Callable[..., Any]) -> Callable[[type], type]:
    """Class decorator: on raw arrays the op's gradients are `kernel(op, g, *inputs)`, the in-place
    version of its `backward` (kernels.py); on Tensors, `backward` itself. A kernel returns
    NotImplemented for the cases it has no faster way for (the formula then runs as written)."""
    def decorate(cls: type) -> type:
        formula = cls.backward

        @functools.wraps(formula)  # the explorer and `inspect` show the formula
        def backward(self, g, *inputs):
            if not self.creating_graph:
                grads = kernel(self, g, *inputs)
                if grads is not NotImplemented:
                    return grads
            return formula(self, g, *inputs)

        backward.kernel = kernel  # for the test that holds the two equal (and any decorator's copy of it)
        cls.backward = backward
        return cls

    return decorate
