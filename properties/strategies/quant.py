"""Strategies for affine quantization (``reference.quant`` vs ``mx.quantize``).

Arrays are built by NumPy from a few drawn parameters (shape, dtype, value
family, magnitude, offset, seed) plus a drawn list of special values written
at drawn positions. Drawing every element through Hypothesis would be slow at
these sizes; drawing the parameters keeps shrinking meaningful (a failure
shrinks towards one row, one group, plain normal data and no specials).

* ``quant_weights``: ``w`` to quantize, with its ``group_size`` and ``bits``.
* ``dequant_inputs``: arbitrary ``packed`` words with scales and biases.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from reference import quant

__all__ = ["QuantWeights", "DequantInputs", "quant_weights", "dequant_inputs", "quant_special_values"]

# Value families: how a group's values are spread.
#   normal / uniform: the usual weights
#   grid: multiples of a power of two with half steps, so (w - bias) / scale
#         often lands exactly on k + 0.5 (round-half-even ties)
#   sparse: mostly zeros (signed) with a few values
#   constant: every group constant (the eps path and the q0 adjustment)
FAMILIES = ("normal", "uniform", "grid", "sparse", "constant")
MAX_ROWS = 8  # product of the leading axes; keeps an example well under 10 ms
MAX_GROUPS = 4  # groups per row


@dataclass(frozen=True)
class QuantWeights:
    w: np.ndarray
    group_size: int
    bits: int

    def __repr__(self) -> str:  # Hypothesis prints the falsifying example with this
        return (f"QuantWeights(dtype={self.w.dtype}, shape={self.w.shape}, group_size={self.group_size}, "
                f"bits={self.bits}, w={self.w.astype(np.float32).tolist()!r})")


@dataclass(frozen=True)
class DequantInputs:
    packed: np.ndarray
    scales: np.ndarray
    biases: np.ndarray
    group_size: int
    bits: int
    dtype: np.dtype  # requested output dtype

    def __repr__(self) -> str:
        return (f"DequantInputs(bits={self.bits}, group_size={self.group_size}, scales {self.scales.dtype} "
                f"-> {self.dtype}, packed={self.packed.tolist()!r}, scales={self.scales.astype(np.float32).tolist()!r}, "
                f"biases={self.biases.astype(np.float32).tolist()!r})")


def _finfo(dtype):
    return ml_dtypes.finfo(dtype) if dtype == ml_dtypes.bfloat16 else np.finfo(dtype)


def quant_special_values(dtype, *, extremes: bool = True, nonfinite: bool = False) -> list[float]:
    """Edge values of ``dtype``: signed zeros, subnormals, the smallest normal,
    and (``extremes``) +-max, or max/4 without; NaN and +-inf with ``nonfinite``."""
    info = _finfo(np.dtype(dtype))
    tiny, sub, big = float(info.tiny), float(info.smallest_subnormal), float(info.max)
    values = [0.0, -0.0, sub, -sub, tiny, -tiny, 1.0, -1.0]
    values += [big, -big] if extremes else [big / 4, -big / 4]
    if nonfinite:
        values += [float("nan"), float("inf"), float("-inf")]
    return values


def _exponents(dtype) -> tuple[int, int]:
    """Power-of-two magnitudes worth covering: from below the 1e-7 eps floor to
    well above 1, without overflowing a group's span for the dtype."""
    return (-26, 13) if np.dtype(dtype) == np.float16 else (-40, 40)


@st.composite
def _leading_shape(draw, max_rows: int = MAX_ROWS) -> tuple[int, ...]:
    # MLX wants ndim >= 2: one or two leading axes
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    while int(np.prod(shape)) > max_rows:
        shape = shape[:-1] if len(shape) > 1 else (max_rows,)
    return shape


