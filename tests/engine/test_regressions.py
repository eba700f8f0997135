"""Regression tests for the engine defects a hostile test found (issue 10, numbers in brackets).

Each test failed before its fix. The truth is PyTorch's (the `torch` fixture), NumPy's
indexing rules, or a value worked out by hand in the comment next to it.
"""
import io
import json
import zipfile

import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor, optim
from tinygrad_tx.serialization import LoadError


def leaf(values, device="cpu", dtype=np.float64):
    return Tensor(np.array(values, dtype=dtype), device=device, requires_grad=True)


# -- [1] a tuple inside an index is a sequence of indices, as in NumPy ----------------------

@pytest.mark.parametrize("index, picked", [
    (((0, 0), slice(None)), [[2, 2], [0, 0]]),  # row 0 twice: its gradient twice
    (((1, 1, 1),), [[0, 0], [3, 3]]),
    (((0, 0), (1, 1)), [[0, 2], [0, 0]]),
])
def test_tuple_index_picks_and_accumulates_like_numpy(device, index, picked):
    x = leaf([[1.0, 2.0], [3.0, 4.0]], device)
    y = x[index]
    np.testing.assert_array_equal(y.numpy(), x.numpy()[index])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), picked)


def test_tuple_index_under_create_graph_and_range_check(device):
    x = leaf([[1.0, 2.0], [3.0, 4.0]], device)
    (g,) = tx.grad((x[(0, 0), :] ** 2).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(g.numpy(), [[4, 8], [0, 0]])  # d/dx 2·x² = 4x on row 0
    with pytest.raises(IndexError, match="index 2 is out of range for axis 0 of size 2"):
        x[(2, 2, 2),]


# -- [3] truth value, equality and NumPy conversion ------------------------------------------

def test_truth_value_follows_numpy(device):
    assert not bool(Tensor([0.0], device=device))
    assert bool(Tensor(0.5, device=device) < 1)  # 0-d: a plain comparison result
    with pytest.raises(ValueError, match="ambiguous"):
        if Tensor([1.0, 2.0, 3.0], device=device) > 1:
            pass
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0, device=device))
    assert float(Tensor([2.5], device=device)) == 2.5 and int(Tensor(3.7, device=device)) == 3  # as torch
    with pytest.raises(ValueError, match="one element"):
        float(Tensor([1.0, 2.0], device=device))


def test_equality_is_elementwise_and_hash_stays_identity(device):
    t = Tensor([1.0, 2.0, 1.0], device=device)
    np.testing.assert_array_equal((t == 1).numpy(), [True, False, True])
    np.testing.assert_array_equal((t != 1).numpy(), [False, True, False])
    assert (t == None) is False and {t: 1}[t] == 1  # noqa: E711


def test_numpy_conversion_of_a_cpu_tensor_and_state_dicts_of_tensors(device):
    assert np.asarray(Tensor([1.0, 2.0])).dtype == np.float32
    layer = tx.nn.Linear(2, 3).to(device)
    state = {name: Tensor(np.full(p.shape, 0.5, dtype=np.float32), device=device)
             for name, p in layer.named_parameters()}
    layer.load_state_dict(state)
    assert all((p.numpy() == 0.5).all() for p in layer.parameters())


# -- [10] integer tensors are outside the graph -------------------------------------------

def test_integer_tensors_cannot_require_grad(device):
    with pytest.raises(TypeError, match="only floating tensors can require grad"):
        tx.zeros(2, dtype=np.int64, requires_grad=True, device=device)
    x = leaf([1.5, 2.5], device)
    ids = x.astype(np.int64)
    assert not ids.requires_grad and ids.grad_fn is None  # PyTorch: not differentiable
    assert x.astype(np.float32).requires_grad  # between floats it still is


# -- [11] numerical edges, against PyTorch ------------------------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the masked-out branch computes 0 · inf
def test_power_limits_match_torch(torch, device):
    x, y = [0.0, 0.0, 2.0], [0.0, 2.0, 0.0]
    a, b = leaf(x, device), leaf(y, device)
    (a ** b).sum().backward()
    ta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    (ta ** tb).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())
    c = leaf([0.0, 3.0], device)
    (c ** 0).sum().backward()
    np.testing.assert_array_equal(c.grad.numpy(), [0.0, 0.0])


