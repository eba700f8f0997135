# %% [markdown]
# # Exercise 05: `Softmax` (about 25 minutes)
#
# y = softmax(x) along an axis: y_i = exp(x_i) / Σ_j exp(x_j). Every y_i depends on *every* x_j
# of its row, through the sum: the Jacobian is not diagonal.
#
# Derive, for one row: ∂y_i/∂x_j (two cases: i = j and i ≠ j; write both as one formula with
# δ_ij). Then dx_j = Σ_i g_i·∂y_i/∂x_j. Simplify until it reads with y and g only: no
# exponentials, no sums of exp. Keep the sums along `self.axis` with keepdims=True, so that
# they broadcast back over the row.
#
# The forward subtracts the row's max before exp: softmax(x) = softmax(x - c) for any c, and
# exp of a large score would overflow. It does not change the gradient.

# %%
import numpy as np

from tinygrad_tx.function import Function


class Softmax(Function):
    """y = exp(x - max x) / Σ exp(x - max x) along `axis`;  dx = ..."""

    saved = ("y", "axis")

    def forward(self, x, axis):
        e = self.xp.exp(x - x.max(axis=axis, keepdims=True))
        self.y = e / e.sum(axis=axis, keepdims=True)
        self.axis = axis
        return self.y

    def backward(self, g, x):
        # g: shaped like y; self.y is the output
        raise NotImplementedError("write Softmax.backward: in terms of self.y and g")


# %% [markdown]
# ## Why a check against `.sum()` passes a wrong softmax gradient
# Checking `loss = softmax(x).sum()` backpropagates g = 1 everywhere. But Σ_i softmax(x)_i = 1
# whatever x is: that loss is constant, its true gradient is zero, and any backward that
# returns zero for g = 1 passes. For instance this nonsense, which only centres g:

# %%
def centred(g):  # not softmax's gradient at all
    return g - g.mean(axis=-1, keepdims=True)


x = np.random.default_rng(0).standard_normal((2, 5))
ones, random_g = np.ones_like(x), np.random.default_rng(1).standard_normal(x.shape)
print("g = 1:      ", np.abs(centred(ones)).max(), "= the true gradient of the constant Σ softmax")
print("g = random: ", np.abs(centred(random_g)).max(), "which a random upstream gradient exposes")

# %% [markdown]
# So the check (like `tx.gradcheck`) backpropagates a random g, and compares with finite
# differences of Σ y·g.
#
#     python -m exercises check 05

# %%
if __name__ == "__main__":
    from exercises import check
    print(check("05", globals()))
