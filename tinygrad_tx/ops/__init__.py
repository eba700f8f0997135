"""The op library, grouped by kind: each op's forward math next to its gradient. Importing it
registers every op in `function.REGISTRY`; the ways in (Tensor methods, `tx.cat`, `F.*`) are
in tensor.py and functional.py."""
from .arith import Add, Cast, Div, Linear, MatMul, Mul, Neg, Pow, PowScalar, Sub
from .attention import Attention, AttentionWeights, attention_keep, attention_weights, causal_mask
from .fused import LayerNorm, LogSoftmax, Softmax
from .loss import REDUCTIONS, CrossEntropy
from .nn import Dropout, Embedding, dropout_mask
from .reduce import Expand, Max, Sum, normalize_axis
from .select import (Compare, Getitem, MaskedFill, ScatterAdd, Where, as_array, as_mask, check_range, is_tensor,
                     normalize_index)
from .shape import Cat, Reshape, Transpose
from .kernels import as_rows
from .unary import Abs, Erf, Exp, Gelu, Log, Relu, Sigmoid, Sqrt, Tanh
