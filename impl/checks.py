"""Argument checks shared by every public function in ``impl``.

Each returns the normalized value or raises TypeError (wrong kind) / ValueError
(out of range) naming the argument. ``reference`` keeps its own checks on
purpose: the oracles import nothing from the code they judge.
"""

from __future__ import annotations

import math

import numpy as np


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum]; Python and NumPy integers, never bool."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def check_scale(scale) -> float:
    """A softmax scale: a finite real number, as a float."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    try:
        finite = math.isfinite(float(scale))
    except OverflowError:  # an int past float's range
        finite = False
    if not finite:
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)



def check_choice(name: str, value, choices: tuple):
    """``value`` when it is one of ``choices``, compared by type and value: True or 32.0 never pass for 1 or 32
    (a NumPy integer is the int it holds)."""
    if isinstance(value, np.integer):
        value = int(value)
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