def test_mean_and_var_of_nothing_are_nan(torch, device):
    empty = tx.zeros(0, 3, device=device)
    assert np.isnan(empty.mean().item()) and np.isnan(empty.var().item())
    assert np.isnan(empty.mean(axis=0).numpy()).all()
    assert torch.zeros(0, 3).mean().isnan()


def test_exact_gelu_keeps_float16(torch, device):
    x = Tensor(np.array([-1.5, 0.25, 2.0], dtype=np.float16), device=device, requires_grad=True)
    y = x.gelu()
    assert y.dtype == np.float16
    y.sum().backward()
    assert x.grad.dtype == np.float16
    expected = torch.nn.functional.gelu(torch.tensor([-1.5, 0.25, 2.0], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=2e-3)


# -- [12] mixed dtypes are caught at forward; clear messages ---------------------------------

def test_mixed_dtypes_refused_at_forward(device):
    x32 = Tensor(np.ones((2, 4), dtype=np.float32), device=device, requires_grad=True)
    w64 = Tensor(np.ones(4), device=device, requires_grad=True)
    with pytest.raises(TypeError, match="layer_norm: dtype mismatch float32 and float64"):
        F.layer_norm(x32, w64, w64)
    q = Tensor(np.ones((2, 3, 4), dtype=np.float32), device=device)
    k = Tensor(np.ones((2, 3, 4)), device=device)
    with pytest.raises(TypeError, match="attention: dtype mismatch"):
        F.scaled_dot_product_attention(q, k, k)
    y = leaf([1.0, 2.0], device) * 2
    with pytest.raises(TypeError, match="float32 gradient for a float64 tensor"):
        y.backward(Tensor(np.ones(2, dtype=np.float32), device=device))


def test_clear_messages_for_odd_arguments(device):
    x = Tensor(np.ones((2, 3)), device=device)
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean, not int"):
        x.masked_fill(1, 0.0)
    with pytest.raises(TypeError, match="cross_entropy: logits must be a floating tensor"):
        F.cross_entropy(Tensor(np.ones((2, 3), dtype=np.int64), device=device), [0, 1])
    with pytest.raises(TypeError, match="cross_entropy: logits must be a floating tensor"):
        F.cross_entropy(Tensor(1.0, device=device), [])
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        x.swapaxes(0, 5)
    with pytest.raises(ValueError, match="layer_norm: .*0-d"):
        F.layer_norm(Tensor(1.0, device=device))


# -- [13] optimizer hyper-parameters and state are checked up front -------------------------

@pytest.mark.parametrize("make, match", [
    (lambda p: optim.SGD(p, lr=float("nan")), "lr must be a finite number"),
    (lambda p: optim.Adam(p, lr=float("inf")), "lr must be a finite number"),
    (lambda p: optim.Adam(p, eps=-1e-8), "eps must be"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=-0.9), "momentum must be"),
    (lambda p: optim.AdamW(p, weight_decay=-0.01), "weight_decay must be"),
    (lambda p: optim.Adam(p, betas=(0.9,)), "betas must be two numbers"),
])
def test_optimizer_refuses_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make([leaf([1.0])])


def _trained_adam_state():
    p = leaf([1.0, 2.0])
    adam = optim.Adam([p])
    (p * p).sum().backward()
    adam.step()
    return p, adam.state_dict()


@pytest.mark.parametrize("damage, match", [
    (lambda s: s["state"].update({"5": s["state"]["0"]}), "state for parameter '5'"),
    (lambda s: s.pop("t"), "has no t"),
    (lambda s: s["state"]["0"].pop("v"), r"has state \['m'\], Adam keeps \['m', 'v'\]"),
])
def test_optimizer_load_state_dict_names_what_is_wrong(damage, match):
    p, state = _trained_adam_state()
    damage(state)
    fresh = optim.Adam([p])
    with pytest.raises(ValueError, match=match):
        fresh.load_state_dict(state)
    assert fresh.t == 0 and not fresh.state  # nothing changed


