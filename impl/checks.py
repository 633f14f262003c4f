"""Argument checks shared by every public function in ``impl``.

Each returns the normalized value or raises TypeError (wrong kind) / ValueError
(out of range) naming the argument. ``reference`` keeps its own checks on
purpose: the oracles import nothing from the code they judge.
"""

from __future__ import annotations

import math

import mlx.core as mx
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


# The largest extent an array axis, a position or a block index may have: MLX's shapes and the kernels' indices are
# int32. Sizes past it fail inside MLX (OverflowError, std::bad_cast) naming no argument.
MAX_EXTENT = 2**31 - 1


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


def check_partials(out: tuple, maxima: tuple, sums: tuple, *, layout: str) -> None:
    """A split attention's partials, each given as ``(name, array)``: float32 mx.arrays, ``out`` 4-d and the
    per-row ``maxima`` and ``sums`` its first three dims (``layout`` names both shapes in the error)."""
    for name, x in (out, maxima, sums):
        if not isinstance(x, mx.array) or x.dtype != mx.float32:
            got = x.dtype if isinstance(x, mx.array) else type(x).__name__  # a NumPy float32 array is no mx.array
            raise TypeError(f"{name} must be a float32 mx.array, got {got}")
    o, m, s = out[1], maxima[1], sums[1]
    if o.ndim != 4 or m.shape != o.shape[:3] or s.shape != o.shape[:3]:
        raise ValueError(f"{out[0]} must be {layout}; got {list(o.shape)}, {list(m.shape)}, {list(s.shape)}")


MASK_STRINGS = ("causal",)  # the mask strings MLX's scaled_dot_product_attention takes that the callers allow


def check_mask(mask) -> None:
    """An attention ``mask``: None, ``"causal"`` or an mx.array (its shape and dtype: ``check_mask_shape``)."""
    if mask is None or isinstance(mask, mx.array):
        return
    if isinstance(mask, str):
        if mask not in MASK_STRINGS:
            raise ValueError(f"mask must be None, 'causal' or an mx.array, got {mask!r}")
        return
    raise TypeError(f"mask must be None, 'causal' or an mx.array, got {type(mask).__name__}")


def check_mask_shape(mask, target: tuple[int, ...], dtype: mx.Dtype | None = None) -> None:
    """An array ``mask`` must broadcast to ``target`` ([B, Hq, n, keys]) and be boolean or floating (additive);
    given the attention's ``dtype``, a floating mask must promote to it (what SDPA requires)."""
    if not isinstance(mask, mx.array):
        return
    if mask.dtype != mx.bool_ and not mx.issubdtype(mask.dtype, mx.floating):
        raise ValueError(f"mask must be boolean or floating (additive), got {mask.dtype}")
    if dtype is not None and mask.dtype != mx.bool_ and mx.result_type(mask.dtype, dtype) != dtype:
        raise ValueError(f"mask dtype {mask.dtype} does not promote to the attention dtype {dtype}")
    try:
        fits = np.broadcast_shapes(tuple(mask.shape), target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to [B, Hq, n, keys] = {list(target)}")
