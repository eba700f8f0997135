"""The check of exercise 09, the walk: the learner's `backward(root, grad)` on small graphs
that catch the usual mistakes, against the engine's own walk (`tx.grad`).

Each graph marks the uses of the tensor that fans out (`keep(i, t)`): with some uses detached,
the engine gives the gradient that only the other uses send. A walk that overwrites where it
should add (or runs a node before all its users have sent their gradient) gets one of those,
and the check says so.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import Tensor

from .diagnosis import diagnose
from .op_check import Problem, check_each
from .report import Report, raised, wrong_value


@dataclass(frozen=True)
class Graph:
    """`build(leaves, keep)` makes the root from the leaves; `keep(i, t)` is `t` for use i of the
    tensor that fans out (`uses` of them), or `t` detached when that use is left out."""

    what: str
    shapes: tuple[tuple[int, ...], ...]
    build: Callable[[list, Callable], Tensor]
    uses: int = 0
    calls: int = 1  # backward calls, each on a fresh graph: .grad adds them up
    frozen: tuple[int, ...] = ()  # leaves that do not require grad


def _chain(x: Tensor, n: int) -> Tensor:
    for _ in range(n):
        x = x * 0.999
    return x


GRAPHS = (
    Graph("a chain: exp(tanh(x)·2), a root of shape (3, 4) with its gradient given", ((3, 4),),
          lambda L, keep: (L[0].tanh() * 2.0).exp()),
    Graph("fan-out at a leaf: x·x + x uses x three times", ((3, 4),),
          lambda L, keep: keep(0, L[0]) * keep(1, L[0]) + keep(2, L[0]), uses=3),
    Graph("fan-out at a node: h = tanh(x); h·exp(h) + h", ((2, 3),),
          lambda L, keep: (lambda h: keep(0, h) * keep(1, h).exp() + keep(2, h))(L[0].tanh()), uses=3),
    Graph("fan-out at a node, the other way round: h + exp(h)·h (a node marked seen before it is expanded "
          "must still run after every node that uses it)", ((2, 3),),
          lambda L, keep: (lambda h: keep(0, h) + keep(1, h).exp() * keep(2, h))(L[0].tanh()), uses=3),
    Graph("a diamond of matrix products: y = x @ w; (y @ y) + y", ((3, 3), (3, 3)),
          lambda L, keep: (lambda y: keep(0, y) @ keep(1, y) + keep(2, y))(L[0] @ L[1]), uses=3),
    Graph("broadcast: (x (3, 4) + b (4,)) · w: b's gradient summed back to (4,)", ((3, 4), (4,), (3, 4)),
          lambda L, keep: (L[0] + L[1]) * L[2]),
    Graph("a constant (requires_grad=False) gets no .grad", ((3,), (3,)), lambda L, keep: L[0] * L[1],
          frozen=(1,)),
    Graph("two backward calls: each leaf's .grad adds them up until zeroed", ((2, 2),),
          lambda L, keep: L[0].exp() * L[0], calls=2),
    Graph("a chain of 3,000 ops: Python's recursion stops near 1,000 calls", ((2,),),
          lambda L, keep: _chain(L[0], 3000)),
)


def check_walk(backward: Callable, report: Report, learner_file: Path | None) -> None:
    """Run the learner's `backward(root, grad)` on every graph, a line a graph in `report`."""
    check_each(GRAPHS, lambda graph: _check_graph(backward, graph, learner_file), report)


def _leaves(graph: Graph, rng: np.random.Generator) -> list[Tensor]:
    arrays = [rng.standard_normal(shape) for shape in graph.shapes]
    return [Tensor(a, requires_grad=i not in graph.frozen, name=f"leaf {i}") for i, a in enumerate(arrays)]


def _everything(i: int, t: Tensor) -> Tensor:
    return t


def _check_graph(backward: Callable, graph: Graph, learner_file: Path | None) -> None:
    leaves = _leaves(graph, np.random.default_rng(0))
    g = np.random.default_rng(1).standard_normal(graph.build(leaves, _everything).shape)
    for _ in range(graph.calls):
        root = graph.build(leaves, _everything)
        try:
            backward(root, g.copy())
        except RecursionError as e:
            raise Problem(f"RecursionError on {graph.what.split(':')[0]}: a recursive walk goes as deep as the "
                          "graph; collect the nodes with a list as an explicit stack instead") from e
        except Exception as e:  # noqa: BLE001 - whatever the learner's walk raised, said with where
            raise Problem(*raised(e, learner_file, "backward")) from e
    expected = _engine(graph, _everything, g)
    for i, leaf in enumerate(leaves):
        if i in graph.frozen:
            if leaf.grad is not None:
                raise Problem(f"leaf {i} does not require grad, yet got a .grad: send gradients only to leaves "
                              "with requires_grad (and to nodes)")
            continue
        if leaf.grad is None:
            raise Problem(f"leaf {i} (shape {leaf.shape}) got no .grad: every leaf that requires grad gets one")
        if not isinstance(leaf.grad, Tensor):
            raise Problem(f"leaf {i}'s .grad is a {type(leaf.grad).__name__}: make it a Tensor (Tensor(g)), as "
                          "optimizers read .grad.data")
        known = [("a walk that overwrites where it should add: only the gradient through some of this tensor's "
                  f"uses arrived (use {', '.join(str(u + 1) for u in used)} of {graph.uses}); add (+=) a gradient to "
                  "one already waiting, and run a node only after every node that uses it",
                  _engine(graph, _only(used), g)[i]) for used in _proper_subsets(graph.uses)]
        if graph.calls > 1:
            known.append(("the last backward replaced .grad: a leaf's .grad adds up every backward's gradient "
                          "until it is zeroed (leaf.grad = leaf.grad + g)", expected[i] / graph.calls))
        d = diagnose(leaf.grad.numpy(), expected[i], g.shape, known)
        if d is not None:
            raise Problem(*wrong_value(f"leaf {i}", leaf.shape, d))


def _engine(graph: Graph, keep: Callable, g: np.ndarray) -> list[np.ndarray | None]:
    """Each leaf's gradient as the engine's walk gives it, after `graph.calls` backward calls."""
    leaves = _leaves(graph, np.random.default_rng(0))
    wanted = [t for t in leaves if t.requires_grad]
    grads = tx.grad(graph.build(leaves, keep), wanted, grad_output=Tensor(g))
    by_leaf = iter(grads)
    return [None if not t.requires_grad else _zeros_if_none(next(by_leaf), t) * graph.calls for t in leaves]


def _zeros_if_none(grad: Tensor | None, leaf: Tensor) -> np.ndarray:
    return np.zeros(leaf.shape) if grad is None else grad.numpy()


def _only(used: tuple[int, ...]) -> Callable:
    return lambda i, t: t if i in used else t.detach()


def _proper_subsets(n: int):
    return [used for size in range(1, n) for used in itertools.combinations(range(n), size)]