def _family_values(rng: np.random.Generator, family: str, shape: tuple[int, ...], group_size: int,
                   magnitude: float, offset: float) -> np.ndarray:
    if family == "normal":
        x = rng.standard_normal(shape)
    elif family == "uniform":
        x = rng.uniform(-1.0, 1.0, shape)
    elif family == "grid":
        x = rng.integers(-8, 9, shape) / 2.0
    elif family == "sparse":
        x = np.where(rng.random(shape) < 0.1, rng.standard_normal(shape), 0.0)
        x = np.where(rng.random(shape) < 0.5, -x, x)  # signed zeros
    else:  # constant per group
        groups = shape[:-1] + (shape[-1] // group_size, 1)
        x = np.broadcast_to(rng.standard_normal(groups), groups[:-1] + (group_size,)).reshape(shape)
    return (x + offset) * magnitude


@st.composite
def quant_weights(draw, *, dtype=None, bits: int | None = None, group_size: int | None = None,
                  nonfinite: bool = False, extremes: bool = True) -> QuantWeights:
    """A ``w`` [..., n*group_size] for ``quantize``, with its group size and bits.

    ``nonfinite`` lets NaN / +-inf in as specials; ``extremes`` lets +-max in
    (a group holding both signs of max overflows its float32 span). Leave both
    off for properties that need finite scales.
    """
    dtype = np.dtype(draw(st.sampled_from(quant.DTYPES)) if dtype is None else dtype)
    bits = draw(st.sampled_from(quant.BITS)) if bits is None else bits
    group_size = draw(st.sampled_from(quant.GROUP_SIZES)) if group_size is None else group_size
    shape = draw(_leading_shape()) + (group_size * draw(st.integers(1, MAX_GROUPS)),)
    family = draw(st.sampled_from(FAMILIES))
    low, high = _exponents(dtype)
    magnitude = 2.0 ** draw(st.integers(low, high)) * draw(st.sampled_from([1.0, 0.75, 1.3]))
    # offset 0 straddles zero; +-2 / +-10 give one-signed groups (the other edge wins)
    offset = draw(st.sampled_from([0.0, 0.0, 2.0, -2.0, 10.0, -10.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    with np.errstate(over="ignore"):
        w = _family_values(rng, family, shape, group_size, magnitude, offset).astype(np.float32)
        specials = draw(st.lists(st.tuples(st.integers(0, w.size - 1),
                                           st.sampled_from(quant_special_values(dtype, extremes=extremes,
                                                                                nonfinite=nonfinite))),
                                 max_size=6))
        flat = w.reshape(-1)
        for index, value in specials:
            flat[index] = value
        # the family's own values stay finite in dtype (inside max/4 without extremes)
        limit = float(_finfo(dtype).max) / (1 if extremes else 4)
        w = np.clip(w, -limit, limit)
        w = w.astype(dtype)
    return QuantWeights(w=w, group_size=group_size, bits=bits)


@st.composite
def dequant_inputs(draw, *, nonfinite: bool = False) -> DequantInputs:
    """Arbitrary packed words (every code pattern) with scales and biases of
    one dtype, and an output dtype that may differ from theirs."""
    dtype = np.dtype(draw(st.sampled_from(quant.DTYPES)))
    out_dtype = np.dtype(draw(st.sampled_from((None,) + quant.DTYPES)) or dtype)
    bits = draw(st.sampled_from(quant.BITS))
    group_size = draw(st.sampled_from(quant.GROUP_SIZES))
    lead = draw(_leading_shape())
    groups = draw(st.integers(1, MAX_GROUPS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    packed = rng.integers(0, 2**32, lead + (groups * group_size * bits // 32,), dtype=np.uint64).astype(np.uint32)
    low, high = _exponents(dtype)
    params = []
    for _ in range(2):  # scales, biases
        magnitude = 2.0 ** draw(st.integers(low, high))
        x = (rng.standard_normal(lead + (groups,)) * magnitude).astype(np.float32)
        specials = draw(st.lists(st.tuples(st.integers(0, x.size - 1),
                                           st.sampled_from(quant_special_values(dtype, extremes=True,
                                                                                nonfinite=nonfinite))),
                                 max_size=3))
        for index, value in specials:
            x.reshape(-1)[index] = value
        with np.errstate(over="ignore"):
            params.append(x.astype(dtype))
    return DequantInputs(packed=packed, scales=params[0], biases=params[1], group_size=group_size, bits=bits,
                         dtype=out_dtype)
