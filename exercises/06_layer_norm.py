# %% [markdown]
# # Exercise 06: `LayerNorm` (about 40 minutes)
#
# Over the last axis (D features), for each row:
#
#     μ = mean x,   σ² = mean (x - μ)²,   x̂ = (x - μ) / √(σ² + eps),   y = x̂·w + b
#
# w and b have shape (D,) and are shared by every row.
#
# Derive in steps (write ĝ = g·w, the gradient of x̂):
# 1. b and w are broadcast over the rows (02): their gradients are sums over every axis but the last.
# 2. x: x̂ depends on x directly *and* through μ and σ, which every x of the row moves.
#    Differentiate x̂_i = (x_i - μ)·r, r = 1/√(σ² + eps), with ∂μ/∂x_j = 1/D and
#    ∂σ²/∂x_j = 2(x_j - μ)/D. Simplify until it reads with ĝ, x̂, r and two means over the row.
#
# The forward keeps x̂ and r = 1/σ for backward (`self.x_hat`, `self.rstd`, each (..., D) and (..., 1)).
#
#     python -m exercises check 06

# %%
from tinygrad_tx.function import Function


class LayerNorm(Function):
    """y = x̂·w + b, x̂ = (x - mean x) / √(var x + eps) over the last axis;  dx = ...;  dw = ...;  db = ..."""

    broadcasts = False  # returns each gradient in its input's shape
    saved = ("x_hat", "rstd")

    def forward(self, x, w, b, eps):
        centred = x - x.mean(axis=-1, keepdims=True)  # (..., D)
        var = (centred * centred).mean(axis=-1, keepdims=True)  # (..., 1)
        self.rstd = 1 / self.xp.sqrt(var + eps)  # (..., 1)
        self.x_hat = centred * self.rstd  # (..., D)
        return self.x_hat * w + b

    def backward(self, g, x, w, b):
        # g: (..., D); return x's gradient (..., D), w's (D,), b's (D,)
        raise NotImplementedError("write LayerNorm.backward")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("06", globals()))
