"""Writing files whole or not at all, and naming the file when the system refuses.

`write_atomically(path, write)` lets `write` fill a temporary file beside `path`, flushes
it to disk, then renames it over `path` (atomic on POSIX and Windows). A crash, a full
disk or a read-only file system mid-write leaves the previous file as it was (or none),
never part of one, and the temporary is removed. `append_whole(path, data)` appends all
of `data` to a log, or, if the write fails, none of it. Either raises an OSError that
names `path` itself (not its temporary), so one line can say which file and why:
`os_error_line(e)`.

`check_output_path` refuses, before any work, a path that a user named for a file the
program writes (`explore --html`, `translate --attention`) but that it could not, or must
not, replace: a missing directory, a directory, a FIFO, a device or a socket (never
opened: reading a FIFO waits for a writer forever), or a symbolic link (replacing it would
turn the link into a file; writing through it would write wherever it points, which in a
shared directory such as /tmp may be a file of someone else's choosing).
"""
from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import BinaryIO, Callable

TEMPORARY_NAME_BYTES = 200
"""The longest part of a file's name kept in its temporary's name (NAME_MAX is 255 bytes)."""


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temporary file beside `path`, fsync it, then rename it over `path`.

    The temporary file is made with plain `open(..., "xb")`, so it gets the permissions
    every other file gets (0666 less the umask; `mkstemp` would make it 0600)."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    if len(name.encode("utf-8", "surrogateescape")) > TEMPORARY_NAME_BYTES:
        name = name[:TEMPORARY_NAME_BYTES // 4]  # 4 bytes a character at most
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temporary, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, path)
    except BaseException as e:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise _named(e, path, temporary) from None
    _fsync_directory(directory)


def append_whole(path: str | os.PathLike, data: bytes) -> None:
    """Append `data` to `path` (made if missing): all of it, or, if the write fails (a full
    disk), none of it, so a log never holds part of a line that the next one would run into."""
    with open(path, "ab", buffering=0) as f:
        start = f.seek(0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += f.write(data[written:])
        except BaseException as e:
            f.truncate(start)
            raise _named(e, path) from None


def os_error_line(e: OSError) -> str:
    """One line for an OSError: the file it concerns, if it says, and why it failed."""
    where = f"{os.fsdecode(e.filename)}: " if e.filename is not None else ""
    return f"{where}{e.strerror or e}"


def check_output_path(path: str | os.PathLike, option: str) -> bool:
    """Refuse (ValueError naming `option`) an output path that cannot or must not be replaced by a
    file; True if a regular file is there now (to be written over), False if nothing is."""
    path = Path(path)
    if not os.path.isdir(path.parent):
        raise ValueError(f"{option} {path}: the directory to write it into does not exist")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        raise ValueError(f"{option} {path} is a symbolic link: not written through or over (name the file itself)")
    if mode is not None and stat.S_ISDIR(mode):
        raise ValueError(f"{option} {path} is a directory, not a file")
    if mode is not None and not stat.S_ISREG(mode):
        raise ValueError(f"{option} {path} is not a regular file (a FIFO, a device or a socket): not written over")
    if not os.access(path.parent, os.W_OK) or (mode is not None and not os.access(path, os.W_OK)):
        read_only = hasattr(os, "statvfs") and os.statvfs(path.parent).f_flag & os.ST_RDONLY  # POSIX
        raise ValueError(f"{option} {path}: {'a read-only file system' if read_only else 'no permission to write it'}")
    return mode is not None


def read_head(path: str | os.PathLike, size: int) -> bytes:
    """The first `size` bytes of `path` if it is a regular file (b"" if not), never opening a symbolic
    link or blocking on a FIFO put there since it was checked."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))  # POSIX
    with open(fd, "rb") as f:
        return f.read(size) if stat.S_ISREG(os.fstat(fd).st_mode) else b""


def _named(e: BaseException, path: str | os.PathLike, temporary: str | None = None) -> BaseException:
    """`e`, or, for an OSError about the file being written (or about no file), the same error naming `path`."""
    if not isinstance(e, OSError) or e.filename not in (None, temporary) or e.errno is None:
        return e
    return OSError(e.errno, e.strerror, os.fspath(path))  # the subclass follows errno (PermissionError, ...)


def _fsync_directory(directory: str) -> None:
    """Make the rename itself survive a power cut (POSIX; Windows cannot open a directory)."""
    if os.name == "posix":
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
