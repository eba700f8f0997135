"""`tx.save(state, path)` and `tx.load(path)`: nested state (weights, optimizer state,
configs) in one `.npz` file.

The file is a zip archive of `.npy` arrays, exactly what `np.savez` writes. Each array
is stored under its path in the nesting, keys joined by "/" ("model/encoder.0.weight").
Everything that is not an array (the shape of the nesting, and the numbers, strings
and lists in it) goes into one JSON entry, `__tinygrad_tx__`, so `load` rebuilds the
same structure. Tensors and NumPy scalars come back as NumPy arrays, and tuples as lists;
everything else comes back identically: the same keys in the same order, the same types,
dtypes, shapes and bytes. `save` refuses, before writing anything, what `load` could not
give back so: keys a zip entry's name would change, dtypes a .npy header cannot describe,
subclasses whose additions would be lost, and nesting deeper than `load` reads.

Safety: arrays are read with `allow_pickle=False` and the rest is JSON, so loading a
file never runs code from it. A file from elsewhere may also lie about sizes, so before
allocating anything `load` checks that the archive unpacks to at most `MAX_LOAD_BYTES`
(4 GiB; real checkpoints here are tens to hundreds of MB), that no compressed entry over
1 MiB expands more than `MAX_COMPRESSION_RATIO` (100) times (`tx.save` compresses
nothing; a zip bomb expands about 1000 times), that each array's header declares exactly
the bytes its entry holds, and that the state nests at most `MAX_DEPTH` (100) levels.
Each refusal is one `LoadError` line; raise the limits (module attributes) to load a
larger file you trust.

Saving writes a temporary file in the same directory, flushes it to disk, then renames
it over the target (`files.write_atomically`): a crash, a full disk or a read-only file
system mid-save leaves the previous file as it was, and the OSError names `path`.
"""
from __future__ import annotations

import io
import json
import math
import os
import warnings
import zipfile
import zlib
from typing import Any, BinaryIO

import numpy as np

from .files import write_atomically
from .tensor import Tensor

SEPARATOR = "/"
META_KEY = "__tinygrad_tx__"
FORMAT, VERSION = "tinygrad_tx.save", 1
MAX_LOAD_BYTES = 4 * 2 ** 30  # what `load` unpacks at most, all entries together
MAX_COMPRESSION_RATIO = 100  # for compressed entries over RATIO_FREE_BYTES
RATIO_FREE_BYTES = 2 ** 20
MAX_DEPTH = 100  # nesting of the saved state
MAX_NAME_BYTES = 2 ** 16 - 1  # of a zip entry's name

__all__ = ["save", "load", "LoadError"]


class LoadError(ValueError):
    """`load` cannot use the file: truncated, corrupt, unsafe, or not written by `save`."""


def save(state: dict[str, Any], path: str | os.PathLike) -> None:
    """Write `state` (a nested dict of arrays, Tensors, numbers, strings, None, lists) to `path`.

    `path` is used as given (no ".npz" is appended). Refused with one line naming the place,
    before anything is written: a key that is not a non-empty `str` without "/", NUL or
    "\\" (a zip entry's name ends at NUL, and Windows reads "\\" as "/"), or that UTF-8
    cannot encode; an array of Python objects, of a custom dtype, whose dtype carries
    metadata (a .npy header holds none of them without pickle), or whose field names are
    not Latin-1 (a header `load` does not read); a subclass of dict, list,
    tuple, str, int, float or ndarray (an OrderedDict's or a masked array's additions would
    be lost: convert it first); more than `MAX_DEPTH` nested dicts and lists.
    """
    if type(state) is not dict:
        raise TypeError(f"tx.save: state must be a dict, not {type(state).__name__}")
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(state, "", arrays, MAX_DEPTH)
    try:
        text = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    except ValueError as e:  # an int longer than Python converts to text (sys.set_int_max_str_digits)
        raise ValueError(f"tx.save: {e}") from None
    arrays[META_KEY] = np.array(text)
    write_atomically(path, lambda f: _write_npz(f, arrays))


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by `save`, returning the same nesting with NumPy arrays."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tx.load: no such file: {path}")
    arrays = _read_npz(path)
    if META_KEY not in arrays:
        raise LoadError(f"tx.load: {path} is an .npz archive but was not written by tx.save "
                        f"(it has no {META_KEY!r} entry)")
    try:
        meta = json.loads(str(arrays.pop(META_KEY).item()))
    except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError; .item() of a non-scalar too
        raise LoadError(f"tx.load: {path} has damaged metadata ({e})") from None
    except RecursionError:
        raise LoadError(f"tx.load: {path} has metadata nested too deeply to read") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "tree" not in meta:
        raise LoadError(f"tx.load: {path} has no {FORMAT!r} metadata")
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise LoadError(f"tx.load: {path} has format version {meta.get('version')!r}; "
                        f"this reader knows {FORMAT!r} up to version {VERSION}")
    try:
        return _decode(meta["tree"], arrays, MAX_DEPTH)
    except _DamagedTree as e:
        raise LoadError(f"tx.load: {path} has damaged metadata ({e})") from None


