"""`tx.jit(step, cuda_graph=True)`: a replay's forward and backward launched as one CUDA graph.

Why: on a GPU a small model's step is launch-bound. A replay runs no bookkeeping, yet it still
starts every kernel from Python, one by one (1,143 for the toy model's training step, about
25 µs each, docs/devices.md), while the GPU waits. CUDA can write a stream's kernels down
once (stream capture) and start them all again with one call (a graph launch).

What is captured: the longest run of the record's program that holds only ops and
backwards, the forward and backward of a step. The calls around it (`zero_grad()` before it,
`optimizer.step()`, `clip_grad_norm`, a schedule's `step()` after it) run from Python as in any
replay: they compute numbers on the host that change at every call (Adam's bias corrections,
the learning rate), and a graph would keep the numbers of its capture.

A call, once the graph is captured (at the first replay; `capture`):
1. `enter`: the arguments' and parameters' arrays, and the calls before the graph.
2. The graph's assumptions, checked (`_holds`): each parameter's array is the one the graph
   reads (a new one, from `load_state_dict` say, captures anew), the device's random generator
   is the one whose state the graph's dropout advances (reseeded: captures anew), and no leaf
   the backward reaches holds a `.grad` (the graph writes fresh gradients; adding into old ones
   is refused: zero the gradients at the start of the step).
3. The arguments are copied into the graph's own input arrays, and the graph is launched.
4. The ids that ops check (embedding, cross-entropy targets, indexing) were checked inside
   the graph (the backend kept the checks with it): one flag is read back, and a bad id raises as
   it does in eager execution, before the optimizer steps, so the parameters are left as they were.
5. Each leaf gets its gradient array as `.grad` (Python set it during the capture; a launch
   runs no Python), and `leave` runs the calls after the graph.
6. The result is copied out of the graph's memory, which the next launch writes over. The
   gradients are not: as with PyTorch's CUDA graphs, `.grad` holds the same array at every call.

The kernels are the replay's, in the same order, but for matrix products: CuPy refuses cuBLAS
while a stream captures, so a capture calls cuBLAS directly (backends/blas.py), which may pick another
kernel. A graph's step equals an eager step within float32 tolerance, and bit for bit where it has
no matrix product (tests/jit/test_graph.py, on the GPU and on the strict device, which models a
graph). Measured on an H200: a toy Transformer's step 7.8 ms against PyTorch CUDA eager's 13.3 ms
(docs/devices.md).
"""
from __future__ import annotations

import traceback
import warnings
from pathlib import Path
from typing import Any

from ..backends import DeviceError, get_backend
from ..function import op_error
from ..tensor import Tensor
from .codegen import write_parts
from .program import Backward, Call
from .record import JitError


class GraphReplay:
    """One record's program split around its device work, and that work's graph once captured."""

    def __init__(self, tape):
        if tape.differentiable is not None:
            raise JitError("jit: cuda_graph=True needs a step whose result has no graph left (call backward "
                           "inside the function, or return loss.detach())")
        self.tape = tape
        start, stop, hoisted = _device_run(tape.program)
        self.enter, self.device, self.leave = (w.build() for w in write_parts(tape, start, stop, hoisted))
        backends = {op.backend for step in tape.program[start:stop] if type(step) is list for op in step}
        if len(backends) > 1:
            raise JitError(f"jit: cuda_graph=True needs a step on one device, not {sorted(b.name for b in backends)}")
        self.backend = backends.pop() if backends else None
        self.leaves = sorted({k for s in tape.program[start:stop] if type(s) is Backward for k in s.plan.leaves})
        self.graph = None
        self.captures = self.graph_calls = 0
        self._warned = False

    def __call__(self, tensors: list[Tensor]) -> tuple[list, list, list]:
        tape = self.tape
        V, F, R = [None] * tape.n_slots, [None] * len(tape.ops), [None] * tape.calls
        self.enter(tensors, V, F, R)
        if self.backend is None:  # no ops to capture: the replay as it is
            return self.leave(tensors, V, F, R)
        leaves = [tape._leaf(k, tensors) for k in self.leaves]
        _check_leaves(leaves)
        if self.graph is None or not self._holds(V):
            if self.graph is not None and self.graph_calls < 2 and not self._warned:
                self._warned = True
                warnings.warn("tx.jit(cuda_graph=True): the graph was captured again after one call (a parameter's "
                              "array replaced, or the device reseeded, at every call?): each capture costs an eager "
                              "step's time", RuntimeWarning, stacklevel=4)
            self._capture(tensors, V, F, R, leaves)
        xp = self.backend.xp
        for slot, buffer in self.inputs:
            xp.copyto(buffer, V[slot])
        self.graph.launch()
        self.graph_calls += 1
        self._check_ids(self.graph.failed())
        for leaf, grad in zip(leaves, self.grads):
            if grad is not None:
                leaf.grad = Tensor._from_op(grad, self.backend)
        V, F = list(self.end_values), list(self.end_fns)
        V, R, F = self.leave(tensors, V, F, R)
        for slot in self.outputs:
            if V[slot] is self.end_values[slot]:
                V[slot] = V[slot].copy()  # the next launch writes over the graph's own
        return V, R, F

    def nbytes(self) -> int:
        """Device memory the graph holds in its own pool (its arrays live there between calls)."""
        return 0 if self.graph is None else self.graph.nbytes()

    def _holds(self, V: list) -> bool:
        """Whether the graph's assumptions (see the module docstring, 2.) hold for this call."""
        return all(V[slot] is array for slot, array in self.params) and self.backend.rng is self.rng

    def _capture(self, tensors: list, V: list, F: list, R: list, leaves: list) -> None:
        for slot, _ in self.tape.args:
            V[slot] = V[slot].copy()  # the graph's input arrays: each call's arguments are copied in
        self.inputs = [(slot, V[slot]) for slot, _ in self.tape.args]
        self.params = [(slot, V[slot]) for slot, _ in self.tape.captured]
        self.rng = self.backend.rng
        try:
            self.graph, _ = self.backend.capture(lambda: self.device(tensors, V, F, R))
        except Exception as error:  # noqa: BLE001  (named, with where it broke)
            raise JitError(f"jit: this step cannot be captured as a CUDA graph: {type(error).__name__}: {error} "
                           f"(at {_where(error)}); leave cuda_graph off for it") from error
        self.end_values, self.end_fns = list(V), list(F)
        self.grads = [None if leaf.grad is None else leaf.grad.data for leaf in leaves]
        self.outputs = [slot for slot in _slots(self.tape.output) if V[slot] is not None]
        self.captures += 1
        self.graph_calls = 0

    def _check_ids(self, check: Any) -> None:
        """Raise the error of a check that failed at this launch (`check`, None if none did), named
        with the op that made it, as eager execution names it."""
        if check is None:
            return
        lines = [f for f in check.stack if f.filename == self.device.__code__.co_filename]
        op = self.device.forward_at.get(lines[-1].lineno) if lines else None
        error = check.error()
        if op is None:
            raise error
        raise op_error(error, op.cls.__name__, [self.tape.slot_types[i][0] for i in op.ins])


