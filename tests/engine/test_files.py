"""Writing files whole or not at all (tinygrad_tx/files.py), on a real full or read-only tmpfs
(root only) and on the stand-in that raises the same errors at the same calls: the previous
file is left as it was, no temporary is left behind, and the error names the file written."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.files import append_whole, check_output_path, os_error_line, write_atomically

from ..faults import StandInDisk, fill, remount, tmpfs


def listing(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def check_nothing_changed(directory, path, old: bytes, e: OSError, number: int) -> None:
    assert e.errno == number and e.filename == str(path)
    assert os_error_line(e) == f"{path}: {os.strerror(number)}"
    assert path.read_bytes() == old
    assert not [name for name in listing(directory) if name.endswith(".tmp")]


def test_a_full_disk_leaves_the_previous_file_and_names_it(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        path = disk / "state.npz"
        tx.save({"w": np.zeros(1000, np.float32)}, path)
        old = path.read_bytes()
        fill(disk, leave=20_000)
        with pytest.raises(OSError) as caught:
            tx.save({"w": np.ones(100_000, np.float32)}, path)  # 400 kB: no room
        check_nothing_changed(disk, path, old, caught.value, errno.ENOSPC)
        np.testing.assert_array_equal(tx.load(path)["w"], np.zeros(1000, np.float32))


def test_a_read_only_file_system_leaves_the_previous_file_and_names_it(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        path = disk / "notes.txt"
        write_atomically(path, lambda f: f.write(b"old"))
        remount(disk, "ro")
        with pytest.raises(OSError) as caught:
            write_atomically(path, lambda f: f.write(b"new"))
        check_nothing_changed(disk, path, b"old", caught.value, errno.EROFS)


@pytest.mark.parametrize("room", [0, 1, 5000])
def test_the_stand_in_full_disk(tmp_path, monkeypatch, room):
    path = tmp_path / "state.npz"
    tx.save({"w": np.zeros(1000, np.float32)}, path)
    old = path.read_bytes()
    StandInDisk(monkeypatch, full_from=1, room=room)
    with pytest.raises(OSError) as caught:
        tx.save({"w": np.ones(100_000, np.float32)}, path)
    check_nothing_changed(tmp_path, path, old, caught.value, errno.ENOSPC)


def test_the_stand_in_read_only_file_system(tmp_path, monkeypatch):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"old")
    StandInDisk(monkeypatch, full_from=1, read_only=True)
    with pytest.raises(OSError) as caught:
        write_atomically(path, lambda f: f.write(b"new"))
    check_nothing_changed(tmp_path, path, b"old", caught.value, errno.EROFS)


def test_an_append_to_a_full_disk_adds_nothing(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        log = disk / "metrics.jsonl"
        append_whole(log, b'{"step": 1}\n')
        filler = fill(disk, leave=0)
        with pytest.raises(OSError) as caught:
            append_whole(log, b'{"step": 2, "loss": 0.5}\n' * 500)  # more than a page: a part could land
        check_nothing_changed(disk, log, b'{"step": 1}\n', caught.value, errno.ENOSPC)
        filler.unlink()
        append_whole(log, b'{"step": 2}\n')
        assert log.read_bytes() == b'{"step": 1}\n{"step": 2}\n'


@pytest.mark.parametrize("room", [0, 7])
def test_the_stand_in_append_adds_nothing(tmp_path, monkeypatch, room):
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b'{"step": 1}\n')
    StandInDisk(monkeypatch, full_from=1, room=room)
    with pytest.raises(OSError) as caught:
        append_whole(log, b'{"step": 2}\n')
    check_nothing_changed(tmp_path, log, b'{"step": 1}\n', caught.value, errno.ENOSPC)


def test_a_long_name_still_gets_a_temporary(tmp_path):
    path = tmp_path / ("é" * 120 + ".txt")  # 244 bytes: the name fits, with ".tmp" and more it would not
    write_atomically(path, lambda f: f.write(b"x"))
    assert path.read_bytes() == b"x" and listing(tmp_path) == [path.name]


def test_output_paths_that_must_not_be_replaced_are_refused(tmp_path):
    (tmp_path / "dir.png").mkdir()
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "mine.png").write_bytes(b"a picture")
    (tmp_path / "link.png").symlink_to(tmp_path / "mine.png")
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    for name, says in (("dir.png", "is a directory"), ("fifo.png", "not a regular file"),
                       ("link.png", "symbolic link"), ("loop.png", "symbolic link"),
                       ("no/x.png", "directory to write it into does not exist")):
        with pytest.raises(ValueError, match=says):
            check_output_path(tmp_path / name, "--attention")
    assert check_output_path(tmp_path / "mine.png", "--attention") is True
    assert check_output_path(tmp_path / "new.png", "--attention") is False
    assert (tmp_path / "mine.png").read_bytes() == b"a picture"