# -- the nesting <-> flat arrays plus a JSON tree ---------------------------------------
# Each node of the tree is tagged with its kind: {"dict": {...}}, {"list": [...]},
# {"array": "entry name"} or {"value": JSON value}, so no user key can be mistaken for markup.

def _encode(value: Any, path: str, arrays: dict[str, np.ndarray], depth: int) -> dict[str, Any]:
    """The tree node for `value`; its arrays go into `arrays` under their paths. `depth` counts
    the dicts and lists still allowed, as `_decode` counts them."""
    kind = type(value)
    if kind in (dict, list, tuple) and depth == 0:
        raise ValueError(f"tx.save: the state nests more than {MAX_DEPTH} dicts and lists deep at "
                         f"{path!r}, which tx.load refuses (MAX_DEPTH)")
    if kind is dict:
        return {"dict": {key: _encode(item, _join(path, key), arrays, depth - 1) for key, item in value.items()}}
    if kind in (list, tuple):
        return {"list": [_encode(item, _join(path, str(i)), arrays, depth - 1) for i, item in enumerate(value)]}
    if isinstance(value, (Tensor, np.generic)) or kind is np.ndarray:
        array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        problem = _dtype_problem(array.dtype)
        if problem:
            raise TypeError(f"tx.save: the array at {path!r} {problem}")
        arrays[path] = array
        return {"array": path}
    if value is None or kind in (bool, int, float, str):
        return {"value": value}
    raise TypeError(f"tx.save: cannot store a {kind.__name__} at {path!r}; use arrays, Tensors, numbers, "
                    "strings, None, and lists or dicts of those (not subclasses: they would come back as "
                    "their base type)")


def _dtype_problem(dtype: np.dtype) -> str | None:
    """Why a .npy header would not give `dtype` back (None if it would)."""
    if dtype.hasobject:
        return "holds Python objects, which only pickle could store"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy warns when a header drops part of a dtype
        try:
            descr = np.lib.format.dtype_to_descr(dtype)
        except UserWarning as warning:
            return f"has a dtype a .npy file cannot hold ({str(warning).split('.')[0]})"
    back = np.lib.format.descr_to_dtype(descr)
    if back != dtype:
        return f"has dtype {dtype}, which a .npy file gives back as {back}"
    try:  # the header `load` reads (format 1.0 or 2.0) is Latin-1 text
        np.lib.format.write_array_header_2_0(io.BytesIO(), {"descr": descr, "fortran_order": False, "shape": ()})
    except UnicodeEncodeError:
        return "has field names outside Latin-1, which need .npy format 3.0 (tx.load reads 1.0 and 2.0)"
    return None


def _join(path: str, key: Any) -> str:
    """`path/key`, refusing keys that would make two paths collide or change in the zip."""
    if type(key) is not str or not key or any(c in key for c in (SEPARATOR, "\0", "\\")):
        raise ValueError(f"tx.save: key {key!r} under {path or 'the top level'!r} must be a non-empty "
                         f"string without {SEPARATOR!r}, NUL or backslash (the zip entry names of arrays "
                         "are made of keys)")
    if not path and key == META_KEY:
        raise ValueError(f"tx.save: the top-level key {META_KEY!r} is reserved")
    joined = f"{path}{SEPARATOR}{key}" if path else key
    try:
        size = len(joined.encode("utf-8")) + len(".npy")
    except UnicodeEncodeError:
        raise ValueError(f"tx.save: key {key!r} under {path or 'the top level'!r} is not text UTF-8 "
                         "can encode (a lone surrogate)") from None
    if size > MAX_NAME_BYTES:
        raise ValueError(f"tx.save: the key path {joined[:60]!r}... is {size} bytes, longer than a zip "
                         f"entry name can be ({MAX_NAME_BYTES})")
    return joined


