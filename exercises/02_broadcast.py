# %% [markdown]
# # Exercise 02: broadcasting, `Add` (about 15 minutes)
#
# `a + b` with `a` of shape (3, 4) and a bias `b` of shape (4,): NumPy broadcasts `b` to (3, 4),
# as if it were copied onto every row, so that `y[i, j] = a[i, j] + b[j]`.
#
# Derive: `b[j]` is used by y[0, j], y[1, j] and y[2, j]. The chain rule adds one term per use
# (as for `x * x` in 01, fan-out): ∂L/∂b[j] = Σ_i ∂L/∂y[i, j] · ∂y[i, j]/∂b[j]. So what is the
# gradient of `b`, given `g` of shape (3, 4), and what shape must it have?
#
# In general broadcasting (1) adds leading axes and (2) stretches axes of size 1. A gradient
# undoes both: it is summed over the axes added, and over the stretched ones (keeping them as 1).
# Worked example: `a` (3, 1) + `b` (1, 4) gives (3, 4); a's gradient is g summed over axis 1,
# kept as (3, 1).
#
# The engine does this sum for most ops itself (`sum_to` in tinygrad_tx/backward.py: that is
# how 01's broadcast case passed). This `Add` says `broadcasts = False`: it sums its own
# broadcast, as the engine's MatMul does, so here you write it. Use `g.sum(axis=..., keepdims=...)`
# and `.reshape(...)`; a small helper `unbroadcast(g, shape)` serves both inputs (and 04).
#
#     python -m exercises check 02

# %%
from tinygrad_tx.function import Function


class Add(Function):
    """y = a + b;  da = ...;  db = ...  (each summed back to its input's shape)"""

    broadcasts = False  # this op sums its own broadcast back: the engine will not

    def forward(self, a, b):
        return a + b  # the broadcast shape of a and b

    def backward(self, g, a, b):
        # g: shaped like a + b; each gradient must have its input's shape (a.shape, b.shape)
        raise NotImplementedError("write Add.backward: g summed back to a's shape and to b's")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("02", globals()))
