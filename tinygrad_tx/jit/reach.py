"""What a jitted function reaches from outside, and by which ways: mapped when a recording
starts, checked before each replay.

Python finds what a function uses again at every call, by the same ways: its global names,
its closure cells and defaults, its arguments, and from those the items of lists, tuples and
dicts, the fields of objects (modules, optimizers, dataclasses, any object's attributes and
its class's), and the globals and cells of the functions and methods it calls. A record holds
what it used by identity (a parameter it reads, an optimizer it steps), so the jit checks
before each replay that every way to each such object still leads to it (`Links.hold`): where
another object stands now (`PARAMS["w"] = new`, `batch.w = new`, a global or a cell rebound,
`model.head = Linear(...)`), the function records anew, as eager would use the new one.

The map (`Reach`) is made when a recording starts, so what the function itself changes while
it runs counts too (`PARAMS["w"] = w * 0.9` inside): a replay would not change it again, so
the next call records anew. Code of the engine and of installed libraries is not looked
into (it holds none of the user's tensors); an object the record holds that no way of the
map leads to is refused by the recorder (`Recorder._links`), as no check could see it replaced.

`contents` is the older, coarser comparison beside it: the function's roots and everything its
modules hold, by identity, so that a change the record cannot name (`Dropout.p = 0.0`, a layer
appended) records anew too.
"""
from __future__ import annotations

import functools
import operator
import os
import sys
import sysconfig
import types
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..backends import Backend
from ..distributed import DataParallel
from ..function import Function
from ..nn import Module
from ..observers import ENGINE_DIR
from ..optim import Optimizer
from ..schedules import LRSchedule
from ..tensor import Tensor

Link = tuple  # (holder, kind, key, child): `_follow(holder, kind, key)` gave `child` when the map was made

ENGINE_WAYS: dict[type, tuple[str, ...]] = {Optimizer: ("params",), LRSchedule: ("optimizer",),
                                            DataParallel: ("module",)}
"""The fields of the engine's own objects through which user code reaches what they hold (the
jit's `Jitted` adds its function)."""

_MISSING = object()
_ATOMS = (str, bytes, int, float, complex, type(None), np.generic, np.ndarray, range, slice, type, types.ModuleType,
          types.BuiltinFunctionType, types.CodeType, Tensor, Function, Backend)  # followed no further
_NOT_USERS = tuple(sorted({ENGINE_DIR, "<tape", "<frozen"} | {
    os.path.join(sysconfig.get_paths()[name], "") for name in ("stdlib", "platstdlib", "purelib", "platlib")}))


def user_code(filename: str | None) -> bool:
    """Whether code from `filename` is the user's (not the engine's, a library's, or generated)."""
    return filename is not None and not filename.startswith(_NOT_USERS)


class Reach:
    """Everything reachable from `roots` by the ways Python takes (see the module docstring),
    with the links that lead to each object."""

    def __init__(self, roots: Iterable[Any]):
        self.objects: dict[int, Any] = {}  # id -> object, for everything reached
        self.into: dict[int, list[Link]] = {}  # id -> the links that lead to it
        queue = [root for root in roots if root is not None]
        for root in queue:
            self.objects.setdefault(id(root), root)
        while queue:
            for link in _links_from(queue.pop()):
                child = link[3]
                self.into.setdefault(id(child), []).append(link)
                if id(child) not in self.objects:
                    self.objects[id(child)] = child
                    queue.append(child)

    def reaches(self, obj: Any) -> bool:
        return id(obj) in self.objects

    def links_to(self, targets: Iterable[Any]) -> Links:
        """Every link on a way from a root to one of `targets`."""
        links, seen = [], set()
        queue = [id(t) for t in targets]
        while queue:
            key = queue.pop()
            if key in seen:
                continue
            seen.add(key)
            for link in self.into.get(key, ()):
                links.append(link)
                queue.append(id(link[0]))
        return Links(links)


class Links:
    """Links a record checks before each replay, grouped so that the check is quick: most are a
    key of a dict (an object's fields, a dict's items, a module's globals), some an index of a
    list or tuple; the rest (cells, class attributes, slots) go through `_follow`."""

    def __init__(self, links: Iterable[Link] = ()):
        self.keyed, self.indexed, self.other = [], [], []
        for holder, kind, key, child in links:
            fields = vars(holder) if kind == "attr" else holder
            if kind in ("item", "attr") and type(fields) is dict:
                self.keyed.append((fields, key, child))
            elif kind == "item" and type(holder) in (list, tuple):
                self.indexed.append((holder, key, child))
            else:
                self.other.append((holder, kind, key, child))

    def hold(self) -> bool:
        """Whether every link still leads to the object it led to when the map was made."""
        return (all(fields.get(key, _MISSING) is child for fields, key, child in self.keyed)
                and all(i < len(items) and items[i] is child for items, i, child in self.indexed)
                and all(_follow(holder, kind, key) is child for holder, kind, key, child in self.other))


def _follow(holder: Any, kind: str, key: Any) -> Any:
    try:
        if kind == "item":
            return dict.get(holder, key, _MISSING) if isinstance(holder, dict) else \
                (list.__getitem__ if isinstance(holder, list) else tuple.__getitem__)(holder, key)
        if kind == "attr":
            return vars(holder).get(key, _MISSING)
        if kind == "cell":
            return holder.__closure__[key].cell_contents
        if kind == "class":
            return _MISSING if key in getattr(holder, "__dict__", ()) else _class_attribute(type(holder), key)
        return getattr(holder, key, _MISSING)  # "slot", or a function's, a method's or a partial's own
    except (IndexError, ValueError):  # an item removed, a cell emptied
        return _MISSING


