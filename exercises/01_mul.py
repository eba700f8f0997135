# %% [markdown]
# # Exercise 01: an elementwise op, `Mul` (about 15 minutes)
#
# Every differentiable op of tinygrad_tx is one small class (`tinygrad_tx/function.py`, "How to
# add an op"): `forward` computes on raw arrays; `backward(g, *inputs)` gets `g`, the gradient
# of the loss with respect to the op's output (shaped like the output), and returns one
# gradient per input, in a tuple, shaped like that input.
#
# Here: `y = a·b`, elementwise. Derive on paper, for one element: ∂L/∂a = ∂L/∂y · ∂y/∂a.
# What is ∂y/∂a? So what is the gradient of `a`, given `g`? And of `b`?
#
# Three things the check tries, each a usual mistake:
# - `self.needs_grad[k]` says whether input k wants a gradient (a constant does not): you may
#   skip its work and return None for it.
# - fan-out, `x * x`: the same tensor is both inputs; the engine adds the two gradients.
#   Never change `g` in place (`g *= b`): the same array may go to other ops.
# - a broadcast `b` of shape (4,) against `a` (3, 4): return the gradient in the output's shape;
#   the engine sums it back to `b`'s shape (exercise 02 shows why, and you write it there).
#
# Check from a terminal in the checkout, or run this file's cells in order:
#
#     python -m exercises check 01

# %%
from tinygrad_tx.function import Function


class Mul(Function):
    """y = a·b;  da = ...;  db = ...  (write your gradients into this line too: the explorer shows it)"""

    def forward(self, a, b):
        return a * b  # (...) the broadcast shape of a and b

    def backward(self, g, a, b):
        # g: the gradient of the output, shaped like a * b
        raise NotImplementedError("write Mul.backward: return (gradient of a, gradient of b)")


# %% [markdown]
# ## Check it
# The check runs your `Mul` the way the engine runs every op, on small float64 inputs, and
# compares each gradient with finite differences of Σ y·u for a random u; a failure names the
# input, the element, the value expected and the value got, and the likely cause.

# %%
if __name__ == "__main__":
    from exercises import check
    print(check("01", globals()))
