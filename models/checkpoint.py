"""Saving a model as one .npz file (`tx.save`): its class name and config next to its weights.

Loading calls the constructor again with the saved config and copies the
weights in; nothing in the file is ever executed (tx.load reads JSON and plain
arrays only). The translation trainer writes the same dict with its training
state added (optimizer, schedule, step), so any of its checkpoints is also a
model file that `Transformer.load` reads.

A file from elsewhere may carry a config that does not fit its weights (d_model
65536 beside 64-wide weights): building that model first would allocate gigabytes
before any shape is compared. So each sizing option is first read off the stored
weights' shapes (`Size`), and the model is built only when they agree.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import tinygrad_tx as tx
from tinygrad_tx.serialization import LoadError

MODEL_KEYS = ("model", "config", "weights")
MAX_POSITIONS = 1 << 16
"""The most positions a loaded config may ask for where no weight records them (fixed sinusoids):
its table is built before any input is seen."""


@dataclass(frozen=True)
class Size:
    """A config option read off the weights: axis `axis` of every weight whose name ends with
    `suffix`, or (`axis` None) the number of layers numbered under the prefix `suffix`."""

    suffix: str
    axis: int | None
    in_layers: bool = False  # such weights exist only in a model with layers


class Checkpointable:
    """Mixin for models built from their `config` (`Model(**asdict(config))`)."""

    config: object
    SIZES: ClassVar[dict[str, Size]] = {}  # config option -> where the weights record it
    POSITIONS: ClassVar[str] = "max_len"  # the option sizing a table no weight holds, if none records it

    def save(self, path: str | Path, **extra: Any) -> None:
        """Write the model, and any `extra` entries (training state) beside it."""
        tx.save({"model": type(self).__name__, "config": asdict(self.config), "weights": self.state_dict(),
                 **extra}, path)

    @classmethod
    def load(cls, path: str | Path):
        return cls.from_state(tx.load(path), path)

    @classmethod
    def check_fits(cls, config: dict, weights: Any, path: str | Path = "the checkpoint") -> None:
        """Refuse a config whose sizes are not those of the stored weights, before anything is built."""
        check_sizes(config, weights, cls.SIZES, cls.POSITIONS, path)

    @classmethod
    def from_state(cls, state: dict, path: str | Path = "the checkpoint"):
        """The model a loaded checkpoint dict describes."""
        if not isinstance(state, dict) or not set(MODEL_KEYS) <= state.keys() or not isinstance(state["config"], dict):
            raise LoadError(f"{path} is not a model saved by {cls.__name__}.save")
        if state["model"] != cls.__name__:
            raise LoadError(f"{path} holds a {state['model']!r}, not a {cls.__name__}")
        cls.check_fits(state["config"], state["weights"], path)
        try:
            model = cls(**state["config"])
            model.load_state_dict(state["weights"])
        except (TypeError, KeyError, ValueError, ZeroDivisionError) as e:  # one error type for a file that does not load
            raise LoadError(f"{path}: the saved {cls.__name__} does not load ({type(e).__name__}: {e})") from None
        return model


def check_sizes(config: dict, weights: Any, sizes: dict[str, Size], positions: str, path: str | Path) -> None:
    """`check_fits` for the model class whose `SIZES` and `POSITIONS` are given."""
    if not isinstance(weights, dict):
        raise LoadError(f"{path}: its weights are not a name -> array mapping")
    shapes = {str(name): np.shape(w) for name, w in weights.items()}
    layers = 0  # in the stacks counted so far (SIZES lists the stacks first)
    for option, size in sizes.items():
        if size.axis is None:  # a stack of layers: count them
            seen = len({n[len(size.suffix) + 1:].split(".")[0] for n in shapes if n.startswith(size.suffix + ".")})
            layers += seen
        else:
            found = {shape[size.axis] for name, shape in shapes.items()
                     if (name == size.suffix or name.endswith("." + size.suffix)) and len(shape) > size.axis}
            if not found and size.in_layers and not layers:
                continue
            if not found:
                raise LoadError(f"{path}: no stored weight records {option} (a {size.suffix} is missing)")
            seen = found.pop() if len(found) == 1 else sorted(found)
        if seen != config.get(option):
            raise LoadError(f"{path}: the config says {option} {config.get(option)!r} but the stored weights "
                            f"say {seen!r}")
    value = config.get(positions)
    if positions not in sizes and not (isinstance(value, int) and 0 < value <= MAX_POSITIONS):
        raise LoadError(f"{path}: the config's {positions} {value!r} is not a number of positions "
                        f"from 1 to {MAX_POSITIONS}")