# -- [14] tx.load: every damaged file is a LoadError ------------------------------------------

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
    path = tmp_path / "state.npz"
    tx.save({"w": np.ones(3)}, path)
    _rewrite_meta(path, _npy(meta))
    with pytest.raises(LoadError, match="tx.load"):
        tx.load(path)


def test_load_corrupt_compressed_entry_is_a_load_error(tmp_path):
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


# == issue 22 ================================================================================

# -- [11] a 0-d result is a 0-d array on every device, never a NumPy scalar ---------------------

ZERO_D = {
    "sum": lambda x: x.sum(), "mean": lambda x: x.mean(), "max": lambda x: x.max(), "var": lambda x: x.var(),
    "index": lambda x: x[1], "scaled": lambda x: x.sum() * 2.0, "exp": lambda x: x.sum().exp(),
    "sigmoid": lambda x: x[0].sigmoid(), "compare": lambda x: x.sum() > 0, "matmul": lambda x: x @ x,
    "cross_entropy": lambda x: F.cross_entropy(x.reshape(1, 3), [2]), "cast": lambda x: x.sum().astype(np.float32),
}


@pytest.mark.parametrize("op", ZERO_D)
def test_zero_d_results_are_arrays(device, op):
    """NumPy gives np.float32 for a 0-d result, which `dist.all_reduce` cannot write in place
    ("'numpy.float32' object does not support item assignment") and which is shared (np.True_)."""
    x = leaf([1.0, -2.0, 4.0], device)
    y = ZERO_D[op](x)
    assert y.shape == () and isinstance(y.data, x.backend.array_type), type(y.data)
    y.data[...] = 1  # what all_reduce and broadcast do
    assert y.item() == 1


def test_zero_d_gradients_and_comparisons_are_arrays(device):
    x = Tensor(np.float64(2.0), device=device, requires_grad=True)
    (g,) = tx.grad(x * x, [x])
    assert isinstance(g.data, x.backend.array_type) and g.item() == 4.0
    (x * 3.0).backward()
    assert isinstance(x.grad.data, x.backend.array_type) and x.grad.item() == 3.0
    a, b = x > 0, x > 1  # two True results: two arrays, not NumPy's one shared np.True_
    assert a.data is not b.data


def test_strict_refuses_a_numpy_scalar_as_tensor_data():
    """CuPy gives 0-d arrays; a NumPy scalar in a strict tensor is a value made on the host."""
    strict = tx.get_backend("strict")
    with pytest.raises(TypeError, match="numpy.float32 as the data of a strict tensor"):
        Tensor._from_op(np.float32(1.0), strict)

    class HostSum(tx.function.Function, register=False):
        def forward(self, x):
            return np.float32(x.get().sum())  # computed on the host: CuPy would not give this

    with pytest.raises(TypeError, match="as the data of a strict tensor"):
        HostSum.apply(Tensor([1.0, 2.0], device="strict"))


# -- [12] tx.load refuses declared sizes, compression ratios and nesting it cannot afford ------------

def _archive(path, entries, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def _meta(tree):
    return _npy(json.dumps({"format": "tinygrad_tx.save", "version": 1, "tree": tree}))


def test_load_refuses_a_header_that_declares_more_than_the_entry_holds(tmp_path):
    """882 bytes declaring (10**12,) float64 raised a raw MemoryError, also through `evaluate`."""
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
    bomb = _npy(np.zeros(4 * 2 ** 20, dtype=np.uint8))  # 4 MiB of zeros deflate about 1000 times
    path = _archive(tmp_path / "bomb.npz", {"w.npy": bomb, "__tinygrad_tx__.npy": _meta({"dict": {"w": {"array": "w"}}})},
                    zipfile.ZIP_DEFLATED)
    with pytest.raises(LoadError, match=r"entry 'w.npy' expands \d+ times .* more than the limit of 100"):
        tx.load(path)


def test_load_refuses_an_archive_over_the_size_limit(tmp_path, monkeypatch):
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
