"""Saving a model as one .npz file (`tx.save`): its class name and config next to its weights.

Loading calls the constructor again with the saved config and copies the
weights in; nothing in the file is ever executed (tx.load reads JSON and plain
arrays only).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import tinygrad_tx as tx


class Checkpointable:
    """Mixin for models whose constructor takes exactly the fields of their `config`."""

    config: object

    def save(self, path: str | Path) -> None:
        tx.save({"model": type(self).__name__, "config": asdict(self.config), "weights": self.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path):
        state = tx.load(path)
        if not {"model", "config", "weights"} <= state.keys():
            raise ValueError(f"{path} is not a model saved by {cls.__name__}.save")
        if state["model"] != cls.__name__:
            raise ValueError(f"{path} holds a {state['model']}, not a {cls.__name__}")
        model = cls(**state["config"])
        model.load_state_dict(state["weights"])
        return model
