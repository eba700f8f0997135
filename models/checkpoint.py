"""Saving a model as one .npz file (`tx.save`): its class name and config next to its weights.

Loading calls the constructor again with the saved config and copies the
weights in; nothing in the file is ever executed (tx.load reads JSON and plain
arrays only). The translation trainer writes the same dict with its training
state added (optimizer, schedule, step), so any of its checkpoints is also a
model file that `Transformer.load` reads.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import tinygrad_tx as tx
from tinygrad_tx.serialization import LoadError

MODEL_KEYS = ("model", "config", "weights")


class Checkpointable:
    """Mixin for models built from their `config` (`Model(**asdict(config))`)."""

    config: object

    def save(self, path: str | Path, **extra: Any) -> None:
        """Write the model, and any `extra` entries (training state) beside it."""
        tx.save({"model": type(self).__name__, "config": asdict(self.config), "weights": self.state_dict(),
                 **extra}, path)

    @classmethod
    def load(cls, path: str | Path):
        return cls.from_state(tx.load(path), path)

    @classmethod
    def from_state(cls, state: dict, path: str | Path = "the checkpoint"):
        """The model a loaded checkpoint dict describes."""
        if not isinstance(state, dict) or not set(MODEL_KEYS) <= state.keys() or not isinstance(state["config"], dict):
            raise LoadError(f"{path} is not a model saved by {cls.__name__}.save")
        if state["model"] != cls.__name__:
            raise LoadError(f"{path} holds a {state['model']!r}, not a {cls.__name__}")
        try:
            model = cls(**state["config"])
            model.load_state_dict(state["weights"])
        except (TypeError, KeyError, ValueError, ZeroDivisionError) as e:  # one error type for a file that does not load
            raise LoadError(f"{path}: the saved {cls.__name__} does not load ({type(e).__name__}: {e})") from None
        return model
