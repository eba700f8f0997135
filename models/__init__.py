"""Transformer models built only from tinygrad_tx's public API.

Start with `attention.py`, then `embeddings.py`, `layers.py`, `transformer.py`.
"""
from .attention import KVCache, MultiHeadAttention
from .classifier import EncoderClassifier
from .decoding import beam_search, greedy_decode
from .embeddings import (InputEmbedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding,
                         TokenEmbedding, sinusoidal_table)
from .gpt import GPT
from .layers import DecoderLayer, EncoderLayer, FeedForward, Residual
from .transformer import Decoder, Encoder, Transformer

__all__ = ["Transformer", "GPT", "EncoderClassifier", "MultiHeadAttention", "KVCache", "greedy_decode",
           "beam_search", "Encoder", "Decoder", "EncoderLayer", "DecoderLayer", "FeedForward", "Residual",
           "InputEmbedding", "TokenEmbedding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding",
           "sinusoidal_table"]
