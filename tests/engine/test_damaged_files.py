"""tx.load of a file it did not write (serialization.py): damaged metadata, a corrupt
compressed entry, declared sizes and compression ratios it cannot afford, and nesting too
deep are each one LoadError line, found before anything large is allocated. (Apart from
test_serialization.py, whose tests run on each device: a file's damage has no device.)"""
import io
import json
import zipfile

import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.serialization import LoadError


# -- damaged metadata and entries ---------------------------------------------------------------

def _rewrite_meta(path, meta_bytes):
    """Replace the metadata entry of a saved file by `meta_bytes` (a .npy of a JSON string)."""
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries["__tinygrad_tx__.npy"] = meta_bytes
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)


def _npy(value):
    buffer = io.BytesIO()
    np.save(buffer, np.array(value))
    return buffer.getvalue()


@pytest.mark.parametrize("meta", [
    "{not json",
    json.dumps([1, 2]),
    json.dumps({"format": "tinygrad_tx.save", "version": 1}),  # no tree
    json.dumps({"format": "tinygrad_tx.save", "version": 1, "tree": {"pickle": "x"}}),  # unknown kind
    json.dumps({"format": "tinygrad_tx.save", "version": 1, "tree": {"dict": {"w": {"array": "nope"}}}}),
    json.dumps({"format": "tinygrad_tx.save", "version": "1", "tree": {"value": 1}}),
])
def test_load_damaged_metadata_is_a_load_error(tmp_path, meta):
    """Damaged metadata is a LoadError; it raised a raw JSONDecodeError, TypeError or KeyError, and
    an unknown tree kind came back as the raw value."""
    path = tmp_path / "state.npz"
    tx.save({"w": np.ones(3)}, path)
    _rewrite_meta(path, _npy(meta))
    with pytest.raises(LoadError, match="tx.load"):
        tx.load(path)


def test_load_corrupt_compressed_entry_is_a_load_error(tmp_path):
    """A corrupt compressed entry is a LoadError; it raised zlib.error, which the CLI did not catch."""
    path = tmp_path / "state.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("w.npy", _npy(np.arange(1000.0)))
        z.writestr("__tinygrad_tx__.npy", _npy(json.dumps(
            {"format": "tinygrad_tx.save", "version": 1, "tree": {"dict": {"w": {"array": "w"}}}})))
    data = bytearray(path.read_bytes())
    start = data.index(b"w.npy") + len(b"w.npy")  # just after the first local header's name
    data[start + 40:start + 80] = bytes(40)  # zero a run of the deflated stream
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match="truncated or corrupt"):
        tx.load(path)


# -- sizes, compression ratios and nesting it cannot afford ------------------------------------

def _archive(path, entries, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def _meta(tree):
    return _npy(json.dumps({"format": "tinygrad_tx.save", "version": 1, "tree": tree}))


def test_load_refuses_a_header_that_declares_more_than_the_entry_holds(tmp_path):
    """882 bytes declaring (10**12,) float64 are refused; they raised a raw MemoryError, also
    through `evaluate`."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)})
    path = _archive(tmp_path / "big.npz", {"w.npy": header.getvalue() + bytes(64),
                                           "__tinygrad_tx__.npy": _meta({"dict": {"w": {"array": "w"}}})})
    assert path.stat().st_size < 1000
    with pytest.raises(LoadError, match=r"declares shape \(1000000000000,\) of float64 \(8.0 TB\) but holds 64 bytes"):
        tx.load(path)
    from models.translate.run import RunError, load_checkpoint  # what `evaluate` and `translate` call

    with pytest.raises(RunError, match="unreadable: .*declares shape"):
        load_checkpoint(path)


def test_load_refuses_a_zip_bomb_before_inflating_it(tmp_path):
    """A zip bomb is refused before it is inflated; a 1.5 MB one inflated to 1.5 GB."""
    bomb = _npy(np.zeros(4 * 2 ** 20, dtype=np.uint8))  # 4 MiB of zeros deflate about 1000 times
    path = _archive(tmp_path / "bomb.npz", {"w.npy": bomb, "__tinygrad_tx__.npy": _meta({"dict": {"w": {"array": "w"}}})},
                    zipfile.ZIP_DEFLATED)
    with pytest.raises(LoadError, match=r"entry 'w.npy' expands \d+ times .* more than the limit of 100"):
        tx.load(path)


def test_load_refuses_an_archive_over_the_size_limit(tmp_path, monkeypatch):
    """The same class as a zip bomb: what an archive unpacks to in all is bounded too
    (MAX_LOAD_BYTES), checked before reading."""
    path = tmp_path / "state.npz"
    tx.save({"w": np.ones(1000)}, path)
    assert tx.load(path)["w"].shape == (1000,)
    monkeypatch.setattr(tx.serialization, "MAX_LOAD_BYTES", 4000)
    with pytest.raises(LoadError, match=r"unpacks to 8.\d kB, more than the limit of 4.0 kB .*MAX_LOAD_BYTES"):
        tx.load(path)


def test_load_keeps_real_compressed_checkpoints(tmp_path):
    """Compressed weights (ratio about 1) and small zero arrays (ratio 100s, but under 1 MiB) load."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((512, 600)).astype(np.float32), "b": np.zeros(512, dtype=np.float32)}
    meta = json.dumps({"format": "tinygrad_tx.save", "version": 1,
                       "tree": {"dict": {"w": {"array": "w"}, "b": {"array": "b"}}}})
    path = tmp_path / "compressed.npz"
    np.savez_compressed(path, __tinygrad_tx__=np.array(meta), **weights)
    loaded = tx.load(path)
    np.testing.assert_array_equal(loaded["w"], weights["w"])
    np.testing.assert_array_equal(loaded["b"], weights["b"])


@pytest.mark.parametrize("levels, match", [(100_000, "nested too deeply to read"), (150, "deeper than 100 levels")])
def test_load_refuses_deeply_nested_metadata(tmp_path, levels, match):
    """100,000 levels raised RecursionError in the JSON reader; 150 are read, then refused by MAX_DEPTH."""
    tree = '{"list": [' * levels + '{"value": 1}' + "]}" * levels
    meta = _npy('{"format": "tinygrad_tx.save", "version": 1, "tree": ' + tree + "}")
    path = _archive(tmp_path / "deep.npz", {"__tinygrad_tx__.npy": meta})
    with pytest.raises(LoadError, match=match):
        tx.load(path)
