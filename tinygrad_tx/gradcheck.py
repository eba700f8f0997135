"""Finite-difference gradient checks (Chainer's rigour, PyTorch's names).

`gradcheck(fn, inputs)` compares the gradients backward computes with central
differences (f(x + ε) - f(x - ε)) / 2ε, in float64: in float32 the difference of
two nearly equal numbers keeps only a few digits and checks fail for no reason.

It differentiates L = Σ fn(x) · u for a *random* upstream gradient u, never a
plain sum: Σ softmax(x) is constant, so a sum-based check would pass any
softmax gradient at all. Small inputs are checked element by element; large
ones along random directions d, comparing ∇L·d with (L(x + εd) - L(x - εd)) / 2ε.
"""
from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np

from .tensor import grad
from .tensor import Tensor


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree; the message says where."""


def gradcheck(fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              max_elements: int = 256, n_directions: int = 12, seed: int = 0,
              raise_exception: bool = True) -> bool:
    """True if every input's gradient matches finite differences; raises GradcheckError otherwise.

    `inputs`: Tensors (those with requires_grad=True are checked) and any other
    arguments, passed to `fn` in order. Floating tensors are upcast to float64.
    """
    rng = np.random.default_rng(seed)
    xs = [_as_float64(x, i) for i, x in enumerate(inputs)]
    checked = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True, so there is nothing to check")
    upstream = [_random_like(o, rng) for o in _outputs(fn(*xs))]

    def loss(args) -> Tensor:
        return sum(((o * u).sum() for o, u in zip(_outputs(fn(*args)), upstream)), start=0.0)

    total = loss(xs)
    analytic = (grad(total, [xs[i] for i in checked]) if isinstance(total, Tensor) and total.requires_grad
                else [None] * len(checked))
    for i, g in zip(checked, analytic):
        x = xs[i]
        g = np.zeros(x.shape) if g is None else g.numpy()

        def numerical(direction: np.ndarray) -> float:
            step = x.backend.from_host(eps * direction)
            plus, minus = list(xs), list(xs)
            plus[i] = Tensor(x.data + step, requires_grad=True)  # fn may differentiate it (gradgradcheck)
            minus[i] = Tensor(x.data - step, requires_grad=True)
            return (_value(loss(plus)) - _value(loss(minus))) / (2 * eps)

        if x.size <= max_elements:
            probes = ((f"element {tuple(map(int, np.unravel_index(e, x.shape)))}", _one_hot(x.shape, e),
                       g.reshape(-1)[e]) for e in range(x.size))
        else:
            probes = ((f"random direction {k}", d, float((g * d).sum()))
                      for k, d in enumerate(rng.standard_normal((n_directions, *x.shape))))
        for where, direction, a in probes:
            n = numerical(direction)
            if not abs(a - n) <= atol + rtol * abs(n):
                if not raise_exception:
                    return False
                name = f" ({x.name})" if x.name else ""
                raise GradcheckError(f"gradcheck: input {i}{name} of shape {x.shape}, {where}: "
                                     f"analytic {a:.10g}, numerical {n:.10g}, difference {a - n:.3g}")
    return True


def gradgradcheck(fn: Callable, inputs: Sequence, seed: int = 0, **kwargs) -> bool:
    """gradcheck of the gradient itself: checks second derivatives (needs create_graph support)."""
    xs = [_as_float64(x, i) for i, x in enumerate(inputs)]
    wanted = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and x.requires_grad]
    rng = np.random.default_rng(seed + 1)
    upstream = [_random_like(o, rng) for o in _outputs(fn(*xs))]
    for u in upstream:
        u.requires_grad = True  # the first derivative is linear in u: check that part too

    def first_derivatives(*args):
        n = len(xs)
        outs = _outputs(fn(*args[:n]))
        total = sum(((o * u).sum() for o, u in zip(outs, args[n:])), start=0.0)
        grads = grad(total, [args[i] for i in wanted], create_graph=True)
        return tuple(g if g is not None else args[i] * 0.0 for g, i in zip(grads, wanted))

    return gradcheck(first_derivatives, [*xs, *upstream], seed=seed, **kwargs)


def _as_float64(x, position: int):
    if not isinstance(x, Tensor) or x.dtype.kind != "f":
        return x
    if x.dtype != np.float64:
        warnings.warn(f"gradcheck: input {position} is {x.dtype}; checking in float64 instead "
                      "(finite differences in low precision fail for no reason)", stacklevel=3)
    copy = Tensor(x.backend.cast(x.data, np.float64), requires_grad=x.requires_grad, name=x.name)
    return copy


def _outputs(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _random_like(t: Tensor, rng: np.random.Generator) -> Tensor:
    return Tensor(t.backend.from_host(rng.standard_normal(t.shape).astype(t.dtype)))


def _one_hot(shape: tuple, flat_index: int) -> np.ndarray:
    d = np.zeros(int(np.prod(shape)))
    d[flat_index] = 1.0
    return d.reshape(shape)


def _value(t) -> float:
    return float(t.item()) if isinstance(t, Tensor) else float(t)
