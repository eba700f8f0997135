"""Writing a `Tape`: the function runs eagerly under `Recorder`, an observer that sees
every op, backward, call and read the engine shows (`observers.py`) and what `watch.py`
watches around them (see the package docstring for what it can and cannot see);
`check_same` compares the two recordings of a signature.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from ..backends import Backend, backend_of, host_rng
from ..backward import Plan
from ..distributed.collectives import all_reduce
from ..nn import Module
from ..nn.hooks import GLOBAL_HOOKS
from ..ops.select import Getitem, is_bool_array
from ..plan import BackwardPlan, PlanStep, backward_plan
from ..observers import Observer
from ..tensor import Tensor
from . import watch
from .program import Backward, Call, Live, Op
from .liveness import plan_frees
from .reach import Links, Reach
from .tape import Tape, guard_state


class JitError(RuntimeError):
    """What a jitted function did that a replay could not repeat faithfully."""


# -- recording twice ---------------------------------------------------------------------------

def check_same(first: Tape, second: Tape) -> None:
    """Refuse a function whose two recordings of one signature differ: its Python took another
    path (it branched on values), or an op got an array computed outside ops from the inputs."""
    a_steps = [("ops", len(s)) if type(s) is list else type(s).__name__ for s in first.program]
    b_steps = [("ops", len(s)) if type(s) is list else type(s).__name__ for s in second.program]
    if a_steps != b_steps or len(first.ops) != len(second.ops):
        raise JitError("jit: two calls with the same signature ran different ops; the function's Python "
                       "depends on tensor values (a branch on .data?), which a replay cannot follow")
    for a, b in zip(first.ops, second.ops):
        where = f"op #{a.index} ({a.cls.__name__})"
        if a.cls is not b.cls or a.ins != b.ins or a.params.keys() != b.params.keys() or a.dynamic != b.dynamic:
            raise JitError(f"jit: two calls with the same signature ran different ops (at {where}); the "
                           "function's Python depends on tensor values, which a replay cannot follow")
        bound = {name for name, _ in a.dynamic or ()}  # made by an op or an argument: replayed anyway
        for name, value in a.params.items():
            if name not in bound and not _same_value(value, b.params[name]):
                raise JitError(f"jit: the {name!r} of {where} differed between two calls with the same "
                               "signature: a value computed outside ops from the inputs (raw .data), which "
                               "a replay would keep fixed. Compute it with Tensor operations")
    if len(first.captured) != len(second.captured):
        raise JitError("jit: two calls with the same signature used different tensors from outside the "
                       "function; its Python depends on tensor values, which a replay cannot follow")
    for (slot, a), (_, b) in zip(first.captured, second.captured):
        if a is not b and not _same_value(a.data, b.data):  # made in the function, outside ops
            raise JitError(f"jit: the tensor {first.slot_names[slot]} (shape {a.shape}) was made outside ops "
                           "and differed between two calls with the same signature: a value computed from "
                           "the inputs with raw arrays, which a replay would keep fixed. Compute it with "
                           "Tensor operations")


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):
        return (a.shape == b.shape and a.dtype == b.dtype
                and bool(np.array_equal(backend_of(a).to_host(a), backend_of(b).to_host(b))))
    return type(a) is type(b) and a == b


# -- recording -------------------------------------------------------------------------------

def record(fn: Callable, args: tuple, kwargs: dict, tensors: list) -> tuple[Tape, Any]:
    """Run `fn` eagerly under a `Recorder`; returns the record and `fn`'s result."""
    recorder = Recorder(tensors, Reach([fn, *_objects_in((args, kwargs))]))
    with recorder:
        result = fn(*args, **kwargs)
    tape = recorder.finish(result)
    tape.keep_alive = _objects_in((args, kwargs))
    return tape, result


