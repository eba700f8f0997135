"""The op library, grouped by kind. Importing it registers every op in `autograd.REGISTRY`."""
from .arith import Add, Cast, Div, Linear, MatMul, Mul, Neg, Pow, PowScalar, Sub, matmul
from .attention import Attention, causal_mask, scaled_dot_product_attention
from .fused import LayerNorm, LogSoftmax, Softmax
from .loss import CrossEntropy, cross_entropy
from .nn import Dropout, Embedding, as_ids, dropout, embedding
from .reduce import Expand, Max, Sum, normalize_axis
from .select import Compare, Getitem, MaskedFill, ScatterAdd, Where, getitem, masked_fill, where
from .shape import Cat, Reshape, Transpose, cat, stack
from .unary import Abs, Exp, Gelu, Log, Relu, Sigmoid, Sqrt, Tanh