def _class_attribute(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def _links_from(obj: Any) -> Iterator[Link]:
    """A link for each object `obj` leads to (from `obj`, or from its globals)."""
    if isinstance(obj, _ATOMS):
        return
    if isinstance(obj, dict):
        yield from ((obj, "item", k, v) for k, v in list(dict.items(obj)))
    elif isinstance(obj, (list, tuple)):
        yield from ((obj, "item", i, v) for i, v in enumerate(list(obj)))
    elif isinstance(obj, types.FunctionType):
        yield from _function_links(obj)
    elif isinstance(obj, types.MethodType):
        yield from ((obj, "own", "__self__", obj.__self__), (obj, "own", "__func__", obj.__func__))
    elif isinstance(obj, functools.partial):
        yield from ((obj, "own", name, getattr(obj, name)) for name in ("func", "args", "keywords"))
    else:
        yield from _object_links(obj)


def _function_links(fn: types.FunctionType) -> Iterator[Link]:
    """A user function's closure cells, defaults and the globals its code names (and, in a module
    it names, the attributes its code names: `config.W`)."""
    code = fn.__code__
    if not user_code(code.co_filename):
        return
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            yield fn, "cell", i, cell.cell_contents
        except ValueError:  # not filled yet
            continue
    yield from ((fn, "own", name, getattr(fn, name)) for name in ("__defaults__", "__kwdefaults__")
                if getattr(fn, name) is not None)
    names = _names(code)
    for name in names:
        value = fn.__globals__.get(name, _MISSING)
        if value is _MISSING:
            continue
        yield fn.__globals__, "item", name, value
        if isinstance(value, types.ModuleType) and user_code(getattr(value, "__file__", None)):
            yield from ((value, "attr", n, vars(value)[n]) for n in names if n in vars(value))


def _names(code: types.CodeType) -> set[str]:
    """The names `code` looks up as globals or attributes, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _object_links(obj: Any) -> Iterator[Link]:
    """An object's fields (`__dict__` and `__slots__`) and, for a class of the user's, the class
    attributes it does not shadow (its methods lead to the globals they use). Of the engine's
    own objects, only modules are looked into whole; the others only by the fields through
    which user code reaches what they hold (`ENGINE_WAYS`), not their bookkeeping (the buckets
    DataParallel rebuilds after its first backward are no new way to a parameter)."""
    fields = getattr(obj, "__dict__", None)
    fields = fields if isinstance(fields, dict) else {}
    if not isinstance(obj, Module) and _defined_in(type(obj), ENGINE_DIR):
        ways = next((names for cls, names in ENGINE_WAYS.items() if isinstance(obj, cls)), ())
        yield from ((obj, "attr", k, fields[k]) for k in ways if k in fields)
        return
    yield from ((obj, "attr", k, v) for k, v in list(fields.items()))
    seen = set(fields)
    for klass in type(obj).__mro__:
        for name in vars(klass).get("__slots__", ()):
            value = getattr(obj, name, _MISSING)
            if value is not _MISSING:
                yield obj, "slot", name, value
        user = _user_class(klass)
        for name, value in vars(klass).items():
            if name not in seen:
                seen.add(name)  # the first class in the order Python looks in is the one it finds
                if user and not name.startswith("__"):
                    yield obj, "class", name, value


def _user_class(klass: type) -> bool:
    module = sys.modules.get(klass.__module__)
    return module is None or user_code(getattr(module, "__file__", None))


def _defined_in(klass: type, folder: str) -> bool:
    return (getattr(sys.modules.get(klass.__module__), "__file__", None) or "").startswith(folder)


# -- what the function reaches and its modules hold, compared between calls --------------------

_END, _MODULE = object(), object()  # close a container's items, open a module's, in `module_contents`


def roots(fn: Callable) -> list:
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


def contents(fn: Callable, modules: list) -> list:
    """`fn`'s roots, then what each module holds (`module_contents`): the objects themselves,
    compared by identity (`same`) and kept alive meanwhile, so that no id is reused. `Dropout.p =
    0.0`, a submodule replaced, `ModuleList.append`, a global rebound, a tensor frozen each make
    another list. `tx.jit` takes it when a recording begins and compares it before each call, so a
    change the function itself makes while it runs is a change too: a replay would not make it."""
    return roots(fn) + module_contents(modules)


def module_contents(modules: list) -> list:
    """What each module holds: its attributes, and the items of their lists, tuples and dicts all
    the way down; whether a tensor requires grad (Python in the function may check it). The
    modules' train/eval modes are left out: the signature has them."""
    out, seen = [], set()

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
        elif type(value) is Tensor:
            out.append(value.requires_grad)

    for m in modules:
        out += (_MODULE, m)
        for name, value in vars(m).items():
            if name != "training":
                out.append(name)
                add(value)
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def describe_change(before: list, after: list) -> str:
    """Where two `contents` lists first differ, in words ("" where they do not): the module's
    attribute (`Counting.calls`), or a global or closure variable."""
    if same(before, after):
        return ""
    i = next((i for i, (a, b) in enumerate(zip(before, after)) if a is not b), min(len(before), len(after)))
    opened = [k for k in range(min(i, len(after) - 1)) if after[k] is _MODULE]
    if not opened:
        return "a global or closure variable it names"
    owner, k = after[opened[-1] + 1], opened[-1] + 2
    names = [x for x in after[k:i] if type(x) is str and x in vars(owner)]
    return f"{type(owner).__name__}.{names[-1]}" if names else f"an attribute of a {type(owner).__name__}"
