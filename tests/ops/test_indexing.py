"""Indexing (ops/select.py's Getitem): a tuple inside an index is a sequence of indices as in
NumPy, and a bad index is named with its axis and size. Every indexing form against NumPy
is in test_property_parity.py."""
import numpy as np
import pytest

import tinygrad_tx as tx

from ..helpers import leaf, t


@pytest.mark.parametrize("index, picked", [
    (((0, 0), slice(None)), [[2, 2], [0, 0]]),  # row 0 twice: its gradient twice
    (((1, 1, 1),), [[0, 0], [3, 3]]),
    (((0, 0), (1, 1)), [[0, 2], [0, 0]]),
])
def test_tuple_index_picks_and_accumulates_like_numpy(device, index, picked):
    """Silently wrong before: an index given as a Python tuple was taken as a basic index:
    `x[(0, 0), :].sum().backward()` gave `[[1, 1], [0, 0]]` where NumPy and PyTorch give
    `[[2, 2], [0, 0]]`."""
    x = leaf([[1.0, 2.0], [3.0, 4.0]], device)
    y = x[index]
    np.testing.assert_array_equal(y.numpy(), x.numpy()[index])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), picked)


def test_tuple_index_under_create_graph_and_range_check(device):
    """A tuple index under create_graph picks and accumulates the same, and is range-checked (the
    check was skipped on that path)."""
    x = leaf([[1.0, 2.0], [3.0, 4.0]], device)
    (g,) = tx.grad((x[(0, 0), :] ** 2).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(g.numpy(), [[4, 8], [0, 0]])  # d/dx 2·x² = 4x on row 0
    with pytest.raises(IndexError, match="index 2 is out of range for axis 0 of size 2"):
        x[(2, 2, 2),]


def test_indexing_errors(device):
    x = t(3, 4, device=device, requires_grad=True)
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        x[[0, 3]]
    with pytest.raises(IndexError, match="index -5 is out of range for axis 1 of size 4"):
        x[:, [-5]]
    with pytest.raises(IndexError, match="integer or boolean, not float"):
        x[np.array([0.0, 1.0])]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 1, 2]
