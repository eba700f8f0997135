"""`tx.save(state, path)` and `tx.load(path)`: nested state (weights, optimizer state,
configs) in one `.npz` file.

The file is a zip archive of `.npy` arrays, exactly what `np.savez` writes. Each array
is stored under its path in the nesting, keys joined by "/" ("model/encoder.0.weight").
Everything that is not an array (the shape of the nesting, and the numbers, strings
and lists in it) goes into one JSON entry, `__tinygrad_tx__`, so `load` rebuilds the
same structure. Tensors come back as NumPy arrays and tuples as lists.

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
it over the target (atomic on POSIX and Windows): a crash mid-save leaves the previous
file as it was.
"""
from __future__ import annotations

import json
import math
import os
import uuid
import zipfile
import zlib
from typing import Any, BinaryIO, Callable

import numpy as np

from .tensor import Tensor

SEPARATOR = "/"
META_KEY = "__tinygrad_tx__"
FORMAT, VERSION = "tinygrad_tx.save", 1
MAX_LOAD_BYTES = 4 * 2 ** 30  # what `load` unpacks at most, all entries together
MAX_COMPRESSION_RATIO = 100  # for compressed entries over RATIO_FREE_BYTES
RATIO_FREE_BYTES = 2 ** 20
MAX_DEPTH = 100  # nesting of the saved state

__all__ = ["save", "load", "LoadError"]


class LoadError(ValueError):
    """`load` cannot use the file: truncated, corrupt, unsafe, or not written by `save`."""


def save(state: dict[str, Any], path: str | os.PathLike) -> None:
    """Write `state` (a nested dict of arrays, Tensors, numbers, strings, None, lists) to `path`.

    `path` is used as given (no ".npz" is appended). Keys must be non-empty strings
    without "/"; arrays of Python objects are refused (only pickle could store them).
    """
    if not isinstance(state, dict):
        raise TypeError(f"tx.save: state must be a dict, not {type(state).__name__}")
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(state, "", arrays)
    arrays[META_KEY] = np.array(json.dumps({"format": FORMAT, "version": VERSION, "tree": tree}))
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

def _encode(value: Any, path: str, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The tree node for `value`; its arrays go into `arrays` under their paths."""
    if isinstance(value, dict):
        return {"dict": {key: _encode(item, _join(path, key), arrays) for key, item in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"list": [_encode(item, _join(path, str(i)), arrays) for i, item in enumerate(value)]}
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"tx.save: {path!r} is an array of Python objects, which only pickle could store")
        arrays[path] = array
        return {"array": path}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"tx.save: cannot store a {type(value).__name__} at {path!r}; use arrays, Tensors, "
                    "numbers, strings, None, and lists or dicts of those")


def _join(path: str, key: Any) -> str:
    """`path/key`, refusing keys that would make two paths collide."""
    if not isinstance(key, str) or not key or SEPARATOR in key:
        raise ValueError(f"tx.save: key {key!r} under {path or 'the top level'!r} must be a non-empty "
                         f"string without {SEPARATOR!r}")
    if not path and key == META_KEY:
        raise ValueError(f"tx.save: the top-level key {META_KEY!r} is reserved")
    return f"{path}{SEPARATOR}{key}" if path else key


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


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temporary file beside `path`, fsync it, then rename it over `path`.

    The temporary file is made with plain `open(..., "xb")`, so it gets the permissions
    every other file gets (0666 less the umask; `mkstemp` would make it 0600)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temporary, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make the rename itself survive a power cut (POSIX; Windows cannot open a directory)."""
    if os.name == "posix":
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
