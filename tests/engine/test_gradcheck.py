"""tx.gradcheck itself (gradcheck.py): it catches a wrong gradient that a plain sum would
hide, also past `max_elements` where it probes random directions, upcasts float32 with a
warning, and refuses to check nothing. Every op's check is in tests/ops/test_gradients.py."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor

from ..helpers import TIGHT, t


def test_gradcheck_catches_a_wrong_gradient(device):
    """The checker itself must fail on a wrong softmax backward that is right for a constant g."""
    from tinygrad_tx.function import OnceDifferentiable

    class DiagonalSoftmax(OnceDifferentiable, register=False):
        def forward(self, x):
            e = self.xp.exp(x - x.max(axis=-1, keepdims=True))
            self.y = e / e.sum(axis=-1, keepdims=True)
            return self.y

        def backward(self, g, x):
            return (self.y * (g - g.mean(axis=-1, keepdims=True)),)  # mean(g) where Σ g·y belongs

    x = Tensor(np.random.default_rng(0).standard_normal((2, 4)), requires_grad=True, device=device)
    # a plain sum hides the mistake (Σ softmax is constant), the random upstream gradient does not
    assert tx.gradcheck(lambda x: DiagonalSoftmax.apply(x).sum(), [x])
    with pytest.raises(tx.GradcheckError, match="input 0 of shape \\(2, 4\\), element"):
        tx.gradcheck(lambda x: DiagonalSoftmax.apply(x), [x])


def test_gradcheck_of_a_large_input_probes_random_directions(device):
    """Past `max_elements` the check compares directional derivatives; they must still catch a bug."""
    from tinygrad_tx.function import Function

    class Square(Function, register=False):
        slope = 2.0

        def forward(self, x):
            return x * x

        def backward(self, g, x):
            return (g * x * self.slope,)

    class SlightlyWrongSquare(Square, register=False):
        slope = 2.02

    x = Tensor(np.random.default_rng(0).standard_normal((20, 15)), requires_grad=True, device=device)
    assert tx.gradcheck(Square.apply, [x], **TIGHT)
    with pytest.raises(tx.GradcheckError, match="random direction"):
        tx.gradcheck(SlightlyWrongSquare.apply, [x], **TIGHT)


def test_gradcheck_warns_and_upcasts_float32(device):
    x = Tensor(np.array([0.3, -1.2], dtype=np.float32), requires_grad=True, device=device)
    with pytest.warns(UserWarning, match="float64"):
        assert tx.gradcheck(lambda x: x.tanh(), [x], **TIGHT)


def test_gradcheck_needs_something_to_check():
    with pytest.raises(ValueError, match="no input has requires_grad=True"):
        tx.gradcheck(lambda x: x * 2.0, [t(3)])
