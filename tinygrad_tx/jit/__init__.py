"""`tx.jit`: run a step once, record what the engine did, replay the record on raw arrays.

    step = tx.jit(train_step)            # train_step(src, tgt_in, tgt_out) -> loss
    loss = step(src, tgt_in, tgt_out)    # first call with these shapes: eager, and recorded
    loss = step(src, tgt_in, tgt_out)    # every later call: the record, replayed
    print(step.tape(src, tgt_in, tgt_out))   # what was recorded

What a compiler sees
====================
On a small model most of an eager step is bookkeeping, not arithmetic: a Tensor
per result, a device check per op, a node per op, the sort of the graph, a shape
and dtype check per gradient, a dictionary of pending gradients. Yet for one
*input signature* (argument shapes, dtypes and devices, grad mode, the modules'
train/eval mode, which captured tensors require grad) that bookkeeping comes out
the same at every call. So the first call runs eagerly while an observer (on the
engine's observer list, the one `tx.inspect` uses) writes down everything it
sees, and later calls run only the arithmetic (with `verify=True` the second call
records as well and must write down the same program). What the instrument sees is exactly what
this file can replay:

- each op's forward (`forward`): its Function class, its params, and where each input
  comes from: a *slot* written by an earlier op, an argument, a captured tensor
  (a parameter: its `.data` is read live at each call) or a constant;
- each backward (`backward_begin` ... `backward_end`): the engine's own plan of
  the walk (`tx.backward_plan`: steps in order, each gradient routed to its
  producer or to a leaf, summed on fan-out in the same order, summed back over
  broadcast axes), kept with op and leaf numbers in place of this call's objects,
  so no sort, no checks, no Tensors are left for the replay;
- each call that changes state outside the graph (`call`: `optimizer.step()`,
  `zero_grad()`, `clip_grad_norm`, `schedule.step()`, `dist.all_reduce`,
  `dist.broadcast`): made again, with this call's tensors where the recording
  passed its own (an argument, a `.grad`, an op's result);
- each read of a value on the host (`read`: `item()`, `numpy()`, printing): refused.

A replay is then a straight-line program over a list of arrays: make each op's
Function object, call its `forward` on arrays, run each recorded plan's steps
on arrays, drop every array after its last use (where the plan releases a node,
its last-used arrays go too), and make the recorded calls. That program is written
out as Python source once per record and compiled (`codegen.py`), so a replay
does not even pay for interpreting the record: `step.tape(x).source()` prints
it. Randomness is no
exception: dropout draws from the device's generator inside `forward`, so a
replay draws fresh masks in the same order as eager execution, and a replayed
run equals an eager one bit for bit.

What it cannot see (the limits, as with tinygrad's TinyJit)
===========================================================
- Python branching on tensor values: a record holds one path. Every way a value
  leaves the graph while recording raises `JitError` when the value could differ
  at the next call (made from the arguments, a parameter, a gradient): `item()`,
  `numpy()`, `if t:`, printing; a cast to an integer dtype, `Tensor(t, dtype)`,
  `t.to(device)`; a `.grad` used in an op; `tx.randn` (host randomness); attention
  weights asked for with `return_weights`; a boolean-mask index made in the function
  (the result's shape depends on values). A branch on raw `.data` is not seen;
  `tx.jit(fn, verify=True)` records the first two calls and raises `JitError` if
  they took different paths (and at every later call of that signature).
- Changes made outside ops and replayable calls raise `JitError`: a hook registered on a
  leaf and an instrument turned on (announced by the engine: `observers.changed`), and (watched
  while recording, `watch.py`) any assignment to a tensor's
  `.data`: a new array (an EMA, `load_state_dict`, `.to()`) or the same one changed in
  place (`p.data -= lr * p.grad.data`: use an optimizer, whose `step()` is replayed).
  So are `p.grad = ...` by hand (`optimizer.zero_grad()` and `module.zero_grad()` are
  replayed), `opt.lr *= 0.5` (a write to an optimizer's or a schedule's attribute: a
  schedule's `step()` is replayed) and writes into a raw array got from `.data`
  (`p.data[...] = v`, `np.clip(g.data, ..., out=g.data)`), found by their values (`watch.py`).
  Host randomness (`nn.init`, `tx.randn`) is refused as a read (found by the host generator's
  state, which is one for all threads). `tx.manual_seed` and
  `backend.seed` are replayable calls; a collective given a raw array, a Python number or a
  tensor made in the function outside ops (`tx.Tensor(n)`), and a call on an optimizer or
  schedule made in the function (eager would start from fresh state at every call) are
  refused.
- Two ops that return one and the same object (NumPy's shared `np.True_` from two 0-d
  comparisons) cannot be told apart by the record: using either is refused.
- A recording is one thread's: what other threads do meanwhile stays out of it (but for
  numbers drawn from the host generator meanwhile, which refuse the recording).
- Arrays computed outside ops (raw NumPy/CuPy on `.data`, or `tx.Tensor(array)`
  made inside `fn`) are constants of the record; with `verify=True`, two
  recordings that got different values raise `JitError`. Masks and ids made with Tensor operations (`ids.ne(pad)`,
  `&`) are ops, and are replayed with each call's values.
- Arguments: Tensors (and lists, tuples, dicts of them, dicts in their order) are
  the inputs, and which of them are one array passed twice, and which have a graph
  (refused: pass them detached), are part of the signature; a NumPy array is
  refused (wrap it in a Tensor); a Python or NumPy number or a string is part of
  the signature, so a new value records anew (keep changing numbers such as the
  learning rate on the optimizer, not in the arguments). A tensor in reach passed as an
  argument (`f(p)` where `f` also uses `p`) is part of the signature by identity, and
  the function's own uses of it read it, not the argument, at a replay.
- What the function reaches from outside: its global names, closure cells and defaults, `self`
  of a method, what a `functools.partial` binds, its non-tensor arguments, and from those the
  items of lists, tuples and dicts, the fields of objects (modules, dataclasses, any object's
  attributes and its class's) and the globals and cells of the functions and methods it calls
  (`reach.py`; the engine's and installed libraries' code is not looked into). The modules
  found there (at the first call) give every submodule's train/eval mode to the signature; a
  module the search missed but the function called is checked at each call against its mode
  when first called, and records anew when it changed. `train()`/`eval()` inside the function
  is replayed. Every object the record holds from outside (a tensor it reads, an optimizer or a
  module its calls act on) is found again before each call by every way the recording found
  it: where another object stands now (`PARAMS["w"] = new`, `batch.w = new`, a global or a
  cell rebound, a submodule or a weight replaced) the call records anew; one found in no such
  place (through a weak reference, say) is refused, as its replacement could not be seen.
  Captured tensors are checked too: one that changed its shape, dtype, device or
  `requires_grad` records anew. And what the function names (its globals and cells) and what
  every module in reach or called holds (attributes, lists, tuples and dicts in them) are
  compared by identity: `Dropout.p = 0.0`, `ModuleList.append`, a global rebound record anew.
  All of these are taken as they were when the recording began (or, for a tensor, when the
  function first used it), not as the function left them: what the function changes itself
  (`p.requires_grad_(False)` after using p, `model.drop.p = 0.0`, `PARAMS["w"] = w * 0.9`) a
  replay would not change again, so the next call records anew, as eager would run it. A
  function that makes such a change at every call (a counter a module increments) records at
  every call, at eager speed, and a RuntimeWarning names what it changes. Not seen: a field of a
  non-module object changed (a number in a config object the function reads), other objects
  made inside the function (a fresh leaf such as `tx.zeros(n, requires_grad=True)`: the record
  keeps the first call's), and Python state the function writes or reads inside non-module
  objects (counters, a Python number such as `clip_grad_norm`'s result used in an `if`): all
  fixed at the recording.
- Checks of values run at every call, since the ops make them in `forward`
  (ids in range for embedding, cross-entropy and indexing); checks of shapes and
  dtypes, which the signature fixes, ran while recording only.
- Tensor hooks on intermediate results and module hooks are refused (module hooks
  at every call, so one registered after a recording too), as are
  `create_graph=True` and `tx.grad` inside the function. Hooks on leaves run in
  a replay as in eager backward: post-accumulate-grad hooks (DataParallel's
  all-reduces) as soon as the walk is past a parameter's last use.
- Tensors returned are the replay's arrays, without a graph, unless the result
  still has one that no backward in the function used (or one that used it with
  `retain_graph=True`): then the whole replay is one node (`Replayed`) whose
  backward runs the recorded walk, so gradients (and `tx.gradcheck`) work through
  a jitted function; a tensor passed in and returned as it is comes back itself,
  and a returned `.grad` is that tensor's `.grad` as the replay left it. A tensor
  made outside ops (`tx.Tensor(3.0)`) and returned is refused: a replay makes none.
  Gradients through `Replayed` are summed per leaf inside it first, so a parameter
  used inside and outside the function may differ from eager in the last bit.
- An op's error in a replay names the op and its input shapes, as in eager.
- Instruments active during a replay see nothing of it: they saw the recording.
  A jitted function called while another one records runs eagerly, so the outer
  record holds its ops.

Recording twice (`verify=True`) is TinyJit's rhythm (it runs once plain and
captures on the second call), here used to compare; it costs one more eager call
per signature, so it is for developing a step, not the default. Records are kept per signature, least
recently used evicted beyond `max_traces`; `jitted.memory()` counts the bytes they hold (their constants:
a record holds no activations between calls).

Files: this one holds `jit` (signatures, the cache of records); `reach.py` maps what the
function reaches from outside and checks it before each replay; `record.py` writes a record
while the function runs eagerly (`watch.py`: what it watches around ops: `.data`, `.grad`,
modules called, optimizers made);
`program.py` holds its instructions (ops, backward walks, calls); `tape.py` is the record
itself and its replay; `liveness.py` finds where a replay can give each array back;
`codegen.py` writes a record as the Python function a replay runs; `graph.py` launches its
forward and backward as one CUDA graph (`cuda_graph=True`).
"""
from __future__ import annotations

