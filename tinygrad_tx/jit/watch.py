"""What a recording watches beyond what every observer sees: what a function does around ops.

Every observer is shown each op, backward walk, replayable call, value that leaves the graph
and rare change outside ops (a hook registered on a leaf, an observer turned on: `changed`)
(`observers.py`). A replay makes the ops and calls again, so the recorder must also know what
the function does that a replay would *not* do again, or that changes what a replay may
assume. Three such things happen on paths too hot to announce: every use would pay for it,
recording or not; a fourth is not announced yet. So they are watched from here, only while a
recording runs: installed for the first recording and removed after the last, so a run
without one pays nothing. While a recording runs, these class attributes are replaced (an
instance finds them on its class at every use):

- `Tensor.data`: every assignment to `.data` (a new array, or the same one written back
  by `-=`) is a side effect; the first one makes a tensor, which the recorder notes
  (`Recorder.made`); every read by code outside the engine is noted (`Recorder.data_read`),
  so that a write through the raw array is found by its values. Not an announcement: `.data`
  is a plain attribute that every op reads for each input; a property on it, and the look at
  the caller's frame that tells the user's reads from the engine's, would slow every op;
- `Tensor.grad`: an assignment outside a backward and outside a replayable call
  (`optimizer.zero_grad()` sets it, and is replayed) is a side effect. Not an announcement:
  a plain attribute too, set by every delivery and read by every optimizer step, and only
  the caller's frame tells a user's `p.grad = None` from the engine's own;
- `Optimizer.__setattr__`, `LRSchedule.__setattr__`: the first attribute of one being made
  tells the recorder one was made inside the function (`Recorder.stateful`); a write from
  outside the engine (`opt.lr *= 0.5`) is a side effect (`schedule.step()` sets `lr`, and is
  replayed). Not an announcement: these are ordinary attribute writes, which optimizers make
  at every step, and again only the caller's frame tells the user's from theirs;
- `Module.__call__`: each module called is noted (`Recorder.module`: its mode, its hooks).
  This one could be announced as cheaply as an op is (one look at `observers.active` in
  `Module.__call__`, in `nn`); until `nn` announces it, it is watched here. (A global module
  hook would not do: a recording refuses module hooks, since a replay skips them.)

A side effect is refused (`Recorder.side_effect`) unless a backward is running (a hook that
runs in backward runs again at each replay). Functions imported by name elsewhere cannot be
watched this way: the engine marks those at their definition (`observers.replayable`), or
the recorder checks their effect itself (the host generator's state, `Recorder`).
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

from .. import observers
from ..nn import Module
from ..observers import ENGINE_DIR
from ..optim import Optimizer
from ..schedules import LRSchedule
from ..tensor import Tensor

_recorders: dict[int, Any] = {}  # thread id -> the recorder writing a record in that thread
_lock = threading.Lock()
_ANNOUNCED = observers.replayable(lambda: None).__code__  # the wrapper of every replayable call
_ABSENT = object()


def by_user(frame: Any) -> bool:
    """Whether `frame` is code outside the engine and outside a replayable call in progress."""
    if frame.f_code.co_filename.startswith(ENGINE_DIR):
        return False
    while frame is not None:
        if frame.f_code is _ANNOUNCED:
            return False
        frame = frame.f_back
    return True


def _recorder() -> Any:
    """The recorder of this thread, or None."""
    return _recorders.get(threading.get_ident())


class _Data:
    def __get__(self, t: Tensor | None, owner: type | None = None) -> Any:
        if t is None:
            return self
        try:
            array = t.__dict__["data"]
        except KeyError:
            raise AttributeError("data") from None
        recorder = _recorder()
        if recorder is not None:
            recorder.data_read(t, array, by_user(sys._getframe(1)))
        return array

    def __set__(self, t: Tensor, array: Any) -> None:
        old, recorder = t.__dict__.get("data"), _recorder()
        if recorder is None:
            pass
        elif old is None:  # a tensor being made
            recorder.made(t)
        elif old is array:
            recorder.side_effect(f"a write to the .data of a tensor of shape {array.shape} (`p.data -= lr * "
                                 "p.grad.data`? write optim.SGD(params, lr=lr).step(), which is replayed)")
        else:
            recorder.side_effect(f"the .data of a tensor of shape {old.shape} was replaced (an EMA? "
                                 "nn.init? load_state_dict?)")
        t.__dict__["data"] = array


class _Grad:
    def __get__(self, t: Tensor | None, owner: type | None = None) -> Any:
        return self if t is None else t.__dict__.get("grad")

    def __set__(self, t: Tensor, grad: Any) -> None:
        recorder = _recorder()
        if recorder is not None and by_user(sys._getframe(1)):
            shape = vars(t)["data"].shape
            recorder.side_effect(f"`.grad = ...` on a tensor of shape {shape} (`p.grad = None`? "
                                 "optimizer.zero_grad() and module.zero_grad() are replayed)")
        t.__dict__["grad"] = grad


def _setattr(self: Any, name: str, value: Any) -> None:
    """`__setattr__` of optimizers and schedules while a recording runs."""
    recorder = _recorder()
    if recorder is not None:
        if not vars(self):  # its first attribute: it is being made, inside the function
            recorder.stateful(self)
        elif by_user(sys._getframe(1)):
            recorder.side_effect(f"a write to the {type(self).__name__}'s {name!r} (`opt.lr *= 0.5`? a "
                                 "schedule's step() is replayed: tx.schedules.LambdaLR)")
    object.__setattr__(self, name, value)


def _module_call(call: Callable) -> Callable:
    @functools.wraps(call)
    def watched(module: Module, *args: Any, **kwargs: Any) -> Any:
        recorder = _recorder()
        if recorder is not None:
            recorder.module(module)
        return call(module, *args, **kwargs)

    return watched


_WATCHES = [  # (class, attribute, what it is while a recording runs)
    (Tensor, "data", _Data()),
    (Tensor, "grad", _Grad()),
    (Optimizer, "__setattr__", _setattr),
    (LRSchedule, "__setattr__", _setattr),
    (Module, "__call__", _module_call(Module.__call__)),
]
_replaced: list[tuple[type, str, Any]] = []  # (class, attribute, what it was) while installed


def start(recorder: Any) -> None:
    """Watch for `recorder`, in this thread, until `stop()`."""
    with _lock:
        if not _recorders:
            for cls, name, watcher in _WATCHES:
                _replaced.append((cls, name, vars(cls).get(name, _ABSENT)))
                setattr(cls, name, watcher)
        _recorders[threading.get_ident()] = recorder


def stop() -> None:
    with _lock:
        del _recorders[threading.get_ident()]
        if not _recorders:
            for cls, name, original in reversed(_replaced):
                if original is _ABSENT:
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)
            _replaced.clear()