def refuse_without_graphs(tensors: list[Tensor]) -> None:
    """Refuse `cuda_graph=True` before anything runs when none of `tensors` (those a call passes and
    those the function reaches) lives on a device that can capture a graph (no tensor: the default
    device), rather than after a first call that ran eagerly."""
    backends = {t.backend for t in tensors} or {get_backend()}
    if not any(backend.graphs for backend in backends):
        try:
            min(backends, key=lambda backend: backend.name).check_capture()
        except DeviceError as error:
            raise JitError(f"jit: cuda_graph=True: {error}") from None


def _device_run(program: list) -> tuple[int, int, list[int]]:
    """The run of steps with no call in it that holds the most work (ops and backward steps),
    and the calls in it to make before it instead: a `zero_grad()` before the run's first
    backward (between forward and backward, as many steps put it) only sets `.grad` to None,
    which nothing before that backward reads."""
    best, start, hoisted, work = (0, 0, [], 0), 0, [], 0
    for i, step in enumerate([*program, Call(-1, None, (), {})]):
        if type(step) is Call:
            seen_backward = any(type(s) is Backward for s in program[start:i])
            if step.function is not None and step.function.__name__ == "zero_grad" and not seen_backward:
                hoisted.append(i)
                continue
            if work > best[3]:
                best = (start, i, hoisted, work)
            start, hoisted, work = i + 1, [], 0
        else:
            work += len(step) if type(step) is list else len(step.plan.steps)
    return best[:3]


def _check_leaves(leaves: list) -> None:
    for leaf in leaves:
        name = leaf.name or f"a tensor of shape {leaf.shape}"
        if leaf.grad is not None:
            raise JitError(f"jit: cuda_graph=True: {name} already has a .grad when the step's backward runs; a "
                           "graph writes fresh gradients and cannot add into an array it did not make: zero the "
                           "gradients at the start of the step (optimizer.zero_grad())")
        if leaf._hooks or leaf._ready_hooks:
            raise JitError(f"jit: cuda_graph=True: {name} has a hook, which is Python, and a graph runs none")


def _slots(spec: Any) -> list[int]:
    """The slots a recorded result (`Tape.output`) returns as tensors."""
    kind = spec[0]
    if kind in ("tensor", "replayed"):
        return [spec[1]]
    if kind == "dict":
        return [s for _, v in spec[1] for s in _slots(v)]
    if kind in ("list", "tuple"):
        return [s for v in spec[1] for s in _slots(v)]
    return []


def _where(error: BaseException) -> str:
    """The innermost line of tinygrad_tx above the backends an error came through."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "tinygrad_tx" in f.filename and "backends" not in Path(f.filename).parts]
    f = frames[-1] if frames else traceback.extract_tb(error.__traceback__)[-1]
    return f"{f.filename[f.filename.find('tinygrad_tx'):]}:{f.lineno}, {f.line}"
