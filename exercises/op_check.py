"""The check of an op exercise: the learner's op, plugged into the engine, against finite
differences in float64 with a random upstream gradient, and against the engine's own op.

For each case (a shape that catches a usual mistake) it

1. runs the learner's forward through `Function.apply`, as the engine runs every op, and
   compares its output with the engine's own op (the forward is given: an edit may break it);
2. draws a random upstream gradient g (never all ones: Σ softmax(x) is constant, so a check
   of `.sum()` cannot see a wrong softmax gradient) and calls the learner's backward as the
   engine does, `node.backward(g, *node.arrays)`, checking it changed neither g nor its inputs;
3. compares each input's gradient with central finite differences of L = Σ op(x)·g in float64
   (the engine's own gradient is checked against them too, so no case passes vacuously), and
   on a mismatch names the input, the element, expected and got, and the likeliest cause;
4. then takes the same gradients through the engine's walk (`tx.grad`), and once in float32,
   the dtype training uses, where a gradient must keep its input's dtype.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx import Tensor

from .diagnosis import close, diagnose
from .report import Report, raised, wrong_value

EPS = 1e-6


@dataclass(frozen=True)
class Case:
    """One call of the op: `arrays(rng)` makes its inputs (floating arrays want a gradient;
    integer ones are ids), `params` its keyword arguments, `uses` which input each argument
    is ((0, 0): the same tensor twice, fan-out)."""

    what: str
    arrays: Callable[[np.random.Generator], list]
    params: dict = field(default_factory=dict)
    uses: tuple[int, ...] | None = None
    frozen: tuple[int, ...] = ()  # floating inputs that want no gradient (needs_grad False)


@dataclass(frozen=True)
class Slip:
    """A usual mistake of this op and the gradients it gives: `gradients(x=, g=, y=, params=, want=, got=)`
    returns {input position: the array that mistake returns, or True where the gradient got shows
    its symptom}, from the inputs x, the upstream gradient g, the output y, the params, and the
    right gradients `want` and those got (each by input position)."""

    hint: str
    gradients: Callable[..., dict]

    def predict(self, **context: Any) -> dict:
        """What the mistake gives here, or nothing where it does not apply to these shapes."""
        try:
            return self.gradients(**context)
        except (ValueError, IndexError):
            return {}


@dataclass(frozen=True)
class OpSpec:
    """An op the learner writes: its class name (the engine's op of that name in
    `tx.REGISTRY` is the reference, unless `engine` computes it otherwise), its cases, its slips."""

    name: str
    cases: tuple[Case, ...]
    slips: tuple[Slip, ...] = ()
    engine: Callable | None = None  # (*tensors, **params) -> Tensor, where the engine has no such op
    reference: Callable[[], Any] | None = None  # what a pass links to, if not the engine's class

    def engine_apply(self) -> Callable:
        return self.engine or tx.REGISTRY[self.name].apply

    def link(self) -> Any:
        return self.reference() if self.reference else tx.REGISTRY[self.name]


class Problem(Exception):
    """A case failed: `lines` say how."""

    def __init__(self, *lines: str):
        super().__init__(*lines)
        self.lines = lines


def check_each(cases: Sequence, check: Callable[[Any], None], report: Report) -> None:
    """`check(case)` on each case, a line a case (its `what`) in `report`; the first that raises a
    Problem ends it (the next ones often fail for the same reason)."""
    for case in cases:
        try:
            check(case)
        except Problem as p:
            report.fail(case.what, *p.lines)
            return
        report.ok(case.what)


def check_op(spec: OpSpec, op: type, report: Report, learner_file: Path | None) -> None:
    """Run every case of `spec` on the learner's class `op`, adding a line a case to `report`;
    the first failing case ends it (the next ones often fail for the same reason)."""
    names = list(inspect.signature(op.forward).parameters)[1:]
    try:
        for case in spec.cases:
            what = f"{spec.name}: {case.what}"
            _check_case(spec, op, case, names, learner_file)
            report.ok(what)
        what = f"{spec.name}: float32 inputs (what training uses) keep float32 gradients"
        _check_float32(spec, op, spec.cases[0], names, learner_file)
        report.ok(what)
    except Problem as p:
        report.fail(what, *p.lines)


def _leaves(arrays: list, case: Case, dtype: Any = np.float64) -> list[Tensor]:
    return [Tensor(a.astype(dtype, copy=False), requires_grad=j not in case.frozen) if a.dtype.kind == "f"
            else Tensor(a) for j, a in enumerate(arrays)]


def _args(leaves: list, case: Case) -> list:
    return [leaves[i] for i in (case.uses or range(len(leaves)))]


def _check_case(spec: OpSpec, op: type, case: Case, names: list, learner_file: Path | None) -> None:
    rng = np.random.default_rng(0)
    arrays = case.arrays(rng)
    leaves = _leaves(arrays, case)
    uses = case.uses or tuple(range(len(leaves)))
    out = call_learner(lambda: op.apply(*_args(leaves, case), **case.params), learner_file, "forward")
    reference = spec.engine_apply()(*_args(_leaves(arrays, case), case), **case.params)
    if out.shape != reference.shape or not np.allclose(out.numpy(), reference.numpy(), atol=1e-12, rtol=1e-9,
                                                       equal_nan=True):
        raise Problem(f"forward gives another output than the engine's {spec.name} (shape {out.shape}, expected "
                      f"{reference.shape}): the forward is given, so restore it as the starting file has it")
    g = rng.standard_normal(out.shape)
    node = out.grad_fn
    inputs_before, g_before = [a.copy() for a in node.arrays], g.copy()
    grads = call_learner(lambda: node.backward(g, *node.arrays), learner_file, "backward")
    if not isinstance(grads, (tuple, list)) or len(grads) != len(node.arrays):
        count = len(grads) if isinstance(grads, (tuple, list)) else f"a {type(grads).__name__}"
        raise Problem(f"backward returned {count} for {len(node.arrays)} inputs: return a tuple, one gradient per "
                      "input (None for an input that needs none), e.g. `return (gx,)` for one input")
    if not np.array_equal(g, g_before):
        raise Problem("backward changed g in place (`g *= ...`): the engine may hand the same array to other "
                      "ops; compute a new array (`g * ...`)")
    for k, (a, before) in enumerate(zip(node.arrays, inputs_before)):
        if not np.array_equal(a, before, equal_nan=True):
            raise Problem(f"backward changed its input {_name(names, k)} in place: compute new arrays instead")
    expected = _finite_differences(op, leaves, case, g)
    _engine_agrees(spec, arrays, case, g, expected)
    got = _summed_per_leaf(op, grads, node, uses, names)
    want = {uses.index(j): d for j, d in expected.items()}
    given = {uses.index(j): d for j, d in got.items()}
    slips = [(s.hint, s.predict(x=list(node.arrays), g=g, y=out.numpy(), params=case.params, want=want, got=given))
             for s in spec.slips] if case.uses is None else []
    for j, want in expected.items():
        k = uses.index(j)  # the argument that names this input
        d = diagnose(got[j], want, out.shape, [(hint, by_input[k]) for hint, by_input in slips if k in by_input])
        if d is not None:
            raise Problem(*wrong_value(f"input {_name(names, k)}", want.shape, d))
    through = call_learner(lambda: tx.grad(op.apply(*_args(leaves, case), **case.params), [leaves[j] for j in expected],
                                           grad_output=Tensor(g)), learner_file, "backward, through the engine's walk")
    for (j, want), t in zip(expected.items(), through):
        if t is None or not close(t.numpy(), want):
            raise Problem(f"through the engine's walk, input {_name(names, uses.index(j))} gets another gradient "
                          "than backward returned: does backward depend on something besides g and its inputs?")


def call_learner(step: Callable, learner_file: Path | None, what: str) -> Any:
    """`step()`, with an exception from the learner's code turned into a Problem that says where."""
    try:
        return step()
    except Exception as e:  # noqa: BLE001 - whatever the learner's code raised is reported, with where
        raise Problem(*raised(e, learner_file, what)) from e


