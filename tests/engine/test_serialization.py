"""tx.save / tx.load: nested round trips, atomic writes, and clear errors for missing,
truncated, foreign and unsafe files."""
import os
import zipfile

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor, serialization
from tinygrad_tx.serialization import LoadError

pytestmark = pytest.mark.usefixtures("on_each_device")


def nested_state():
    return {
        "model": {"encoder.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
                  "emb": Tensor(np.ones((3, 2), dtype=np.float64))},
        "optim": {"t": 3, "betas": (0.9, 0.999), "state": {"0": {"m": np.zeros(2, dtype=np.float32)}}},
        "ids": np.array([1, 1, 2], dtype=np.int64),
        "mask": np.array([True, False]),
        "scalar": np.float32(0.5),
        "layers": [np.ones(2), {"name": "block"}, [1, 2.5, "three", None, True]],
        "config": {"d_model": 512, "lr": 1e-3, "tokenizer": "bpe", "empty": {}, "none": None, "also_empty": []},
        "not a number": float("nan"),
    }


def assert_same(loaded, original):
    if isinstance(original, dict):
        assert isinstance(loaded, dict) and list(loaded) == list(original)
        for key in original:
            assert_same(loaded[key], original[key])
    elif isinstance(original, (list, tuple)):
        assert isinstance(loaded, list) and len(loaded) == len(original)  # tuples come back as lists
        for a, b in zip(loaded, original):
            assert_same(a, b)
    elif isinstance(original, (Tensor, np.ndarray, np.generic)):
        expected = original.numpy() if isinstance(original, Tensor) else np.asarray(original)
        assert isinstance(loaded, np.ndarray) and loaded.dtype == expected.dtype
        np.testing.assert_array_equal(loaded, expected)
    elif isinstance(original, float) and np.isnan(original):
        assert np.isnan(loaded)
    else:
        assert loaded == original and type(loaded) is type(original)


def test_nested_round_trip(tmp_path):
    state = nested_state()
    tx.save(state, tmp_path / "state.npz")
    assert_same(tx.load(tmp_path / "state.npz"), state)


def test_path_is_used_as_given_and_overwritten(tmp_path):
    path = str(tmp_path / "checkpoint.bin")
    tx.save({"a": np.zeros(1)}, path)
    tx.save({"a": np.ones(1)}, path)
    assert os.listdir(tmp_path) == ["checkpoint.bin"]
    assert tx.load(path)["a"][0] == 1


def test_file_is_a_plain_npz(tmp_path):
    """Any NumPy can read the arrays, without pickle."""
    tx.save({"model": {"w": np.eye(2)}}, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["model/w"], np.eye(2))


def test_a_crash_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    tx.save({"step": 1, "w": np.ones(3)}, path)

    def crash(file, arrays):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(serialization, "_write_npz", crash)
    with pytest.raises(OSError, match="disk full"):
        tx.save({"step": 2, "w": np.zeros(3)}, path)
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind
    assert tx.load(path)["step"] == 1


def test_a_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    tx.save({"step": 1}, path)
    def interrupted(*args):
        raise KeyboardInterrupt  # Ctrl-C just before the rename

    monkeypatch.setattr(serialization.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tx.save({"step": 2}, path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["ckpt.npz"] and tx.load(path)["step"] == 1


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.npz"):
        tx.load(tmp_path / "nowhere.npz")


@pytest.mark.parametrize("keep", [0, 2, 100, 0.5, -1], ids=["empty", "2 bytes", "100 bytes", "half", "last byte"])
def test_truncated_file_says_so_and_names_the_path(tmp_path, keep):
    path = tmp_path / "ckpt.npz"
    tx.save({"w": np.arange(1000, dtype=np.float32), "meta": {"step": 3}}, path)
    data = path.read_bytes()
    size = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path.write_bytes(data[:size])
    with pytest.raises(LoadError, match="truncated or corrupt") as info:
        tx.load(path)
    assert str(path) in str(info.value)


def test_corrupted_bytes_are_detected(tmp_path):
    path = tmp_path / "ckpt.npz"
    tx.save({"w": np.zeros(1000, dtype=np.float32)}, path)
    data = bytearray(path.read_bytes())
    data[2000] ^= 0xFF  # inside the array's bytes: the zip CRC catches it
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match="corrupt"):
        tx.load(path)


def test_foreign_files_are_refused(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(LoadError, match="not a file written by tx.save"):
        tx.load(text)
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.ones(2))
    with pytest.raises(LoadError, match="not written by tx.save"):
        tx.load(plain)


def test_object_arrays_are_refused_both_ways(tmp_path):
    with pytest.raises(TypeError, match="objects"):
        tx.save({"bad": np.array([{"a": 1}], dtype=object)}, tmp_path / "x.npz")
    # A hostile file: our JSON entry plus a pickled object array. Loading must not unpickle it.
    good = tmp_path / "good.npz"
    tx.save({"w": np.ones(2)}, good)
    with zipfile.ZipFile(good) as archive:
        meta = np.lib.format.read_array(archive.open(serialization.META_KEY + ".npy"))
    evil = tmp_path / "evil.npz"
    np.savez(evil, **{serialization.META_KEY: meta, "w": np.array([object()], dtype=object)})
    with pytest.raises(LoadError, match="allow_pickle=False"):
        tx.load(evil)


@pytest.mark.parametrize("state,message", [
    ({"a/b": np.ones(1)}, "without '/'"),
    ({1: np.ones(1)}, "non-empty string"),
    ({"": 1}, "non-empty string"),
    ({serialization.META_KEY: 1}, "reserved"),
    ({"s": {1, 2}}, "cannot store a set at 's'"),
])
def test_bad_states_are_refused_before_writing(tmp_path, state, message):
    with pytest.raises((TypeError, ValueError), match=message):
        tx.save(state, tmp_path / "x.npz")
    assert os.listdir(tmp_path) == []
