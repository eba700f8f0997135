"""File systems that refuse, for the tests of writing files: a real one, and a stand-in.

`tmpfs(directory, size)` mounts a small tmpfs there (root only: the test skips, saying
why, where mounting is not permitted); `fill(directory, leave)` fills it up to `leave`
bytes; `remount(directory, "ro")` makes it read-only. `StandInDisk` is the same fault
where there is no root (CI): it replaces the `open` of `tinygrad_tx.files`, through which
every file of the program is written, with one whose writes fail as a full or read-only
file system's do, with the same errno at the same call.
"""
from __future__ import annotations

import builtins
import errno
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tinygrad_tx import files


@contextmanager
def tmpfs(directory: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` mounted on `directory` (made if missing) while the block runs."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the stand-in test checks the same behaviour")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip()}); the stand-in test checks "
                    "the same behaviour")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def remount(directory: Path, options: str) -> None:
    """`mount -o remount,OPTIONS`; a file open for writing makes a read-only remount busy a moment."""
    for _ in range(200):
        done = subprocess.run(["mount", "-o", f"remount,{options}", str(directory)], capture_output=True, text=True)
        if done.returncode == 0:
            return
        time.sleep(0.01)
    raise RuntimeError(f"mount -o remount,{options} {directory}: {done.stderr.strip()}")


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the file system of `directory` until about `leave` bytes are free (a filler file)."""
    filler = directory / "filler"
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave))
            f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


class StandInDisk:
    """`tinygrad_tx.files.open` as a file system that fills up from the `full_from`-th file opened for
    writing on (counting from 1), `room` bytes into it (ENOSPC, as a write() to a full disk gives), or
    that is read-only from then on (EROFS at the open). `opened` lists the files opened for writing."""

    def __init__(self, monkeypatch, full_from: int | None = None, room: int = 100, read_only: bool = False):
        self.full_from, self.room, self.read_only, self.opened = full_from, room, read_only, []
        monkeypatch.setattr(files, "open", self.open, raising=False)

    def open(self, path, mode="r", *args, **kwargs):
        if not any(c in mode for c in "wax+"):
            return builtins.open(path, mode, *args, **kwargs)
        self.opened.append(Path(path))
        full = self.full_from is not None and len(self.opened) >= self.full_from
        if full and self.read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        f = builtins.open(path, mode, *args, **kwargs)
        return _Filling(f, self.room if len(self.opened) == self.full_from else 0) if full else f


class _Filling:
    """A file whose writes fail with ENOSPC once `room` more bytes are written."""

    def __init__(self, f, room: int):
        self._f, self._room = f, room

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        n = min(len(data), self._room)
        self._f.write(data[:n])
        self._room -= n
        if n < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return n

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)