def _objects_in(value: Any) -> list:
    """The arguments whose identity is in the signature (modules, optimizers): kept alive with the
    record, so that no other object gets their id; Tensors and numbers are not kept."""
    if isinstance(value, (tuple, list)):
        return [o for v in value for o in _objects_in(v)]
    if isinstance(value, dict):
        return _objects_in(list(value.values()))
    if value is None or isinstance(value, (Tensor, bool, int, float, str, bytes, np.generic)):
        return []
    return [value]


def _this_thread(method: Callable) -> Callable:
    """Ignore what other threads show: the observer list is global, a recording one thread's."""

    @functools.wraps(method)
    def filtered(self, *args):
        if threading.get_ident() == self.thread:
            return method(self, *args)
        return None

    return filtered


class Recorder(Observer):
    """The observer that writes a `Tape` while the function runs eagerly (in its own thread)."""

    def __init__(self, tensors: list[Tensor], reach: Reach):
        self.tape = Tape()
        self.reach = reach  # what the function reached from outside when the call began, and how
        self.slot_of: dict[int, int] = {}  # id(array) -> slot
        self.entry_of: dict[int, int] = {}  # id(eager Function) -> op number
        self.leaf_of: dict[int, int] = {}  # id(leaf tensor) -> leaf number
        self.tensors = tensors
        self.thread = threading.get_ident()
        self.modules: dict[int, tuple[Module, bool | None]] = {}  # each module called: its mode then
        self.mode_set: set[int] = set()  # modules whose mode the function set (train()/eval())
        self.captured_slots: set[int] = set()
        self.arg_number = {id(t): i for i, t in enumerate(tensors)}
        self.alive: list = []  # everything whose id is a key above, so that no id is reused meanwhile
        self.consumed: set[int] = set()  # ops walked by a backward inside the function
        self.call_of: dict[int, int] = {}  # id(result of a call) -> call number
        self.walking = 0
        self.made_inside: set[int] = set()  # id of each optimizer or schedule made while recording
        self.made_here: set[int] = set()  # id(tensor) of every tensor made while recording
        self.captured_of: dict[int, int] = {}  # id(tensor from outside) -> its slot
        self.guard: list[tuple] = []  # each captured tensor's state when the function first used it
        self.held: dict[int, Any] = {}  # objects from outside the record holds (call arguments), by id
        self.raw: dict[int, list] = {}  # id(tensor) -> [it, its array, a copy of its values, engine read last]
        self.shared: set[int] = set()  # id(array) that two ops returned: slot_of cannot tell which made it
        self.host = self._host_state()  # the host generator and its state, to find numbers drawn from it
        for i, t in enumerate(tensors):
            if id(t.data) not in self.slot_of:
                self.tape.args.append((self._new_slot(t.data, f"arg{i}"), i))

    def __enter__(self) -> "Recorder":
        super().__enter__()
        watch.start(self)
        return self

    def __exit__(self, *exc) -> None:
        watch.stop()
        super().__exit__(*exc)

    # -- raw arrays read outside the engine (see watch.py) ----------------------------------------
    def made(self, t: Tensor) -> None:
        self.made_here.add(id(t))
        self.alive.append(t)

    def data_read(self, t: Tensor, array: Any, by_user: bool) -> None:
        """A read of `t.data`: by code outside the engine, a copy of its values is kept; at any
        read, values that changed since the copy was taken were written through the raw array."""
        entry = self.raw.get(id(t))
        if entry is not None:
            self._check(entry)
            entry[3] = not by_user
        elif by_user and not self.walking and not isinstance(array, np.generic):  # a NumPy scalar is immutable
            self.raw[id(t)] = [t, array, _values(t, array), False]

    def _check(self, entry: list) -> None:
        t, array, values, _ = entry
        if _values(t, array) != values:
            raise JitError(f"jit: the array of a tensor of shape {array.shape} was written in place through "
                           "its .data (`p.data[...] = v`, `out=p.grad.data`?) while recording; a replay would "
                           "not write it again. Use Tensor operations and an optimizer, or do it outside the "
                           "jitted function")

    def _engine_wrote(self) -> None:
        """After a replayable call or a backward: a tensor the engine read last may have been
        written by it (its copy is taken again); the others must still hold their values."""
        for entry in self.raw.values():
            if entry[3]:
                entry[2] = _values(entry[0], entry[1])
            else:
                self._check(entry)

    def _new_slot(self, array: Any, name: str, captured: bool = False) -> int:
        slot = self.tape.n_slots
        self.tape.n_slots += 1
        self.tape.slot_names.append(name)
        self.tape.slot_types.append((getattr(array, "shape", ()), getattr(array, "dtype", type(array).__name__)))
        if not captured or id(array) not in self.slot_of:  # an argument's array stays the argument's
            self.slot_of[id(array)] = slot
        self.alive.append(array)
        return slot

    def _slot(self, array: Any) -> int | None:
        """The slot holding `array` (None: no op or argument made it); refused when two ops returned
        this very object (NumPy's shared `np.True_`), as the record could then bind the wrong one."""
        if id(array) in self.shared:
            raise JitError(f"jit: two ops returned one and the same object ({array!r}; NumPy shares np.True_ "
                           "and np.False_), so the record cannot tell their results apart. Keep a dimension "
                           "(x.sum(keepdims=True) > 0) so that each result is an array of its own")
        return self.slot_of.get(id(array))

    def _source(self, t: Tensor) -> int:
        """The slot an op reads `t` from: an argument's, or one an op wrote (`t` may be a view made
        in the function, `x.detach()`), or, for a tensor from outside (a parameter, a buffer, a lifted
        constant), a slot of its own, read live at each call even if it shares its array with an
        argument now (`f(p)` where `f` also uses `p`: the next call may pass another tensor)."""
        slot = self.captured_of.get(id(t))
        if slot is not None:
            return slot
        slot = self._slot(t.data)
        if slot is not None and (id(t) in self.arg_number or id(t) in self.made_here):
            return slot
        if self._grad_owner(t) is not None:
            self.read(t, "used in an op as a gradient (.grad)")
        slot = self.captured_of[id(t)] = self._new_slot(t.data, t.name or f"t{len(self.tape.captured)}", True)
        self.tape.captured.append((slot, t))
        self.guard.append(guard_state(t))  # what the record assumes, before the function changes it
        self.captured_slots.add(slot)
        self.alive.append(t)
        return slot

    def _bind(self, value: Any) -> Any:
        """("slot", k) for an array some op or argument made, a tuple of bindings, or None (a constant)."""
        if isinstance(value, tuple):
            items = [self._bind(v) for v in value]
            if all(b is None for b in items):
                return None
            return ("tuple", tuple(("const", v) if b is None else b for v, b in zip(value, items)))
        slot = self._slot(value) if hasattr(value, "shape") else None
        return None if slot is None else ("slot", slot)

    def _op_number(self, step: PlanStep) -> int:
        """The op number of a plan step's node (a node made in this function, with no tensor hook)."""
        entry = self.entry_of.get(id(step.node))
        if entry is None:
            raise JitError(f"jit: an input of shape {step.shape} was computed outside the function with a graph; "
                           "a replay cannot backpropagate into it. Compute it inside, or pass it detached")
        if step.node.hooks:
            raise JitError(f"jit: a hook on the result of {step.op}; tensor hooks on intermediate "
                           "results are not replayed")
        return entry

    def _leaf_number(self, t: Tensor) -> int:
        """The leaf number of a tensor a gradient goes to: an argument or a captured tensor."""
        leaf = self.leaf_of.get(id(t))
        if leaf is None:
            number = self.arg_number.get(id(t))
            if number is None and id(t.data) in self.slot_of and self.slot_of[id(t.data)] not in self.captured_slots:
                raise JitError(f"jit: a tensor of shape {t.shape} made in the function from its inputs "
                               "requires grad (x.detach().requires_grad_()?): a replay would send its gradient "
                               "to this call's tensor. Pass it as an argument that requires grad instead")
            leaf = self.leaf_of[id(t)] = len(self.tape.leaves)
            self.tape.leaves.append(("arg", number) if number is not None else ("tensor", t))
            self.alive.append(t)
        return leaf

    def _numbered(self, plan: Plan) -> BackwardPlan:
        """The engine's plan with op and leaf numbers of this record in place of this call's objects."""
        return BackwardPlan.of(plan).renumbered(self._op_number, self._leaf_number)

    def _live(self, value: Any, where: str) -> Any:
        """A call's argument as a replay must pass it: one of this call's tensors (an argument, a
        `.grad`, an op's result) as a `Live`, inside lists and tuples too; other objects as they are."""
        if isinstance(value, Tensor):
            if id(value) in self.arg_number:
                return Live("arg", self.arg_number[id(value)])
            owner = self._grad_owner(value)
            if owner is not None:
                return Live("grad", owner)
            if id(value) not in self.made_here:
                self.held[id(value)] = value
                return value  # from outside (a parameter): the same tensor at every call
            slot = self._slot(value.data)
            if slot is None:
                raise JitError(f"jit: {where} got a tensor made in the function outside ops (tx.Tensor(...)?); "
                               "a replay would pass the recording's tensor again, changed by its earlier calls. "
                               "Pass it as an argument")
            return Live("slot", slot, value.backend)
        if type(value) in (list, tuple):
            items = [self._live(v, where) for v in value]
            return type(value)(items) if any(type(v) is Live for v in items) else value
        if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
            raise JitError(f"jit: {where} got a raw array (.data?), which a replay would pass again as it "
                           "was while recording; pass the Tensor")
        if not isinstance(value, (Backend, bool, int, float, str, bytes, type(None), np.generic)):
            self.held[id(value)] = value  # an optimizer, a schedule, a module: the same object at every call
        return value

    # -- what the engine shows -----------------------------------------------------------------
    @_this_thread
    def forward(self, fn, inputs, params, output, seconds, recorded) -> None:
        if self.walking:
            return  # a leaf's `.grad + g`: part of the walk, which the record derives itself
        ins = tuple(self._source(t) for t in inputs)
        if type(fn) is Getitem and any(is_bool_array(i) and id(i) in self.slot_of for i in params["index"]):
            raise JitError("jit: indexing with a boolean mask that is an input or made in the function: the result's shape "
                           "depends on the mask's values, which a replay cannot follow. Multiply by the "
                           "mask or use where() instead")
        dynamic = [(name, b) for name, b in ((n, self._bind(v)) for n, v in params.items()) if b is not None]
        index = len(self.tape.ops)
        if isinstance(output, np.bool_) or (id(output) in self.slot_of and not any(output is t.data for t in inputs)):
            self.shared.add(id(output))  # NumPy's np.True_, or an array another op made: not told apart by id
        needs_grad = [t.requires_grad for t in inputs] if recorded else None
        out = self._new_slot(output, f"s{index}")
        op = Op(index, type(fn), fn.backend, ins, dict(params), dynamic or None, out, needs_grad)
        self.tape.ops.append(op)
        self.entry_of[id(fn)] = index
        self.alive.append(fn)
        if self.tape.program and type(self.tape.program[-1]) is list:
            self.tape.program[-1].append(op)
        else:
            self.tape.program.append([op])

    @_this_thread
    def backward_begin(self, root, grad, plan, create_graph, targets) -> None:
        """Keep the engine's plan of this walk, numbered for the record (the replay runs the same plan)."""
        if create_graph or targets is not None:
            raise JitError("jit: create_graph=True and tx.grad are not supported inside a jitted function")
        self._check_host()
        self.walking += 1
        slot = self._slot(grad.data)
        seed = ("slot", slot) if slot is not None else ("const", grad.data.copy())
        numbered = self._numbered(plan)
        if not plan.retain_graph:  # a graph kept on purpose may be walked again after the call
            self.consumed.update(step.node for step in numbered.steps)
        self.tape.program.append(Backward(numbered, seed, root.backend))

    @_this_thread
    def backward_end(self) -> None:
        self.walking -= 1
        self._engine_wrote()
        self.host = self._host_state()  # hooks in backward run again at each replay: they may draw

    @_this_thread
    def call(self, function, args, kwargs, result, seconds) -> None:
        if self.walking:
            return
        self._check_host()
        self._engine_wrote()
        if function is all_reduce.__wrapped__ and args and isinstance(args[0], (int, float)):
            self.read(None, "all-reduced as a Python number (all_reduce a Tensor instead)")
        if any(isinstance(a, Iterator) for a in (*args, *kwargs.values())):
            raise JitError(f"jit: {function.__qualname__} got an iterator (a generator?), which a replay "
                           "would find used up; pass a list")
        if function is Module.train.__wrapped__:  # the mode of these is the function's doing from here
            self.mode_set.update(id(m) for m in args[0].modules())
        where = function.__qualname__
        if args and id(args[0]) in self.made_inside:
            raise JitError(f"jit: {where} on an object made inside the function (an optimizer?): eager makes a "
                           "new one at each call, with fresh state, a replay would keep using the recording's. "
                           "Make it outside the function")
        args, kwargs = self._live(args, where), {k: self._live(v, where) for k, v in kwargs.items()}
        self.tape.program.append(Call(self.tape.calls, function, args, kwargs))
        self.call_of[id(result)] = self.tape.calls
        self.alive.append(result)
        self.tape.calls += 1

    # -- what watch.py shows (in this recording's thread only), and changes the engine announces ----
    def stateful(self, obj) -> None:
        """An object whose state replayable calls change (an optimizer, a schedule) is being made."""
        self.made_inside.add(id(obj))
        self.alive.append(obj)

    def module(self, module: Module) -> None:
        """A module called: its mode at its first call is checked before each replay (`Tape.still_valid`;
        None if the function set it itself before), and its hooks are refused here, as a record made
        after one is registered finds them."""
        if module._hooks or GLOBAL_HOOKS:
            raise JitError("jit: a module hook is registered (by you, or by a tool such as "
                           "tx.inspect.record_modules); hooks run Python code that a replay would skip. "
                           "Remove the hooks, or run this function without tx.jit")
        if id(module) not in self.modules:
            self.modules[id(module)] = (module, None if id(module) in self.mode_set else module.training)

    @_this_thread
    def changed(self, how: str) -> None:
        """What the engine announces as changed outside ops (a hook on a leaf, an observer turned on)."""
        self.side_effect(how)

    def side_effect(self, how: str) -> None:
        """A change made outside ops and replayable calls, which a replay would not make again."""
        if not self.walking:  # a hook running in backward runs again at each replay
            self._check_host()  # an earlier cause first (nn.init: numbers drawn, then .data replaced)
            raise JitError(f"jit: {how} inside the function; a replay makes only its ops and replayable "
                           "calls (optimizer steps), so it would not do this again. Do it outside the "
                           "jitted function")

    @_this_thread
    def read(self, t: Tensor | None, how: str) -> None:
        """Refuse a value that leaves the graph (see `observers.show_read`) if it may differ at the
        next call: made from the arguments by ops, a parameter (the optimizer changes it), a
        gradient, or fresh random numbers (`t` None). A replay could only repeat this call's value.
        Hooks that run during a backward (post-accumulate-grad) run again at each replay: they may read."""
        if self.walking:
            return
        if t is not None:
            self._check_host()
        if t is None or id(t.data) in self.slot_of or t.requires_grad or self._grad_owner(t) is not None:
            what = "numbers were" if t is None else f"a tensor of shape {t.shape} was"
            raise JitError(f"jit: {what} {how} while recording; a replay would repeat this call's value. "
                           "Do it outside the jitted function: pass such values in, or return the tensor "
                           "and read it after the call")

    def _grad_owner(self, t: Tensor) -> tuple | None:
        """("arg", number) or ("tensor", it) when `t` is the `.grad` of an argument or of a
        captured tensor (a parameter), else None."""
        for i, o in enumerate(self.tensors):
            if o.grad is t:
                return ("arg", i)
        return next((("tensor", c) for _, c in self.tape.captured if c.grad is t), None)

    @staticmethod
    def _host_state() -> tuple:
        generator = host_rng()
        return generator, generator.bit_generator.state

    def _check_host(self) -> None:
        """Refuse numbers drawn from the host generator (`nn.init`, `tx.randn`) since the last look,
        outside backward: a replay would use this call's numbers again. (Its state is looked at, not
        each draw, as the draws come through functions imported by name; the generator is one for all
        threads, so another thread's draw meanwhile is refused too.) `tx.manual_seed` replaces it."""
        generator, state = self.host
        if generator.bit_generator.state != state:
            self.read(None, "drawn from the host generator (nn.init, tx.randn)")
        self.host = self._host_state()

    # -- the end -------------------------------------------------------------------------------
    def finish(self, result: Any) -> Tape:
        self._check_host()
        for entry in self.raw.values():
            self._check(entry)
        tape = self.tape
        tape.output = self._output(result)
        tape.guard = (tuple(t for _, t in tape.captured), self.guard)
        tape.modules = [m for m, _ in self.modules.values()]
        tape.modes = [mode for _, mode in self.modules.values()]
        tape.links = self._links()
        plan_frees(tape)
        return tape

    def _links(self) -> Links:
        """The ways the function reached what the record holds from outside, checked before each
        replay (`reach.py`); refused if one of them was found no way the jit can look again."""
        held = [t for _, t in self.tape.captured if id(t) not in self.made_here] + list(self.held.values())
        for obj in held:
            if not self.reach.reaches(obj) and not isinstance(obj, Module):  # modules made inside are new each call
                what = f"the tensor {obj.name or ''} of shape {obj.shape}" if isinstance(obj, Tensor) else \
                    f"the {type(obj).__name__}"
                raise JitError(f"jit: the function used {what} from outside it, found in no place the jit looks "
                               "again before each call (global and closure variables, arguments, and the items "
                               "and fields of what they hold), so it could not see it replaced. Keep it in one "
                               "of those, or pass it as an argument")
        return self.reach.links_to(held + self.tape.modules)

    def _output(self, value: Any) -> tuple:
        if isinstance(value, Tensor):
            if id(value) in self.arg_number:
                return ("arg", self.arg_number[id(value)])
            if any(t is value for _, t in self.tape.captured):
                self.held[id(value)] = value
                return ("const", value)  # a parameter returned as it is: the same tensor each call
            owner = self._grad_owner(value)
            if owner is not None:
                return ("grad", owner)  # that tensor's .grad as the replay leaves it, as eager's
            slot = self._slot(value.data)
            if slot is None:
                raise JitError(f"jit: the function returned a tensor of shape {value.shape} made outside ops "
                               "(a Tensor built from an array or a number?), which a replay would not make "
                               "again; make it outside the function, or from the inputs with ops")
            entry = self.entry_of.get(id(value.grad_fn)) if value.grad_fn is not None else None
            if entry is not None and entry not in self.consumed:
                if self.tape.differentiable is None:  # the walk a backward from it would make, kept
                    self.tape.differentiable = (slot, self._numbered(backward_plan(value, retain_graph=True)))
                elif self.tape.differentiable[1].steps[0].node != entry:
                    raise JitError("jit: the function returns two results with a graph; return one")
                return ("replayed", slot, value.backend)  # this tensor, not a detached view of its array
            return ("tensor", slot, value.backend)
        if id(value) in self.call_of:
            return ("call", self.call_of[id(value)])
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, [self._output(v) for v in value])
        if isinstance(value, dict):
            return ("dict", [(k, self._output(v)) for k, v in value.items()])
        if value is None or isinstance(value, (bool, int, float, str)):
            return ("const", value)
        raise JitError(f"jit: the function returned a {type(value).__name__}; return Tensors, numbers "
                       "or what optimizer calls returned")


def _values(t: Tensor, array: Any) -> bytes:
    return t.backend.to_host(array).tobytes()
