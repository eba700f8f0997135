"""Optimizers (SGD, Adam, AdamW) and gradient clipping; learning-rate schedules are
`tinygrad_tx.schedules`.

An optimizer holds a list of parameters and, for each, a little state (Adam's two
running averages). `step()` reads every parameter's `.grad` and changes its `.data`:

- on raw backend arrays, so no graph is recorded (an update is not something we
  differentiate) and the same code runs on NumPy and CuPy (`xp`);
- in place, with state arrays allocated once and updated with `*=` / `+=`, so a step
  allocates only short-lived temporaries, in the parameter's own dtype (Python-float
  scalars keep float32 arrays float32);
- followed by `p.bump_version()`, so a graph that saved the old values refuses to
  backpropagate through them instead of giving a silently wrong gradient;
- `replayable`: observers see each call of `step`, `zero_grad` or `clip_grad_norm`: the
  profiler times it, and `tx.jit` records it and makes the same call at every replay.

The update rules are PyTorch's, term for term, so a trajectory matches torch.optim to
rounding error. One deliberate difference: Adam's step counter `t` counts `step()`
calls, one for all parameters (PyTorch keeps one per parameter; the two differ only
for a parameter that had no gradient on some steps).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import numpy as np

from .observers import replayable
from .backends import backend_of
from .backends.fused_adam import adam_kernel
from .tensor import Tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm"]


class Optimizer:
    """The base: parameters, the step counter, state and its (de)serialisation.

    A subclass lists its hyper-parameters (saved by `state_dict`) and implements
    `_update(param, grad, state, xp, decays)` for one parameter's raw arrays; `decays` is False
    for the parameters given as `no_decay`, which a weight decay leaves alone (biases and
    LayerNorm's gains, as PyTorch users put them in a parameter group of weight_decay 0).
    """

    hyperparameters: tuple[str, ...] = ("lr", "no_decay")
    state_names: frozenset[str] = frozenset()  # the arrays `_update` keeps for one parameter

    def __init__(self, params: Iterable[Tensor], lr: float, no_decay: Iterable[Tensor] = ()):
        _check_nonnegative(type(self).__name__, lr=lr)
        self.params = _unique_params(params)
        index = {id(p): i for i, p in enumerate(self.params)}
        exempt = list(no_decay)
        for p in exempt:
            if id(p) not in index:
                raise ValueError(f"{type(self).__name__}: a no_decay tensor (shape {getattr(p, 'shape', p)}) "
                                 "is not among the parameters")
        self.no_decay = tuple(sorted({index[id(p)] for p in exempt}))  # indices into params: saved as numbers
        self.lr = lr  # read at every step, so a schedule may change it
        self.t = 0  # number of step() calls so far
        self.state: dict[int, dict[str, Any]] = {}  # params[i] -> its arrays, made at its first update

    @replayable
    def zero_grad(self) -> None:
        """Forget the gradients (None rather than zeros: nothing to add into, nothing to allocate)."""
        for p in self.params:
            p.grad = None

    @replayable
    def step(self) -> None:
        """Update every parameter that has a gradient; those without one are left alone."""
        self.t += 1
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            self._update(p.data, p.grad.data, self._state(i, p), p.backend.xp, i not in self.no_decay)
            p.bump_version()

    def _update(self, param: Any, grad: Any, state: dict[str, Any], xp: Any, decays: bool) -> None:
        """Change `param` in place. `grad` may be shared with other tensors: never write into it."""
        raise NotImplementedError

    def _state(self, i: int, p: Tensor) -> dict[str, Any]:
        """The state arrays of params[i], moved along if `module.to()` moved the parameter."""
        state = self.state.setdefault(i, {})
        for name, array in list(state.items()):
            if not isinstance(array, p.backend.array_type):
                state[name] = p.backend.from_host(backend_of(array).to_host(array))
        return state

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Host copies of everything a resumed run needs (ready for `tx.save`)."""
        return {
            "optimizer": type(self).__name__,
            "t": self.t,
            "num_params": len(self.params),
            "hyperparameters": {name: getattr(self, name) for name in self.hyperparameters},
            "state": {str(i): {name: np.array(backend_of(a).to_host(a)) for name, a in arrays.items()}
                      for i, arrays in self.state.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` (also one that went through tx.save / tx.load).

        Everything is checked before anything changes, so a failed load leaves the
        optimizer as it was.
        """
        name = type(self).__name__
        missing = {"optimizer", "t", "num_params", "hyperparameters", "state"} - state.keys()
        if missing:
            raise ValueError(f"load_state_dict: the state has no {', '.join(sorted(missing))}")
        if state["optimizer"] != name:
            raise ValueError(f"load_state_dict: the state is {state['optimizer']}'s, not {name}'s")
        if state["num_params"] != len(self.params):
            raise ValueError(f"load_state_dict: the state is for {state['num_params']} parameters, "
                             f"this optimizer has {len(self.params)}")
        for key, arrays in state["state"].items():
            if not (isinstance(key, str) and key.isdigit() and int(key) < len(self.params)):
                raise ValueError(f"load_state_dict: state for parameter {key!r}; this optimizer has "
                                 f"parameters 0 to {len(self.params) - 1}")
            if set(arrays) != self.state_names:
                raise ValueError(f"load_state_dict: parameter {key} has state {sorted(arrays)}, "
                                 f"{name} keeps {sorted(self.state_names)}")
            p = self.params[int(key)]
            for array_name, array in arrays.items():
                if np.shape(array) != p.shape:
                    raise ValueError(f"load_state_dict: {array_name!r} of parameter {key} has shape "
                                     f"{np.shape(array)}, the parameter {p.shape}")
        self.t = int(state["t"])
        # a state saved before no_decay existed decayed every parameter
        for key, value in {"no_decay": (), **state["hyperparameters"]}.items():
            setattr(self, key, tuple(value) if isinstance(value, list) else value)  # JSON made betas a list
        self.state = {}
        for key, arrays in state["state"].items():
            p = self.params[int(key)]
            self.state[int(key)] = {array_name: p.backend.from_host(np.array(array, dtype=p.dtype))
                                    for array_name, array in arrays.items()}


def _check_nonnegative(optimizer: str, **values: float) -> None:
    """Each hyper-parameter a finite number >= 0 (a NaN learning rate would train NaN silently)."""
    for name, value in values.items():
        if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{optimizer}: {name} must be a finite number >= 0, not {value!r}")


def _unique_params(params: Iterable[Tensor]) -> list[Tensor]:
    """The parameters as a list, each once (tied weights must not be updated twice)."""
    unique: dict[int, Tensor] = {}
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"optimizer: parameter {i} is a {type(p).__name__}, not a Tensor "
                            "(pass model.parameters())")
        if not p.requires_grad:
            raise ValueError(f"optimizer: parameter {i} (shape {p.shape}) has requires_grad=False, "
                             "so it would never get a gradient")
        if not p.is_leaf:
            raise ValueError(f"optimizer: parameter {i} (shape {p.shape}) is not a leaf: it was computed "
                             "from other tensors, so its gradient is not kept")
        unique.setdefault(id(p), p)
    if not unique:
        raise ValueError("optimizer got an empty parameter list")
    return list(unique.values())


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's momentum, dampening, weight decay, Nesterov:

        g  = grad + weight_decay · p
        b  = g at the first update, then  b = momentum · b + (1 - dampening) · g
        p -= lr · (g + momentum · b   if nesterov else   b)       (just lr · g without momentum)
    """

    hyperparameters = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "no_decay")
    state_names = frozenset({"momentum_buffer"})

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, no_decay: Iterable[Tensor] = ()):
        _check_nonnegative("SGD", momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        super().__init__(params, lr, no_decay)
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov

    def _update(self, param, grad, state, xp, decays):
        if self.weight_decay and decays:
            grad = grad + self.weight_decay * param
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                state["momentum_buffer"] = buf = grad.copy()  # PyTorch starts the average at g, not 0
            else:
                buf *= self.momentum
                buf += (1 - self.dampening) * grad
            grad = grad + self.momentum * buf if self.nesterov else buf
        param -= self.lr * grad


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) with PyTorch's update; t counts step() calls from 1:

        g  = grad + weight_decay · p        (L2 penalty; AdamW decouples it instead)
        m  = β1 · m + (1 - β1) · g          running mean of gradients
        v  = β2 · v + (1 - β2) · g²         running mean of squared gradients
        m̂ = m / (1 - β1^t)                 bias correction: m and v start at 0, so early
        v̂ = v / (1 - β2^t)                 averages are too small by exactly these factors
        p -= lr · m̂ / (√v̂ + eps)
    """

    hyperparameters = ("lr", "betas", "eps", "weight_decay", "no_decay")
    state_names = frozenset({"m", "v"})
    decoupled_weight_decay = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, no_decay: Iterable[Tensor] = ()):
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{type(self).__name__}: betas must be two numbers in [0, 1), not {betas}")
        _check_nonnegative(type(self).__name__, eps=eps, weight_decay=weight_decay)
        super().__init__(params, lr, no_decay)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay

    def _update(self, param, grad, state, xp, decays):
        beta1, beta2 = self.betas
        if self.weight_decay and decays:
            if self.decoupled_weight_decay:
                param *= 1 - self.lr * self.weight_decay  # AdamW: shrink the weights directly
            else:
                grad = grad + self.weight_decay * param  # Adam: an L2 penalty in the gradient
        if not state:
            state["m"], state["v"] = xp.zeros_like(param), xp.zeros_like(param)
        m, v = state["m"], state["v"]
        bias1, bias2 = 1 - beta1 ** self.t, 1 - beta2 ** self.t
        fused = adam_kernel(xp, param.dtype)
        if fused is not None:  # on a GPU: the lines below as one kernel (fused_adam.py)
            fused(grad, 1 - beta1, beta1, 1 - beta2, beta2, math.sqrt(bias2), self.eps, self.lr / bias1, param, m, v)
            return
        # The formulas above, in place through one scratch array: each `a op b` below is a
        # pass over the parameter's size that would otherwise allocate its result.
        tmp = xp.multiply(grad, 1 - beta1, out=xp.empty_like(param))
        m *= beta1
        m += tmp
        xp.multiply(grad, 1 - beta2, out=tmp)
        tmp *= grad
        v *= beta2
        v += tmp
        denom = xp.sqrt(v, out=tmp)
        denom /= math.sqrt(bias2)
        denom += self.eps  # √v̂ + eps
        step = xp.divide(m, denom, out=tmp)
        step *= self.lr / bias1
        param -= step  # lr · m̂ / (√v̂ + eps)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): p -= lr · weight_decay · p
    before the Adam step. Folded into the gradient (Adam's L2), the decay would be divided
    by √v̂ and so would barely shrink the weights whose gradients are large."""

    decoupled_weight_decay = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, no_decay: Iterable[Tensor] = ()):
        super().__init__(params, lr, betas, eps, weight_decay, no_decay)


@replayable
def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most `max_norm`, as
    torch.nn.utils.clip_grad_norm_ does; returns the norm before clipping.

    One norm over all parameters keeps the update's direction. The scaled gradients are
    new arrays rather than written in place: the engine may hand one gradient array to
    two parameters (`a + b` passes the same gradient to both), which would be scaled twice.
    """
    grads = [p for p in {id(p): p for p in params}.values() if p.grad is not None]  # tied: once
    if not grads:
        return 0.0
    squares = sum(_sum_of_squares(p.grad.backend.xp, p.grad.data) for p in grads)
    total = math.sqrt(float(squares))  # the one host synchronisation
    scale = max_norm / (total + 1e-6)  # PyTorch's 1e-6 keeps a zero norm from dividing by zero
    if scale < 1.0:
        for p in grads:
            p.grad = Tensor._from_op(p.grad.data * scale, p.grad.backend)
    return total


def _sum_of_squares(xp: Any, g: Any) -> Any:
    """Σ g² as one BLAS dot product (5× faster than squaring, then summing, on a small model's
    gradients), in float32 at least, as PyTorch's norm, then float64 for the sum over tensors."""
    g = g if g.dtype.itemsize >= 4 else g.astype(np.float32)  # float16 sums overflow past 65504
    return xp.vdot(g, g).astype(np.float64)
