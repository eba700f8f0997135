"""In-place changes (the versions of function.py): a tensor changed after an op used it is
refused at backward, through whichever tensor shares its memory, and only then."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import Tensor

from ..helpers import leaf


def test_changing_a_saved_input_before_backward_raises(device):
    x = leaf([1.0, 2.0], device)
    y = (x * x).sum()
    x.data = x.data * 10  # replaced between forward and backward
    with pytest.raises(RuntimeError, match="modified after the op used it"):
        y.backward()
    w = leaf([1.0, 2.0], device)
    z = (w * w).sum()
    w.data[0] = 5.0  # in place: the optimizer's way, announced with bump_version
    w.bump_version()
    with pytest.raises(RuntimeError, match="Mul"):
        z.backward()


# Every way the API lets two tensors hold one array (or a view of it), no copy made.
SHARERS = {
    "detach()": lambda p: p.detach(),
    "Tensor(t)": lambda p: Tensor(p),
    "Tensor(t.data)": lambda p: Tensor(p.data),
    "Tensor(t.data[1:])": lambda p: Tensor(p.data[1:]),
    "a reshape made under no_grad": lambda p: _no_grad(lambda: p.reshape(2, 2)),
    "a slice made under no_grad": lambda p: _no_grad(lambda: p[1:]),
    "a transpose of the detached": lambda p: p.detach().reshape(2, 2).T,
}


def _no_grad(make):
    with tx.no_grad():
        return make()


def _changed_in_place(t):
    """An update the engine sees, the optimizer's way (written in place, then bump_version)."""
    t.grad = Tensor(t.backend.xp.ones(t.shape, dtype=t.dtype), device=t.device)
    tx.optim.SGD([t], lr=0.5).step()


@pytest.mark.parametrize("share", sorted(SHARERS))
def test_an_in_place_change_is_seen_through_every_tensor_sharing_the_array(device, share):
    """An optimizer step on p after `(x * p.detach()).sum()` was built went
    unnoticed (the version was the tensor's, not the array's) and backward gave x.grad from the
    updated values. A version belongs to the memory: the change is refused whichever name made it."""
    p, x = leaf([1.0, 2.0, 3.0, 4.0], device), leaf([1.0, 1.0, 1.0, 1.0], device)
    seen = SHARERS[share](p)
    loss = (x[: seen.size].reshape(seen.shape) * seen).sum()  # saves the sharer for x's gradient
    _changed_in_place(p)  # through the original
    with pytest.raises(RuntimeError, match="modified after the op used it"):
        loss.backward()
    p, x = leaf([1.0, 2.0, 3.0, 4.0], device), leaf([1.0, 1.0, 1.0, 1.0], device)
    loss = (x * p).sum()  # saves p for x's gradient
    other = SHARERS[share](p)
    other.data[...] = 0.0  # through the sharer: written in place, then announced
    other.bump_version()
    with pytest.raises(RuntimeError, match="modified after the op used it"):
        loss.backward()


def test_a_change_to_an_array_an_op_kept_for_backward_is_refused(device):
    """Attention keeps its weights for backward, and return_weights hands the same array out: a
    change made through that tensor must be refused like a change to an input."""
    q = leaf(np.arange(8.0).reshape(1, 2, 4) / 8, device)
    out, weights = F.scaled_dot_product_attention(q, q, q, return_weights=True)
    loss = out.sum()
    weights.data[...] = 0.5
    weights.bump_version()
    with pytest.raises(RuntimeError, match="'p' Attention saved for backward .* was modified"):
        loss.backward()


def test_a_copy_shares_no_version(device):
    """The other half: a tensor with an array of its own is not refused after p changes."""
    p, x = leaf([1.0, 2.0], device), leaf([3.0, 4.0], device)
    copies = [Tensor(p.numpy(), device=device), Tensor(p, dtype=np.float32).astype(np.float64), p.detach() * 1.0]
    loss = sum((x * c).sum() for c in copies)
    _changed_in_place(p)
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 6.0])  # the values before the step, three times