def _summed_per_leaf(op: type, grads: tuple, node: Any, uses: tuple, names: list) -> dict[int, np.ndarray]:
    """Each leaf's gradient as the engine would make it: a broadcast summed back where the op
    lets the engine do that (`broadcasts = True`), the uses of a leaf added up (fan-out)."""
    got: dict[int, np.ndarray] = {}
    for k, (gk, a) in enumerate(zip(grads, node.arrays)):
        if not node.needs_grad[k]:
            continue
        if gk is None:
            raise Problem(f"backward returned None for input {_name(names, k)}, which needs a gradient")
        gk = np.asarray(gk.numpy() if isinstance(gk, Tensor) else gk)
        if op.broadcasts and gk.shape != a.shape and _broadcasts_to(a.shape, gk.shape):
            gk = Tensor(gk).sum_to(a.shape).numpy()  # what the engine's walk does for such an op
        if gk.dtype != a.dtype:
            raise Problem(f"backward returned a {gk.dtype} gradient for the {a.dtype} input {_name(names, k)}: "
                          "the engine refuses it (keep the input's dtype)")
        j = uses[k]
        got[j] = gk if j not in got or got[j].shape != gk.shape else got[j] + gk
    return got


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _finite_differences(op: type, leaves: list, case: Case, g: np.ndarray) -> dict[int, np.ndarray]:
    """d/dx Σ op(x)·g for each floating leaf, element by element, by central differences."""
    def loss() -> float:
        with tx.no_grad():
            return float((op.apply(*_args(leaves, case), **case.params).numpy() * g).sum())

    expected = {}
    for j, leaf in enumerate(leaves):
        if leaf.dtype.kind != "f" or not leaf.requires_grad:
            continue
        x, d = leaf.data, np.zeros(leaf.shape)
        for e in np.ndindex(*leaf.shape):
            keep = x[e]
            x[e] = keep + EPS
            plus = loss()
            x[e] = keep - EPS
            minus = loss()
            x[e] = keep
            d[e] = (plus - minus) / (2 * EPS)
        expected[j] = d
    return expected


