# %% [markdown]
# # Exercise 04: `MatMul` and `Linear` (about 25 minutes)
#
# `y = a @ b` for a (n, k) and b (k, m): y[i, j] = Σ_p a[i, p]·b[p, j].
#
# Derive ∂L/∂a[i, p] = Σ_j g[i, j]·∂y[i, j]/∂a[i, p], and the same for b[p, j]; then write each
# sum as a matrix product. Check your products with the shapes alone: a's gradient is (n, k),
# g is (n, m), b is (k, m): there is one way to multiply g and b (or its transpose) into (n, k).
# (`x.swapaxes(-1, -2)` transposes the last two axes, also for a batch.)
#
# Batches: a (B, n, k) @ b (B, k, m) multiplies B pairs; but when b is one (k, m) matrix shared by
# the whole batch (a model's weight), each of the B products used it: its gradient is summed over
# the batch, as in 02 (this MatMul, like the engine's, sums its own batch axes: `broadcasts = False`;
# copy your helper from 02).
#
# Then `Linear`, the layer every model repeats: y = x @ w + b for x (N, in), w (in, out), b (out,).
# You have derived all three of its gradients already.
#
#     python -m exercises check 04

# %%
from tinygrad_tx.function import Function


class MatMul(Function):
    """y = a @ b for a (..., n, k) and b (..., k, m);  da = ...;  db = ..."""

    broadcasts = False  # sums the batch axes it broadcast itself

    def forward(self, a, b):
        return a @ b  # (..., n, m)

    def backward(self, g, a, b):
        # g: (..., n, m); return a's gradient (..., n, k) in a's shape and b's (..., k, m) in b's
        raise NotImplementedError("write MatMul.backward")


class Linear(Function):
    """y = x @ w + b for x (N, in), w (in, out), b (out,);  dx = ...;  dw = ...;  db = ..."""

    broadcasts = False

    def forward(self, x, w, b):
        return x @ w + b  # (N, out)

    def backward(self, g, x, w, b):
        # g: (N, out)
        raise NotImplementedError("write Linear.backward")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("04", globals()))