class _DamagedTree(Exception):
    """A tree node that `_encode` cannot have written."""


def _decode(node: Any, arrays: dict[str, np.ndarray], depth: int) -> Any:
    """The value of a tree node, `depth` levels of nesting still allowed below it."""
    if not (isinstance(node, dict) and len(node) == 1):
        raise _DamagedTree(f"a tree node must be one tagged value, not {node!r:.60}")
    (kind, body), = node.items()
    if kind in ("dict", "list") and depth == 0:
        raise _DamagedTree(f"the state nests deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
    if kind == "dict" and isinstance(body, dict):
        return {key: _decode(item, arrays, depth - 1) for key, item in body.items()}
    if kind == "list" and isinstance(body, list):
        return [_decode(item, arrays, depth - 1) for item in body]
    if kind == "array" and isinstance(body, str):
        if body not in arrays:
            raise _DamagedTree(f"the array {body!r} is not in the archive")
        return arrays[body]
    if kind == "value" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    raise _DamagedTree(f"unknown node {kind!r} holding {body!r:.60}")


# -- the file ---------------------------------------------------------------------------

def _write_npz(file: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """What np.savez does, minus its keyword arguments (a key named "file" would clash)."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def _read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array in the archive, read with allow_pickle=False, or a LoadError that says why not."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        with open(path, "rb") as f:
            head = f.read(4)
        if b"PK\x03\x04".startswith(head):  # began like a zip archive, or is empty
            raise LoadError(f"tx.load: {path} is truncated or corrupt ({e})") from None
        raise LoadError(f"tx.load: {path} is not a file written by tx.save (not an .npz archive)") from None
    arrays = {}
    with archive:
        _check_sizes(path, archive.infolist())
        for info in archive.infolist():
            name = info.filename
            try:
                with archive.open(info) as member:
                    _check_header(path, info, member)
                with archive.open(info) as member:
                    arrays[name.removesuffix(".npy")] = np.lib.format.read_array(member, allow_pickle=False)
            except LoadError:
                raise
            except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as e:
                raise LoadError(f"tx.load: {path} is truncated or corrupt: entry {name!r}: {e}") from None
            except ValueError as e:  # numpy refuses object arrays when allow_pickle=False
                raise LoadError(f"tx.load: {path}: entry {name!r} cannot be loaded safely: {e}") from None
    return arrays


def _check_sizes(path: str, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive that would unpack to more than MAX_LOAD_BYTES, or an entry that
    expands suspiciously (a zip bomb), from the sizes its directory declares."""
    total = sum(info.file_size for info in infos)
    if total > MAX_LOAD_BYTES:
        raise LoadError(f"tx.load: {path} unpacks to {_size(total)}, more than the limit of "
                        f"{_size(MAX_LOAD_BYTES)} (tinygrad_tx.serialization.MAX_LOAD_BYTES)")
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_FREE_BYTES and ratio > MAX_COMPRESSION_RATIO:
            raise LoadError(f"tx.load: {path}: entry {info.filename!r} expands {ratio:.0f} times "
                            f"({_size(info.compress_size)} to {_size(info.file_size)}), more than "
                            f"the limit of {MAX_COMPRESSION_RATIO} (MAX_COMPRESSION_RATIO)")


def _check_header(path: str, info: zipfile.ZipInfo, member: BinaryIO) -> None:
    """Refuse an entry whose .npy header declares other than the bytes the entry holds
    (a header asking for (10**12,) float64 in an 882-byte file), before allocating them."""
    version = np.lib.format.read_magic(member)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f"unsupported .npy format version {version}")
    shape, _, dtype = readers[version](member)
    if dtype.hasobject:
        return  # pickled Python objects: read_array refuses them (allow_pickle=False)
    declared, held = math.prod(shape) * dtype.itemsize, info.file_size - member.tell()
    if declared != held:
        raise LoadError(f"tx.load: {path}: entry {info.filename!r} declares shape {shape} of {dtype} "
                        f"({_size(declared)}) but holds {_size(held)}")


def _size(n: int) -> str:
    """A byte count for people: 882 bytes, 1.5 MB, 8.0 TB."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
