"""Scatter-add (scatter.py behind `backend.scatter_add`): repeated indices accumulate, and
each position adds its values in one fixed order on every device."""
import numpy as np
import pytest

import tinygrad_tx as tx


def test_scatter_add_accumulates_repeated_indices(device):
    backend = tx.get_backend(device)
    target = backend.xp.zeros(5, dtype=np.float64)
    backend.scatter_add(target, backend.from_host(np.array([1, 1, 3, 1])), backend.from_host(np.array([1.0, 2, 3, 4])))
    np.testing.assert_array_equal(backend.to_host(target), [0, 7, 0, 3, 0])
    rows = backend.xp.zeros((3, 2), dtype=np.float64)
    backend.scatter_add(rows, backend.from_host(np.array([2, 2])), backend.from_host(np.ones((2, 2))))
    np.testing.assert_array_equal(backend.to_host(rows), [[0, 0], [0, 0], [2, 2]])
    ids, g = np.array([3, 0, 3, 5, 0, 3, -1]), np.arange(14.0).reshape(7, 2)  # unsorted; -1 is row 5
    for n in (6, 7):  # non-negative ids only (NumPy's sorted path), then with -1 (np.add.at)
        expected = np.ones((6, 2))
        for i, row in zip(ids[:n], g[:n]):  # the definition, one row at a time
            expected[i] += row
        table = backend.from_host(np.ones((6, 2)))
        backend.scatter_add(table, backend.from_host(ids[:n]), backend.from_host(g[:n]))
        np.testing.assert_array_equal(backend.to_host(table), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index", ["rows", "elements"])
def test_scatter_add_adds_in_one_fixed_order_at_every_call(device, dtype, index):
    """Seen on an H200 (CuPy's add.at, atomic adds in the order threads happen to run): the
    same training step's gradient changed in its last bits from run to run, so a jit replay no
    longer equalled eager and a resumed run no longer equalled an uninterrupted one. Every
    device adds each position's values in the order they come, the sequential sum, bit for bit
    (the strict device's own add.at adds in a random order, as atomics do: this test fails
    there when the backend scatters with it)."""
    backend, rng = tx.get_backend(device), np.random.default_rng(3)
    n = 3000
    values = (rng.standard_normal((n, 4)) * 10.0 ** rng.uniform(-3, 3, (n, 1))).astype(dtype)  # (n, 4)
    if index == "rows":  # an embedding's gradient: ids into rows, negative ones wrapped
        where, shape = rng.integers(-6, 6, n), (6, 4)
    else:  # advanced indexing on two axes: element by element
        where, shape = (rng.integers(0, 6, (n, 4)), rng.integers(0, 4, (n, 4))), (6, 4)
    expected = np.zeros(shape, dtype)
    np.add.at(expected, where, values)  # NumPy adds one value at a time, in order
    on_device = tuple(map(backend.from_host, where)) if index == "elements" else backend.from_host(where)
    for _ in range(3):
        target = backend.xp.zeros(shape, dtype=dtype)
        backend.scatter_add(target, on_device, backend.from_host(values))
        np.testing.assert_array_equal(backend.to_host(target), expected)
