"""What the jit's tests share: bit-for-bit comparison of results, small float32 tensors, and a
step with fan-out, a broadcast and a backward."""
import numpy as np

import tinygrad_tx as tx


def same(a, b) -> bool:
    """Bit-for-bit equality of nested results (structure, types, dtypes and bytes)."""
    if isinstance(a, tx.Tensor) or isinstance(b, tx.Tensor):
        return (isinstance(a, tx.Tensor) and isinstance(b, tx.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and a.numpy().tobytes() == b.numpy().tobytes())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def vec(*values, name=None) -> tx.Tensor:
    return tx.Tensor(np.array(values, dtype=np.float32), name=name)


def chain_step(x, w):
    loss = ((x * w + x).tanh() * w).sum()
    loss.backward()
    return loss
