# %% [markdown]
# # Exercise 03: `Sum` and `Mean` over axes (about 20 minutes)
#
# `y = x.sum(axis=(1,))` for x of shape (3, 4) gives y of shape (3,): y[i] = Σ_j x[i, j].
#
# Derive: how does y[i] change when x[i, j] changes? So every element of row i gets the same
# gradient: which one? A reduction's gradient is a broadcast, the mirror image of exercise 02
# (there, a broadcast's gradient was a sum).
#
# Careful with the axes: g has shape (3,), and NumPy lines up shapes from the right, so
# broadcasting g straight to (3, 4) lines it up with the *last* axis, not the summed one. Put
# the summed axes back as 1 first (the shape `keepdims=True` gives), then broadcast
# (`self.xp.broadcast_to`: `self.xp` is NumPy, or CuPy on a GPU).
#
# Then `Mean`: y = (1/n) Σ x over the axes, n the number of elements averaged. Its gradient
# differs from Sum's by one factor.
#
# `axis` arrives as a tuple of non-negative axes, e.g. (0, 2), as the engine's `Tensor.sum`
# passes it.
#
#     python -m exercises check 03

# %%
from tinygrad_tx.function import Function


class Sum(Function):
    """y = Σ x over `axis`;  dx = ..."""

    broadcasts = False  # returns x's gradient in x's own shape
    saved = ("axis", "keepdims")  # what forward keeps on self for backward, declared

    def forward(self, x, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims
        return x.sum(axis=axis, keepdims=keepdims)

    def backward(self, g, x):
        # g: shaped like y (x.shape without the summed axes, or with them as 1 if keepdims)
        raise NotImplementedError("write Sum.backward: g copied to every element it summed")


class Mean(Function):
    """y = mean of x over `axis`;  dx = ..."""

    broadcasts = False
    saved = ("axis", "keepdims")

    def forward(self, x, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims
        return x.mean(axis=axis, keepdims=keepdims)

    def backward(self, g, x):
        raise NotImplementedError("write Mean.backward")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("03", globals()))
