"""Argument checks shared by the math, the models, the data and the optimizers.

A wrong type is a TypeError and a wrong value a ValueError; both name the argument and the value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["check_int", "check_real"]


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as int (>= ``minimum`` when given), else TypeError/ValueError naming ``name``.

    >>> check_int("workers n", 3, 1)
    3
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer (got {value!r})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {value})")
    return value


def check_real(name: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> float:
    """``value`` as a finite float in [low, high) (or (low, high)), else TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number (got {value!r})")
    value = float(value)
    if not math.isfinite(value) or value < low or (low_open and value == low) or value >= high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g})"
        raise ValueError(f"{name} must be finite and in {interval} (got {value})")
    return value
