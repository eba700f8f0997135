"""A request's parameters, checked: each endpoint reads them through these functions only.

A parameter arrives as text (a query string) or as a JSON value (a POST body); either
way it is checked here before any work is done, and anything else is a `BadRequest`,
which the server answers 400 with its one-line message. Whole numbers are ASCII
digits only: `str.isdigit()` also accepts "²" and "١", which `int()` then refuses.
"""
from __future__ import annotations

import re
from typing import Any

DIGITS = re.compile(r"[0-9]{1,9}")
"""A whole number as a parameter may write it: at most 9 ASCII digits (no sign, no exponent)."""
MAX_TEXT = 10_000
"""The longest text parameter read (a sentence needs far less; the body limit is larger)."""


class BadRequest(ValueError):
    """Something the page asked for that does not exist or cannot be read; answered 4xx with the message."""


def whole(value: Any, name: str, low: int = 0, high: int = 10**9) -> int:
    """`value` (an int, or its ASCII digits as text) as an int from `low` to `high`."""
    if isinstance(value, str) and DIGITS.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}, not {_shown(value)}")
    return value


def text(value: Any, name: str) -> str:
    """`value` as text of at most MAX_TEXT characters."""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be text, not {_shown(value)}")
    if len(value) > MAX_TEXT:
        raise BadRequest(f"{name} is {len(value)} characters long; at most {MAX_TEXT} are read")
    return value


def flat(body: Any) -> dict:
    """A POST body: a JSON object whose values are text, numbers, true/false or null."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    for key, value in body.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise BadRequest(f"{_shown(key)} must be text or a number, not a JSON {type(value).__name__}")
    return body


def _shown(value: Any) -> str:
    """A parameter as an error message quotes it: its repr, cut short."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
