"""PyTorch twins of our layers, holding the same weights: the lessons' independent truth.

Our `Linear` stores its weight (in, out) so that the forward reads `x @ W + b`;
PyTorch stores (out, in). `nn.MultiheadAttention` keeps the three input
projections stacked in one `in_proj_weight` (3D, D): query rows, key rows, value rows.
"""
from __future__ import annotations

import numpy as np
import torch

from models import DecoderLayer, EncoderLayer, MultiHeadAttention


def _linear(prefix: str, linear) -> dict[str, np.ndarray]:
    return {f"{prefix}.weight": linear.weight.numpy().T, f"{prefix}.bias": linear.bias.numpy()}


def _attention(prefix: str, mha: MultiHeadAttention) -> dict[str, np.ndarray]:
    projections = (mha.w_q, mha.w_k, mha.w_v)
    return {f"{prefix}in_proj_weight": np.concatenate([p.weight.numpy().T for p in projections]),  # (3D, D)
            f"{prefix}in_proj_bias": np.concatenate([p.bias.numpy() for p in projections]),  # (3D,)
            **_linear(f"{prefix}out_proj", mha.w_o)}


def _norm(prefix: str, norm) -> dict[str, np.ndarray]:
    return {f"{prefix}.weight": norm.weight.numpy(), f"{prefix}.bias": norm.bias.numpy()}


def _load(module: torch.nn.Module, state: dict[str, np.ndarray]) -> torch.nn.Module:
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)) for k, v in state.items()})
    return module.eval()


def attention_twin(mha: MultiHeadAttention) -> torch.nn.MultiheadAttention:
    d_model = mha.w_q.weight.shape[0]
    twin = torch.nn.MultiheadAttention(d_model, mha.num_heads, batch_first=True, dtype=torch.float64)
    return _load(twin, _attention("", mha))


def encoder_layer_twin(layer: EncoderLayer, norm_first: bool, activation: str) -> torch.nn.TransformerEncoderLayer:
    d_model, d_ff = layer.ff.linear1.weight.shape
    twin = torch.nn.TransformerEncoderLayer(d_model, layer.self_attn.num_heads, d_ff, dropout=0.0,
                                            activation=activation, batch_first=True, norm_first=norm_first,
                                            dtype=torch.float64)
    return _load(twin, {**_attention("self_attn.", layer.self_attn), **_linear("linear1", layer.ff.linear1),
                        **_linear("linear2", layer.ff.linear2), **_norm("norm1", layer.attn_res.norm),
                        **_norm("norm2", layer.ff_res.norm)})


def decoder_layer_twin(layer: DecoderLayer, norm_first: bool, activation: str) -> torch.nn.TransformerDecoderLayer:
    d_model, d_ff = layer.ff.linear1.weight.shape
    twin = torch.nn.TransformerDecoderLayer(d_model, layer.self_attn.num_heads, d_ff, dropout=0.0,
                                            activation=activation, batch_first=True, norm_first=norm_first,
                                            dtype=torch.float64)
    return _load(twin, {**_attention("self_attn.", layer.self_attn),
                        **_attention("multihead_attn.", layer.cross_attn), **_linear("linear1", layer.ff.linear1),
                        **_linear("linear2", layer.ff.linear2), **_norm("norm1", layer.attn_res.norm),
                        **_norm("norm2", layer.cross_res.norm), **_norm("norm3", layer.ff_res.norm)})
