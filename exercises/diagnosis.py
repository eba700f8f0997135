"""What a wrong gradient says about its cause: the patterns of the usual mistakes, read from
the numbers (the gradient got against the one expected), never guessed from the code.

    missing sum over a broadcast axis   got has the output's shape, or is off by that axis's size
    transposed product                  got has the input's shape reversed, or equals expectedᵀ
    sign flipped                        got == -expected
    NaN                                 0/0, 0·∞ or ∞ - ∞ (a fully masked row)
    a known slip of this exercise       got equals what that slip computes (softmax without its
                                        row term gives y·g)

`diagnose` returns the first pattern that fits, with the element to show: the one where got
and expected differ most.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

ATOL, RTOL = 1e-6, 1e-5  # finite differences in float64 agree with a right gradient to about 1e-9


@dataclass
class Diagnosis:
    element: tuple[int, ...]
    expected: float
    got: float
    hint: str
    got_shape: tuple[int, ...] | None = None  # set when got's shape is wrong: `got` is then its first element


def close(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.shape == expected.shape and bool(np.allclose(got, expected, atol=ATOL, rtol=RTOL))


def diagnose(got: np.ndarray, expected: np.ndarray, out_shape: tuple,
             known: Sequence[tuple[str, np.ndarray | bool]] = ()) -> Diagnosis | None:
    """None if `got` matches `expected`; else where they differ and the likeliest cause. `out_shape`
    is the shape of the op's output (a broadcast input's gradient arrives in it); `known` pairs
    a hint with the array a known slip of this exercise would give (or True: `got` shows its symptom)."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return _wrong_shape(got, expected, tuple(out_shape))
    if close(got, expected):
        return None
    worst = _worst(got, expected)
    at = Diagnosis(worst, float(expected[worst]), float(got[worst]), "")
    nan = ~np.isfinite(got) & np.isfinite(expected)
    if nan.any():
        at.element = tuple(int(i) for i in np.argwhere(nan)[0])
        at.expected, at.got = float(expected[at.element]), float(got[at.element])
        at.hint = ("not a finite number: a 0/0, 0·∞ or ∞ - ∞ somewhere in backward (on a fully masked row every "
                   "weight is 0 and every score -∞: compute with the weights, never with the -∞ scores)")
        return at
    for hint, slip in known:
        if slip is True or slip is not False and close(got, np.asarray(slip, dtype=np.float64)):
            at.hint = hint
            return at
    at.hint = _same_shape_hint(got, expected, out_shape)
    return at


def _same_shape_hint(got: np.ndarray, expected: np.ndarray, out_shape: tuple) -> str:
    scale = float(np.abs(expected).max(initial=0.0))
    if scale > 0 and close(got, -expected):
        return "a sign flipped: got == -expected at every element"
    if not got.any():
        return "got is all zero: is the gradient computed but not returned, or multiplied by an empty mask?"
    if got.ndim >= 2 and got.shape[-1] == got.shape[-2] and close(got, expected.swapaxes(-1, -2)):
        return ("got is expected transposed (its last two axes swapped): a product in the wrong order, "
                "e.g. gᵀ @ a where aᵀ @ g belongs")
    factor = _factor(got, expected)
    if factor is not None:
        return _factor_hint(factor, got.shape, out_shape)
    return ("no simple pattern (sign, factor, transpose) fits: derive the formula again on paper for one "
            "element, and compare term by term")


def _factor(got: np.ndarray, expected: np.ndarray) -> float | None:
    """c if got == c·expected for one constant c, else None."""
    e, g = expected.ravel(), got.ravel()
    denominator = float(e @ e)
    if denominator == 0:
        return None
    c = float(g @ e) / denominator
    return c if close(got, c * expected) else None


def _factor_hint(c: float, in_shape: tuple, out_shape: tuple) -> str:
    sizes = _sizes(in_shape, out_shape)
    for n, where in sizes:
        if np.isclose(c, n, rtol=1e-6):
            return (f"off by a factor {n} = {where}: a sum where a mean belongs (a missing 1/{n}), or a broadcast "
                    "copy counted too often")
        if np.isclose(c, 1 / n, rtol=1e-6):
            return (f"off by a factor 1/{n} ({where} = {n}): a mean where a sum belongs; a broadcast input's "
                    "gradient is the sum over its copies")
    if c < 0:
        return f"got == {c:.6g}·expected: a sign flipped, and off by a constant factor"
    return f"got == {c:.6g}·expected at every element: a constant factor is wrong (a scale, a 1/n, a 2)"


def _sizes(in_shape: tuple, out_shape: tuple) -> list[tuple[int, str]]:
    """The sizes a factor error usually comes from: each axis of the output and of the input,
    and the product of the output's axes that the input lacks or has as 1 (its broadcast)."""
    sizes = [(int(n), f"the size of axis {a} of the output") for a, n in enumerate(out_shape) if n > 1]
    sizes += [(int(n), f"the size of axis {a} of the input") for a, n in enumerate(in_shape) if n > 1]
    lead = len(out_shape) - len(in_shape)
    if lead >= 0:
        copies = int(np.prod([n for a, n in enumerate(out_shape)
                              if a < lead or (in_shape[a - lead] == 1 and n > 1)], dtype=np.int64))
        if copies > 1:
            sizes.insert(0, (copies, "the number of broadcast copies of the input"))
    return sizes


def _wrong_shape(got: np.ndarray, expected: np.ndarray, out_shape: tuple) -> Diagnosis:
    shape = expected.shape
    element = (0,) * expected.ndim
    first = float(got.reshape(-1)[0]) if got.size else float("nan")
    at = Diagnosis(element, float(expected[element]) if expected.size else float("nan"), first, "", got.shape)
    axes = _broadcast_axes(shape, got.shape)
    if axes is not None:
        at.hint = (f"a missing sum over a broadcast axis: the input (shape {shape}) was broadcast to {got.shape}, "
                   f"so each of its elements was used once per copy; add the copies up: "
                   f"g.sum(axis={axes[0] if len(axes) == 1 else axes}, keepdims=True), reshaped to {shape}")
    elif len(shape) >= 2 and got.shape == (*shape[:-2], shape[-1], shape[-2]):
        at.hint = ("got has the input's shape with its last two axes swapped: a transposed product (e.g. "
                   "gᵀ @ a for aᵀ @ g, or w @ g for g @ wᵀ); the gradient always has its input's shape")
    elif got.shape == out_shape:
        at.hint = f"got has the output's shape {out_shape}: a gradient has its input's shape {shape}"
    else:
        at.hint = f"a gradient has its input's shape {shape}"
    return at


def _broadcast_axes(shape: tuple, got_shape: tuple) -> tuple[int, ...] | None:
    """The axes of `got_shape` that broadcasting `shape` to it added or stretched, or None if
    `shape` does not broadcast to `got_shape`."""
    lead = len(got_shape) - len(shape)
    if lead < 0 or got_shape == shape:
        return None
    axes = list(range(lead))
    for a, (n, m) in enumerate(zip(shape, got_shape[lead:])):
        if n == 1 and m != 1:
            axes.append(a + lead)
        elif n != m:
            return None
    return tuple(axes)


def _worst(got: np.ndarray, expected: np.ndarray) -> tuple[int, ...]:
    error = np.abs(np.nan_to_num(got - expected, nan=np.inf)) - RTOL * np.abs(expected)
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(error)), got.shape))
