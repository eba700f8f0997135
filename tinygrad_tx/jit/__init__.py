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
the same at every call. So the first call runs eagerly while an instrument (the
engine's observer list, the one `tx.inspect` uses) writes down everything it
sees, and later calls run only the arithmetic (with `verify=True` the second call
records as well and must write down the same program). What the instrument sees is exactly what
this file can replay:

- each op's forward (`op`): its Function class, its params, and where each input
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
- Changes made outside ops and replayable calls raise `JitError` (`observers.show_side_effect`):
  a hook registered on a leaf, an instrument turned on, and any assignment to a tensor's
  `.data`: a new array (an EMA, `load_state_dict`, `.to()`) or the same one changed in
  place (`p.data -= lr * p.grad.data`: use an optimizer, whose `step()` is replayed).
  So are `p.grad = ...` by hand (`optimizer.zero_grad()` and `module.zero_grad()` are
  replayed), `opt.lr *= 0.5` (a write to an optimizer's or a schedule's attribute: a
  schedule's `step()` is replayed) and writes into a raw array got from `.data`
  (`p.data[...] = v`, `np.clip(g.data, ..., out=g.data)`), found by their values (`watch.py`).
  Host randomness (`nn.init`, `tx.randn`) is refused as a read. `tx.manual_seed` and
  `backend.seed` are replayable calls; a collective given a raw array, a Python number or a
  tensor made in the function outside ops (`tx.Tensor(n)`), and a call on an optimizer or
  schedule made in the function (eager would start from fresh state at every call) are
  refused.
- Two ops that return one and the same object (NumPy's shared `np.True_` from two 0-d
  comparisons) cannot be told apart by the record: using either is refused.
- A recording is one thread's: what other threads do meanwhile stays out of it.
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
- The modules in reach (found at the first call: the function itself, `self`,
  what a `functools.partial` binds, closure cells, globals, and what those hold
  one level down, inside lists, tuples and dicts too) give every submodule's
  train/eval mode to the signature; a module the search missed but the function
  called (through a helper function, say) is checked at each call against its mode
  when first called, and records anew when it changed. `train()`/`eval()` inside the function is replayed.
  Captured tensors are checked at each call: one that changed its shape, dtype,
  device or `requires_grad` records anew. Between two calls, what the function
  reaches (closure cells, the globals it names, what a partial binds) and what every
  module in reach or called holds (attributes, lists, tuples and dicts in them) are
  compared by identity: `Dropout.p = 0.0`, `ModuleList.append`, a submodule or a
  weight replaced, a global rebound drop every record, so the next call records
  anew (what the function itself changes during a call is no change). Not seen:
  a field of another object changed (a config object the function reads),
  other objects made inside the function (a fresh leaf such as
  `tx.zeros(n, requires_grad=True)`: the record keeps the first call's), and
  Python state the function writes or reads inside objects (counters, attributes
  of non-module objects, a Python number such as `clip_grad_norm`'s result used in
  an `if`): all fixed at the recording.
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

Files: this one holds `jit` (signatures, the cache of records); `record.py` writes a
record while the function runs eagerly (`watch.py`: what it sees of `.data` and `.grad`);
`program.py` holds its instructions (ops, backward walks, calls); `tape.py` is the record
itself and its replay; `liveness.py` finds where a replay can give each array back;
`codegen.py` writes a record as the Python function a replay runs.
"""
from __future__ import annotations

import functools
import operator
import types
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from .. import observers
from ..function import is_grad_enabled
from ..nn import Module
from ..tensor import Tensor
from .record import JitError, Recorder, check_same, record
from .tape import Tape

__all__ = ["jit", "Jitted", "JitError", "Tape"]

def jit(fn: Callable, max_traces: int = 8, verify: bool = False) -> "Jitted":
    """Wrap `fn` (Tensors in; forward, backward, optimizer step inside) for record and replay;
    `verify` records each signature twice and refuses `fn` if the two records differ."""
    if max_traces < 1:
        raise ValueError(f"jit: max_traces must be at least 1, not {max_traces}")
    return Jitted(fn, max_traces, verify)


class Jitted:
    """`fn` with a record per input signature; call it as you would call `fn`."""

    def __init__(self, fn: Callable, max_traces: int, verify: bool = False):
        self.fn, self.max_traces, self.verify = fn, max_traces, verify
        self.tapes: OrderedDict[tuple, Tape] = OrderedDict()
        self.traces = self.replays = 0  # how often each path was taken (for tests and curiosity)
        self._modules: list[Module] | None = None  # every module in reach, found at the first call
        self._watched: list[Module] = []  # those and every module a recording called, with submodules
        self._outside: dict[int, Tensor] = {}  # the tensors in reach (modules' too), by id
        self._after: list = []  # what the function reached and they held after the last call (`_contents`)
        self.refused: dict[tuple, JitError] = {}  # signatures whose two recordings differed (verify)
        functools.update_wrapper(self, fn, updated=())  # name and docstring; not a module's attributes

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """`@tx.jit` on a method: `trainer.step(x)` passes the trainer as the first argument."""
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(type(o) is Recorder for o in observers.active):
            return self.fn(*args, **kwargs)  # inside another jitted function's recording: it records these ops
        if self._modules is None or not _same(_contents(self.fn, self._watched), self._after):
            self._find_modules()  # at the first call (globals defined after the decorator exist now), or
            self.tapes.clear()  # something was rebound or replaced since the last: its records are stale
        try:
            return self._run(args, kwargs)
        finally:
            self._after = _contents(self.fn, self._watched)

    def _find_modules(self) -> None:
        reach = _in_reach(self.fn)
        self._modules = list({id(m): m for top in reach if isinstance(top, Module) for m in top.modules()}.values())
        self._watched = list(self._modules)
        self._outside = {id(t): t for t in (*(t for t in reach if isinstance(t, Tensor)),
                                            *(t for m in self._modules for _, t in m.named_tensors()))}

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
            return tape.replay(tensors)
        first = tape if tape is not None and tape.still_valid() else None
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
        self.tapes[key] = tape
        self.tapes.move_to_end(key)
        while len(self.tapes) > self.max_traces:
            self.tapes.popitem(last=False)  # the least recently used signature
        self.traces += 1
        return result

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


def _in_reach(fn: Callable) -> list:
    """What `fn` can reach without arguments (`_roots`) and what each of those holds one level
    down (attributes, items of a list, tuple or dict). The modes of the modules among them join
    the signature."""
    return list({id(v): v for obj in _roots(fn) for v in (obj, *_held_by(obj))}.values())


def _roots(fn: Callable) -> list:
    """`fn` itself (`tx.jit(model)`), `self` of a method, what a `functools.partial` binds,
    closure cells and the globals it names."""
    found = [fn, getattr(fn, "__self__", None)]
    if isinstance(fn, functools.partial):
        found += [*fn.args, *fn.keywords.values(), fn.func, getattr(fn.func, "__self__", None)]
        fn = fn.func
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    return found + [names[n] for n in (code.co_names if code else ()) if n in names]


_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


def _held_by(obj: Any) -> list:
    """What `obj` holds one level down (an object's attributes, a container's items), with
    lists, tuples and dicts among them opened all the way down, as `Module` finds parameters."""
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif not isinstance(obj, (type, Module, types.ModuleType, *_FUNCTIONS)) and hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return []
    return [x for item in items for x in (item, *(_held_by(item) if isinstance(item, (list, tuple, dict)) else ()))]


# -- changes between calls -------------------------------------------------------------------

_END = object()  # closes a container's items in `_contents`


def _contents(fn: Callable, modules: list[Module]) -> list:
    """What `fn`'s roots are and what each module holds (attributes, and the items of their lists,
    tuples and dicts all the way down; whether a tensor requires grad), in order. The objects
    themselves, compared by identity (`_same`) and kept alive meanwhile, so that no id is reused:
    `Dropout.p = 0.0`, a submodule replaced, `ModuleList.append`, a global rebound, a tensor
    frozen each make another list. Taken after each call and before the next, so what the
    function itself changes during a call is no change. The modules' train/eval modes are left
    out: the signature has them."""
    out, seen = _roots(fn), set()

    def add_items(container: Any) -> None:
        if id(container) in seen:  # held twice (or holding itself): its items once
            return
        seen.add(id(container))
        for value in (x for kv in container.items() for x in kv) if type(container) is dict else container:
            add(value)
        out.append(_END)

    def add(value: Any) -> None:
        out.append(value)
        if type(value) in (list, tuple, dict):
            add_items(value)
        elif type(value) is Tensor:  # Python in the function may check it (an optimizer made there does)
            out.append(value.requires_grad)

    for m in modules:
        out.append(m)
        for name, value in vars(m).items():
            if name != "training":
                out.append(name)
                add(value)
    return out


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))
