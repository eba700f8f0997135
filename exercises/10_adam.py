# %% [markdown]
# # Exercise 10: Adam's update (about 20 minutes)
#
# Adam (Kingma & Ba, 2015) keeps, for each parameter, running means of its gradient and of the
# gradient's square, and steps by their ratio. At step t (1 at the first step), with g the
# gradient:
#
#     g ← g + weight_decay · p      (an L2 penalty, for parameters that decay; 0 by default)
#     m ← β1·m + (1 - β1)·g         m and v start at 0, in the parameter's shape
#     v ← β2·v + (1 - β2)·g²
#     p ← p - lr · m̂ / (√v̂ + eps)
#
# where m̂ and v̂ are m and v corrected for starting at 0. Derive the correction: if g were the
# same at every step, what would m be after t steps, as a multiple of g? Divide by that factor
# (and likewise for v). Consequence to check yourself: the first step moves each weight by about
# lr, whatever the size of its gradient.
#
# Your class keeps the engine's Adam for everything else (its arguments, the step counter
# `self.t`, checkpoints); you write the update of one parameter, on raw arrays, in place.
#
#     python -m exercises check 10

# %%
from tinygrad_tx import optim


class Adam(optim.Adam):
    """Adam with your update (the engine's Adam for the rest)."""

    def _update(self, param, grad, state, xp, decays):
        """Change the array `param` in place (`param -= ...`) for step `self.t`.

        state: this parameter's dict, empty at its first step; keep m and v in it, as state["m"]
        and state["v"] (arrays of the parameter's shape: xp.zeros_like(param)).
        self.lr, self.betas (β1, β2), self.eps, self.weight_decay: the hyper-parameters.
        decays: False for a parameter in no_decay, which the weight decay leaves alone.
        grad may be shared with other tensors: never write into it.
        """
        raise NotImplementedError("write Adam._update")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("10", globals()))
