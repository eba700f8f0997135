"""Every op explains itself: its own docstring gives the forward (`y = ...`) and each input's
gradient (`dx = ...`), the text the explorer shows beside its node."""
from __future__ import annotations

import inspect

import pytest

import tinygrad_tx as tx


def missing_math(cls: type) -> list[str]:
    """What the op's own docstring lacks of its math: a clause `y = ...` (the forward) and a clause
    `d<input> = ...` for each input of backward (`dxs[i] = ...` for any number of inputs `*xs`), a
    clause being a line or a part of one between semicolons. The explorer shows this text."""
    doc = cls.__dict__.get("__doc__")  # its own, not the base class's
    if not doc:
        return ["a docstring of its own"]
    clauses = [c.strip() for line in doc.splitlines() for c in line.split(";")]
    inputs = list(inspect.signature(cls.backward).parameters.values())[2:]  # after self and the upstream gradient
    wanted = ["y = "] + [f"d{p.name}[i] = " if p.kind is p.VAR_POSITIONAL else f"d{p.name} = " for p in inputs]
    return [w.strip() for w in wanted if not any(c.startswith(w) for c in clauses)]


@pytest.mark.parametrize("op", sorted(tx.REGISTRY))
def test_every_op_states_its_forward_and_each_gradient(op):
    """Every op's docstring states its forward and each gradient: 15 ops had none of their own, and
    the explorer showed the base class's words beside their nodes."""
    missing = missing_math(tx.REGISTRY[op])
    assert not missing, f"{op}'s docstring lacks {missing}"


def test_the_docstring_check_catches_what_is_missing():
    from tinygrad_tx.function import Function

    class Silent(Function, register=False):
        def backward(self, g, x, w):
            return g, g

    class HalfSaid(Silent, register=False):
        """y = x·w;  dx = g·w"""

    assert missing_math(Silent) == ["a docstring of its own"]
    assert missing_math(HalfSaid) == ["dw ="]
    assert missing_math(tx.REGISTRY["Cat"]) == []  # `dxs[i] = ...` for its inputs *xs