def _engine_agrees(spec: OpSpec, arrays: list, case: Case, g: np.ndarray, expected: dict) -> None:
    """The engine's own gradient equals the finite differences on this case, or the check
    itself is wrong: a case no right answer passes must never reach a learner."""
    leaves = _leaves(arrays, case)
    out = spec.engine_apply()(*_args(leaves, case), **case.params)
    grads = tx.grad(out, [leaves[j] for j in expected], grad_output=Tensor(g))
    for (j, want), t in zip(expected.items(), grads):
        if t is None or not close(t.numpy(), want):
            raise RuntimeError(f"the checker's own reference fails on {spec.name}, case {case.what!r}, input {j}: "
                               "the engine and finite differences disagree; please report this")


def _check_float32(spec: OpSpec, op: type, case: Case, names: list, learner_file: Path | None) -> None:
    """The first case in float32: each gradient keeps its input's dtype (the engine refuses
    another), and its values agree with float64's to float32's precision."""
    arrays = case.arrays(np.random.default_rng(0))
    leaves, wide = _leaves(arrays, case, np.float32), _leaves(arrays, case)
    wanted = [j for j, t in enumerate(leaves) if t.requires_grad]
    out = call_learner(lambda: op.apply(*_args(leaves, case), **case.params), learner_file, "forward in float32")
    g = np.random.default_rng(1).standard_normal(out.shape)
    try:
        grads = tx.grad(out, [leaves[j] for j in wanted], grad_output=Tensor(g.astype(np.float32)))
    except RuntimeError as e:  # the engine's refusal of a gradient of another dtype
        raise Problem(f"in float32: {e} (a NumPy float64 such as np.sqrt(2.0) or np.float64(2) makes float32 "
                      "arrays float64: use Python numbers)") from e
    except Exception as e:  # noqa: BLE001
        raise Problem(*raised(e, learner_file, "backward in float32")) from e
    reference = tx.grad(op.apply(*_args(wide, case), **case.params), [wide[j] for j in wanted],
                        grad_output=Tensor(g))
    for j, narrow, ref in zip(wanted, grads, reference):
        if not np.allclose(narrow.numpy(), ref.numpy(), atol=1e-4, rtol=1e-3):
            raise Problem(f"input {_name(names, j)}: float32 gradients differ from float64 ones by more than "
                          "float32's rounding: a step loses precision (e.g. exp of an unshifted score)")


def _name(names: list, k: int) -> str:
    return names[k] if k < len(names) else f"#{k}"