import functools
import warnings
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from .. import observers
from ..function import is_grad_enabled
from ..nn import Module
from ..tensor import Tensor
from .reach import ENGINE_WAYS, Reach, contents, describe_change, module_contents, same
from .record import JitError, Recorder, check_same, record
from .graph import GraphReplay, refuse_without_graphs
from .tape import Tape

__all__ = ["jit", "Jitted", "JitError", "Tape"]

def jit(fn: Callable, max_traces: int = 8, verify: bool = False, cuda_graph: bool = False) -> "Jitted":
    """Wrap `fn` (Tensors in; forward, backward, optimizer step inside) for record and replay;
    `verify` records each signature twice and refuses `fn` if the two records differ;
    `cuda_graph` launches each replay's forward and backward as one CUDA graph (`graph.py`)."""
    if max_traces < 1:
        raise ValueError(f"jit: max_traces must be at least 1, not {max_traces}")
    return Jitted(fn, max_traces, verify, cuda_graph)


class Jitted:
    """`fn` with a record per input signature; call it as you would call `fn`."""

    def __init__(self, fn: Callable, max_traces: int, verify: bool = False, cuda_graph: bool = False):
        self.fn, self.max_traces, self.verify, self.cuda_graph = fn, max_traces, verify, cuda_graph
        self.tapes: OrderedDict[tuple, Tape] = OrderedDict()
        self.traces = self.replays = 0  # how often each path was taken (for tests and curiosity)
        self._modules: list[Module] | None = None  # every module in reach, found at the first call
        self._watched: list[Module] = []  # those and every module a recording called, with submodules
        self._outside: dict[int, Tensor] = {}  # the tensors in reach (modules' too), by id
        self._assumed: list = []  # what the function reached and the modules held when the last recording began
        self._split = 0  # modules watched from the last recording on: as it left them (`_contents_now`)
        self._changed = self._warned = False  # whether the last recording changed what it reads (warned once)
        self.refused: dict[tuple, JitError] = {}  # signatures whose two recordings differed (verify)
        functools.update_wrapper(self, fn, updated=())  # name and docstring; not a module's attributes

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """`@tx.jit` on a method: `trainer.step(x)` passes the trainer as the first argument."""
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(type(o) is Recorder for o in observers.active):
            return self.fn(*args, **kwargs)  # inside another jitted function's recording: it records these ops
        if self._modules is None or not same(self._contents_now(), self._assumed):
            self._find_modules()  # at the first call (globals defined after the decorator exist now), or
            self.tapes.clear()  # something was rebound or replaced since the last recording began, by
        return self._run(args, kwargs)  # the user or by the function itself: its records are stale

    def _contents_now(self) -> list:
        """`contents` of what the function reaches, split as `_assumed` was taken."""
        return contents(self.fn, self._watched[:self._split]) + module_contents(self._watched[self._split:])

    def _find_modules(self) -> None:
        reach = Reach([self.fn]).objects.values()
        self._modules = list({id(m): m for top in reach if isinstance(top, Module) for m in top.modules()}.values())
        self._watched = list(self._modules)
        self._outside = {id(t): t for t in reach if isinstance(t, Tensor)}

    def _run(self, args: tuple, kwargs: dict) -> Any:
        """Replay the record of these arguments' signature, or record one."""
        tensors: list[Tensor] = []
        key = self._key(args, kwargs, tensors)
        if key in self.refused:  # for good: a later pair of calls that happen to agree proves nothing
            raise self.refused[key]
        tape = self.tapes.get(key)
        if tape is not None and tape.confirmed and tape.still_valid():
            self.tapes.move_to_end(key)
            self.replays += 1
            return self._replay_graph(tape, tensors) if self.cuda_graph else tape.replay(tensors)
        first = tape if tape is not None and tape.still_valid() else None
        if self.cuda_graph:
            params = (p for m in self._modules for p in m.parameters())
            refuse_without_graphs([*tensors, *self._outside.values(), *params])
        split, before = len(self._watched), contents(self.fn, self._watched)  # what the recording assumes
        tape, result = record(self.fn, args, kwargs, tensors)
        if first is not None:  # the second recording of this signature (verify): both must agree
            try:
                check_same(first, tape)
            except JitError as error:
                del self.tapes[key]
                self.refused[key] = error
                raise
        tape.confirmed = first is not None or not self.verify
        watched = {id(m): m for m in self._watched}
        watched.update((id(sub), sub) for m in tape.modules for sub in m.modules())
        self._watched = list(watched.values())
        self._split, self._assumed = split, before + module_contents(self._watched[split:])  # those: as left
        self._note_own_change()
        self.tapes[key] = tape
        self.tapes.move_to_end(key)
        while len(self.tapes) > self.max_traces:
            self.tapes.popitem(last=False)  # the least recently used signature
        self.traces += 1
        return result

    @staticmethod
    def _replay_graph(tape: Tape, tensors: list) -> Any:
        """`tape.replay`, with its forward and backward launched as one CUDA graph (`graph.py`)."""
        if tape.graph is None:
            tape.graph = GraphReplay(tape)
        values, results, _ = tape.graph(tensors)
        return tape._build(tape.output, values, results, tensors)

    def _note_own_change(self) -> None:
        """After a recording: warn once if the function changed what it reads from outside (a module's
        attribute, a global) in this recording and the one before, as a counter it increments does:
        every call then records anew, which would be a silent slow path."""
        change = describe_change(self._assumed, self._contents_now())
        if change and self._changed and not self._warned:
            self._warned = True
            warnings.warn(f"tx.jit: {getattr(self.fn, '__qualname__', 'the function')} changes what it reads from "
                          f"outside at every call ({change}); a replay would not change it again, so every call "
                          "records anew, at eager speed. Keep such state outside the jitted function and the "
                          "modules it calls", RuntimeWarning, stacklevel=4)
        self._changed = bool(change)

    def _key(self, args: tuple, kwargs: dict, tensors: list) -> tuple:
        signature = _signature((args, kwargs), tensors)
        first_with_data: dict[int, int] = {}  # the same array passed twice is one slot of the record
        aliases = tuple(first_with_data.setdefault(id(t.data), i) for i, t in enumerate(tensors))
        pinned = tuple((i, id(t)) for i, t in enumerate(tensors) if id(t) in self._outside)  # f(p) may use p too
        return (signature, aliases, pinned, is_grad_enabled(), tuple(m.training for m in self._modules or ()))

    def tape(self, *args: Any, **kwargs: Any) -> "Tape | None":
        """The record these arguments would replay (None if there is none yet)."""
        return self.tapes.get(self._key(args, kwargs, [])) if self._modules is not None else None

    def memory(self) -> int:
        """Bytes held by the records (their constants; no activations are kept between calls)."""
        return sum(tape.nbytes() for tape in self.tapes.values())


