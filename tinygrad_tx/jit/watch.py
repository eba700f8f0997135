"""What a recording sees of `.data`, `.grad` and optimizers: the writes that bypass ops.

The engine shows the recorder every op, backward and replayable call; a write through a
tensor's raw array or to its `.grad`, or to an optimizer's attribute, passes it by:
`p.data -= lr * p.grad.data`, `p.data[...] = v`, `np.clip(g.data, -1, 1, out=g.data)`,
`p.grad = None`, `opt.lr *= 0.5`. A replay would not make them again. So while a recording
runs, `Tensor.data` and `Tensor.grad` are the descriptors below (class attributes that come
before an instance's own), optimizers and schedules get a `__setattr__`, and the recorder
sees

- every assignment to `.data`: a new array, or the same one written back by `-=`; the
  first one makes a tensor, which the recorder notes (`Recorder.made`);
- every assignment to `.grad` outside a backward and outside a replayable call
  (`optimizer.zero_grad()` sets it, and is replayed), and to an optimizer's or a
  schedule's attribute outside the engine (`schedule.step()` sets `lr`, and is replayed);
- every read of `.data` by code outside the engine (`Recorder.data_read`): it keeps a
  copy of the values, which must still hold at the engine's next read of that tensor,
  after each replayable call and backward that did not read it, and at the end.

They are installed for the first recording and removed after the last, so a run with no
recording pays nothing.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from .. import observers
from ..inspect.instrument import ENGINE_DIR
from ..optim import Optimizer
from ..schedules import LRSchedule
from ..tensor import Tensor

_recorders: dict[int, Any] = {}  # thread id -> the recorder writing a record in that thread
_lock = threading.Lock()
_ANNOUNCED = observers.replayable(lambda: None).__code__  # the wrapper of every replayable call


def by_user(frame: Any) -> bool:
    """Whether `frame` is code outside the engine and outside a replayable call in progress."""
    if frame.f_code.co_filename.startswith(ENGINE_DIR):
        return False
    while frame is not None:
        if frame.f_code is _ANNOUNCED:
            return False
        frame = frame.f_back
    return True


class _Data:
    def __get__(self, t: Tensor | None, owner: type | None = None) -> Any:
        if t is None:
            return self
        try:
            array = t.__dict__["data"]
        except KeyError:
            raise AttributeError("data") from None
        recorder = _recorders.get(threading.get_ident())
        if recorder is not None:
            recorder.data_read(t, array, by_user(sys._getframe(1)))
        return array

    def __set__(self, t: Tensor, array: Any) -> None:
        old = t.__dict__.get("data")
        if old is None:  # a tensor being made
            recorder = _recorders.get(threading.get_ident())
            if recorder is not None:
                recorder.made(t)
        elif old is array:
            observers.show_side_effect(f"a write to the .data of a tensor of shape {array.shape} (`p.data -= lr * "
                                      "p.grad.data`? write optim.SGD(params, lr=lr).step(), which is replayed)")
        else:
            observers.show_side_effect(f"the .data of a tensor of shape {old.shape} was replaced (an EMA? "
                                      "nn.init? load_state_dict?)")
        t.__dict__["data"] = array


class _Grad:
    def __get__(self, t: Tensor | None, owner: type | None = None) -> Any:
        return self if t is None else t.__dict__.get("grad")

    def __set__(self, t: Tensor, grad: Any) -> None:
        if threading.get_ident() in _recorders and by_user(sys._getframe(1)):
            shape = vars(t)["data"].shape
            observers.show_side_effect(f"`.grad = ...` on a tensor of shape {shape} (`p.grad = None`? "
                                      "optimizer.zero_grad() and module.zero_grad() are replayed)")
        t.__dict__["grad"] = grad


def _setattr(self: Any, name: str, value: Any) -> None:
    """`__setattr__` of optimizers and schedules while a recording runs."""
    if threading.get_ident() in _recorders and by_user(sys._getframe(1)):
        observers.show_side_effect(f"a write to the {type(self).__name__}'s {name!r} (`opt.lr *= 0.5`? a "
                                  "schedule's step() is replayed: tx.schedules.LambdaLR)")
    object.__setattr__(self, name, value)


def start(recorder: Any) -> None:
    """Watch `.data`, `.grad` and optimizers for `recorder`, in this thread, until `stop()`."""
    with _lock:
        if not _recorders:
            Tensor.data, Tensor.grad = _Data(), _Grad()
            Optimizer.__setattr__ = LRSchedule.__setattr__ = _setattr
        _recorders[threading.get_ident()] = recorder


def stop() -> None:
    with _lock:
        del _recorders[threading.get_ident()]
        if not _recorders:
            del Tensor.data, Optimizer.__setattr__, LRSchedule.__setattr__
            Tensor.grad = None  # the class default again
