# %% [markdown]
# # Exercise 09: the walk, `backward` itself (about 45 minutes)
#
# `loss.backward()` sends d loss/d loss = 1 back through the graph to every leaf. Until now the
# engine's walk called your ops; here you write the walk, and it calls the engine's ops.
#
# What a tensor and a node offer (tinygrad_tx/function.py documents them):
#
#     t.grad_fn            the node (op) that made t; None for a leaf (a parameter, an input)
#     t.requires_grad      whether t wants a gradient (leaves: set by the user)
#     t.grad               a leaf's gradient, a Tensor (None until a backward gives it one)
#     node.inputs          the tensors the op was applied to
#     node.arrays          their arrays, as forward saw them
#     node.backward(g, *node.arrays)  one gradient per input (an array, or None), given g, the
#                          gradient of the node's output (an array shaped like it)
#     node.broadcasts      True if backward may return a gradient in the output's (broadcast)
#                          shape: sum it back to the input's shape (`sum_to` below, exercise 02)
#
# Write:
# 1. `topological_order(root)`: every node behind `root`, each before the nodes that made its
#    inputs, so that when a node runs, every node that used its output has already sent its
#    gradient. Use a list as an explicit stack: a recursive search stops near 1,000 nodes
#    (Python's recursion limit), and one of the check's graphs is a chain of 3,000 ops.
# 2. `backward(root, grad)`: `grad` is d loss/d root (an array shaped like root). Walk the nodes
#    in that order; a gradient waits for each node's output until the node runs (fan-out: a
#    tensor used twice gets two gradients, which *add up*); send each input's gradient on: to
#    the node that made it, or, for a leaf that requires grad, into its `.grad`, which also adds
#    up across backward calls until the optimizer's `zero_grad` sets it to None.
#
#     python -m exercises check 09

# %%
from tinygrad_tx import Tensor  # for your backward: a leaf's .grad is a Tensor, Tensor(g)


def sum_to(g, shape):
    """g summed over the axes broadcasting added (leading) or stretched (1 in `shape`): 02, for any op."""
    lead = g.ndim - len(shape)
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    axes = tuple(range(lead)) + stretched
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g


def topological_order(root):
    """The nodes behind `root`, each before the nodes that made its inputs."""
    raise NotImplementedError("write topological_order")


def backward(root, grad):
    """Send `grad` (d loss / d root, an array shaped like root) back to every leaf's .grad."""
    raise NotImplementedError("write backward")


# %%
if __name__ == "__main__":
    from exercises import check
    print(check("09", globals()))