ENGINE_WAYS[Jitted] = ("fn",)  # a jitted function called while another one records: its function's reach


# -- signatures ------------------------------------------------------------------------------

def _signature(value: Any, tensors: list) -> Any:
    """A hashable description of the arguments; their Tensors are appended to `tensors` in order."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return ("T", value.shape, value.dtype.str, value.device, value.requires_grad, value.grad_fn is None)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_signature(v, tensors) for v in value))
    if isinstance(value, dict):  # in their order: the function may depend on it, as Python allows
        return ("dict", *((k, _signature(v, tensors)) for k, v in value.items()))
    if isinstance(value, float):
        return ("float", repr(value))  # -0.0 == 0.0, yet 1 / x tells them apart
    if isinstance(value, np.generic):
        return ("numpy", value.dtype.str, value.tobytes())
    if isinstance(value, np.ndarray) or not isinstance(value, type) and hasattr(value, "__array__") \
            and hasattr(value, "shape"):
        raise JitError("jit: an argument is a raw array; pass a Tensor, so that each call's values are "
                       "used (a raw array would be read as a constant of the record)")
    if isinstance(value, slice):
        return ("slice", *(_signature(v, tensors) for v in (value.start, value.stop, value.step)))
    if isinstance(value, Module):
        return ("Module", id(value), tuple(m.training for m in value.modules()))  # its tensors are captured
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return (type(value).__name__, value)
    return ("object", id(value))  # an optimizer, say: its identity matters; the record keeps it alive
