"""Layers and the Module base (`from tinygrad_tx import nn`)."""
from . import init
from .layers import Dropout, Embedding, LayerNorm, Linear, parameter
from .hooks import RemovableHandle, register_module_forward_hook, register_module_forward_pre_hook
from .module import Module, ModuleList, Sequential

__all__ = ["Module", "ModuleList", "Sequential", "Linear", "Embedding", "LayerNorm", "Dropout",
           "parameter", "init", "RemovableHandle", "register_module_forward_pre_hook",
           "register_module_forward_hook"]
