"""tx.save / tx.load: nested round trips, atomic writes, and clear errors for missing,
truncated, foreign and unsafe files."""
import math
import os
import tempfile
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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
    """`loaded` is `original` as tx.load gives it back: the same keys in the same order, types,
    dtypes, shapes and bytes; only Tensors and NumPy scalars become arrays, and tuples lists."""
    if type(original) is dict:
        assert type(loaded) is dict and list(loaded) == list(original)
        for key in original:
            assert_same(loaded[key], original[key])
    elif type(original) in (list, tuple):
        assert type(loaded) is list and len(loaded) == len(original)  # tuples come back as lists
        for a, b in zip(loaded, original):
            assert_same(a, b)
    elif isinstance(original, (Tensor, np.ndarray, np.generic)):
        expected = original.numpy() if isinstance(original, Tensor) else np.asarray(original)
        assert type(loaded) is np.ndarray and loaded.dtype == expected.dtype and loaded.shape == expected.shape
        assert loaded.tobytes() == expected.tobytes()  # NaN, -0.0 and padding bytes included
    else:
        assert type(loaded) is type(original) and repr(loaded) == repr(original)  # nan, -0.0 too


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


# -- whatever save accepts, load gives back; whatever it refuses leaves no file -----------------

@pytest.mark.parametrize("state,message", [
    ({"a\0b": np.ones(1), "a\0c": np.zeros(1)}, "NUL"),  # zip names end at NUL: both were "a"
    ({"w": {"x\0": np.ones(1)}}, "NUL"),
    ({"a\\b": np.ones(1)}, "backslash"),  # Windows' zip readers make it "a/b"
    ({"\ud800": np.ones(1)}, "UTF-8"),  # zipfile failed half-way through writing
    ({"k" * 70_000: np.ones(1)}, "longer than a zip entry name"),
    ({"m": np.ma.masked_array([1.0, 2.0], mask=[True, False])}, "MaskedArray"),  # the mask was dropped
    ({"o": OrderedDict(a=1)}, "OrderedDict"),
    ({"t": np.zeros(2, np.dtype(np.float64, metadata={"unit": "m"}))}, "metadata"),
    ({"s": np.array(["a", "b"], dtype=np.dtypes.StringDType())}, "Python objects"),
    ({"r": np.zeros(2, [("Ā", "f4")])}, "Latin-1"),  # its .npy header is format 3.0, which load refused
    ({"flag": type("Flag", (int,), {})(1)}, "cannot store a Flag"),  # came back a plain int
    ({"k": type("Key", (str,), {})("a")}, "cannot store a Key"),
])
def test_what_load_could_not_give_back_is_refused_before_writing(tmp_path, state, message):
    path = tmp_path / "x.npz"
    tx.save({"before": 1}, path)
    with pytest.raises((TypeError, ValueError), match=message):
        tx.save(state, path)
    assert os.listdir(tmp_path) == ["x.npz"] and tx.load(path) == {"before": 1}


def nested(depth: int) -> dict:
    state: dict = {}
    for _ in range(depth - 1):
        state = {"x": state}
    return state


def test_nesting_is_refused_exactly_where_load_would_refuse_it(tmp_path):
    path = tmp_path / "deep.npz"
    tx.save(nested(serialization.MAX_DEPTH), path)
    assert tx.load(path) == nested(serialization.MAX_DEPTH)
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        tx.save(nested(serialization.MAX_DEPTH + 1), tmp_path / "deeper.npz")
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        tx.save({"cycle": cycle}, tmp_path / "cycle.npz")
    assert os.listdir(tmp_path) == ["deep.npz"]


def test_keys_only_json_holds_and_odd_values_come_back():
    """NUL and the like are refused in keys; values keep them, and every float and dtype that
    survives comes back bit for bit."""
    state = {"text": "a\0b\\c\ud800", "floats": [-0.0, math.inf, -math.inf, math.nan, 5e-324],
             "big": 10 ** 300, "dtypes": [np.zeros(2, ">f4"), np.array(["x\0"]), np.float16(-0.0),
                                          np.zeros((2, 3), order="F"), np.zeros(1, [("a", "<i2", (2,)), ("b", "V3")]),
                                          np.array(["2020-01-01"], "M8[D]"), np.zeros((0, 4), np.complex64)]}
    with tempfile.TemporaryDirectory() as folder:
        tx.save(state, os.path.join(folder, "x.npz"))
        assert_same(tx.load(os.path.join(folder, "x.npz")), state)


def mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """`good` about 9 draws in 10, so that most states are saved and loaded, and some refused."""
    return st.sampled_from([good] * 9 + [bad]).flatmap(lambda strategy: strategy)


DTYPES = mostly(st.one_of(hnp.scalar_dtypes(), hnp.byte_string_dtypes(), hnp.unicode_string_dtypes(),
                          hnp.nested_dtypes(max_itemsize=32)),
                st.sampled_from([np.dtype(object), np.dtype(np.float32, metadata={"unit": "s"})]))
ARRAYS = DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                                        max_side=3)))
LEAVES = mostly(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5),
                          ARRAYS, ARRAYS.map(lambda a: a[()] if a.ndim == 0 else a),  # NumPy scalars too
                          st.builds(Tensor, hnp.arrays(np.float32, (2,)))),
                st.one_of(st.sets(st.integers(), max_size=2), st.complex_numbers(max_magnitude=1)))
KEYS = mostly(st.text(min_size=1, max_size=4),  # any Unicode but lone surrogates: NUL, "/", "\\" now and then
              st.sampled_from(["", "\ud800", serialization.META_KEY, 0]))
STATES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.lists(inner, max_size=3).map(tuple),
                                                      st.dictionaries(KEYS, inner, max_size=3)), max_leaves=8)


@settings(max_examples=max(300, settings.default.max_examples))
@given(st.dictionaries(KEYS, STATES, max_size=4))
def test_whatever_save_accepts_load_gives_back_and_what_it_refuses_leaves_no_file(state):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "state.npz")
        try:
            tx.save(state, path)
        except (TypeError, ValueError) as refusal:
            assert str(refusal).startswith("tx.save: ") and "\n" not in str(refusal)
            assert os.listdir(folder) == []
            return
        assert os.listdir(folder) == ["state.npz"]
        assert_same(tx.load(path), state)
