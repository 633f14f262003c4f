"""Error metrics in float64: KL, NMSE, ULP distance, error ratio, non-finite agreement.

Everything here takes array-likes (NumPy, MLX arrays, ml_dtypes arrays) and
computes in float64 on the host. Thresholds are not chosen here: the gate API
(`parity.gates`) pairs each metric with a threshold and its derivation.

Non-finite policy (llama.cpp test-backend-ops style): NaN and inf are compared
by position and sign, never by magnitude. ``nonfinite_mismatch`` finds the first
position where the two arrays disagree on that; the finite metrics then only
look at positions where both values are finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from scipy.special import log_softmax

FLOAT_DTYPES = ("float32", "float16", "bfloat16")

# Unsigned integer views used to order floats by their bit patterns.
_BITS = {
    "float32": (np.dtype(np.float32), np.uint32, 32),
    "float16": (np.dtype(np.float16), np.uint16, 16),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.uint16, 16),
}


def dtype_name(dtype) -> str:
    """Canonical name ('float32', 'float16', 'bfloat16', ...) of an MLX, NumPy, ml_dtypes or torch dtype, or of a
    NumPy scalar type (``np.float16``, ``ml_dtypes.bfloat16``). A string is returned as given (the caller checks
    it against its own list); anything else (None, a number, a Python type) is a TypeError."""
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype).name
    if type(dtype).__module__.split(".")[0] in ("mlx", "torch"):
        return str(dtype).rsplit(".", 1)[-1]  # mlx.core.float16, torch.bfloat16
    raise TypeError(f"dtype must be a dtype (a NumPy, ml_dtypes, MLX or torch dtype, or its name), "
                    f"got {type(dtype).__name__}")


# --- argument checks (TypeError: wrong kind, ValueError: out of range; each names its argument) ---

# Array kinds that hold no numbers: None, strings and ragged lists become these under np.asarray.
# ('V' stays allowed: ml_dtypes' bfloat16 is a 'V' kind.)
# NumPy dtype kinds that hold no real number: objects, strings, bytes, and complex numbers, dates and durations (a
# float64 copy of those drops the imaginary part or reads the ticks: a gate would compare the wrong numbers and pass).
# Records are refused by their fields (kind "V" is also ml_dtypes' bfloat16, a real number).
_NOT_REAL = "OUScMm"


def _not_real(dtype: np.dtype) -> bool:
    return dtype.kind in _NOT_REAL or dtype.names is not None


def _check_numeric(a: np.ndarray, name: str) -> np.ndarray:
    if _not_real(a.dtype):
        raise TypeError(f"{name} must be a real numeric array-like, got dtype {a.dtype}")
    return a


def _check_real(value, name: str) -> float:
    """A real number (Python or NumPy int / float, never bool) as a float; an int past float's range is a
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must fit in a float, got {value!r}") from None


def _check_float_dtype(dtype) -> str:
    """``dtype`` when it names one of ``FLOAT_DTYPES``."""
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be one of {FLOAT_DTYPES} (a str), got {type(dtype).__name__}")
    if dtype not in _BITS:
        raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    return dtype


def to_numpy(x, *, name: str = "x") -> np.ndarray:
    """A host NumPy copy of ``x``, keeping float16/bfloat16 as themselves. What holds no real numbers (None, a
    string, a ragged list: an object or string array; complex numbers, dates, durations, records) is a TypeError
    naming ``name``, from every source (NumPy, MLX, torch, array-likes)."""
    if isinstance(x, np.ndarray):
        return _check_numeric(x, name)
    if hasattr(x, "__array_namespace__") or type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        if isinstance(x, mx.array):
            if x.dtype == mx.bfloat16:
                # NumPy has no bfloat16; go through the raw bits.
                return np.array(x.view(mx.uint16)).view(ml_dtypes.bfloat16)
            return _check_numeric(np.array(x), name)
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":  # torch's .numpy() has no bfloat16: through the raw bits
            import torch

            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return _check_numeric(x.numpy(), name)
    try:
        a = np.asarray(x)
    except Exception as exc:  # pragma: no cover - message path
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from exc
    if _not_real(a.dtype):
        raise TypeError(f"{name} must be a real numeric array-like, got {type(x).__name__} "
                        f"(dtype {a.dtype} under np.asarray)")
    return a


def canonical_nan(x, *, name: str = "x") -> np.ndarray:
    """A host copy of ``x`` with every NaN as one NaN pattern: for a bit-exact comparison where a NaN's sign and
    payload are no part of the contract (llama.cpp compares NaN as NaN); every other value keeps its bytes."""
    a = to_numpy(x, name=name)
    if a.dtype.kind in "biu":  # bools and integers hold no NaN (and np.nan has no such encoding)
        return a
    return np.where(np.isnan(a.astype(np.float64)), np.array(np.nan, a.dtype), a)


def as_f64(x, *, name: str = "x") -> np.ndarray:
    return to_numpy(x, name=name).astype(np.float64)


def check_same_shape(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> None:
    if not (isinstance(names, tuple) and len(names) == 2 and all(isinstance(n, str) for n in names)):
        raise TypeError(f"names must be a pair of str, got {names!r}")
    for name, x in zip(names, (a, b)):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(x).__name__}")
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} has shape {a.shape} but {names[1]} has shape {b.shape}")


@dataclass(frozen=True)
class Mismatch:
    """The worst (or first) offending element of a comparison."""

    index: tuple[int, ...]
    actual: float
    expected: float

    def describe(self) -> str:
        return f"at index {self.index}: got {self.actual!r}, expected {self.expected!r}"


def _index(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, shape)) if shape else ()


def nonfinite_mismatch(actual, expected) -> Mismatch | None:
    """First position where NaN / +inf / -inf placement differs, else None."""
    a, e = as_f64(actual, name="actual"), as_f64(expected, name="expected")
    check_same_shape(a, e, ("actual", "expected"))
    # NaN is class 2, +inf 3, -inf -3, a finite value 0 (by sign: no arithmetic on the non-finite values)
    a_class = np.where(np.isnan(a), 2, np.where(np.isinf(a), np.where(a > 0, 3, -3), 0))
    e_class = np.where(np.isnan(e), 2, np.where(np.isinf(e), np.where(e > 0, 3, -3), 0))
    bad = np.flatnonzero(a_class != e_class)
    if bad.size == 0:
        return None
    i = int(bad[0])
    return Mismatch(_index(i, a.shape), float(a.flat[i]), float(e.flat[i]))


def finite_both(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.isfinite(a) & np.isfinite(e)


def max_abs_error(actual, expected) -> tuple[float, Mismatch | None]:
    """max |actual - expected| over positions finite in both, and where it occurs."""
    a, e = as_f64(actual, name="actual"), as_f64(expected, name="expected")
    check_same_shape(a, e, ("actual", "expected"))
    with np.errstate(invalid="ignore"):  # inf - inf where either is not finite: those positions are masked out
        err = np.where(finite_both(a, e), np.abs(a - e), 0.0)
    if err.size == 0:
        return 0.0, None
    i = int(np.argmax(err))
    return float(err.flat[i]), Mismatch(_index(i, a.shape), float(a.flat[i]), float(e.flat[i]))


def round_once(x, dtype: str) -> np.ndarray:
    """``x`` rounded ONCE (to nearest, ties to even) to ``dtype``, as an array of that dtype.

    Every input is widened to float64 first (exact). NumPy rounds float64 to float32 / float16 correctly; for
    bfloat16 the result must not depend on how the installed ``ml_dtypes`` casts float64 (releases before 0.7
    round through float32, twice: ``1 + 2**-8 + 2**-30`` becomes 1 instead of ``1 + 2**-7``; the finding
    ``test_ml_dtypes_float64_to_bfloat16_cast_is_recorded`` says which this one does). So the float32 step here
    rounds to odd (truncate, then set the last bit if inexact), and only ml_dtypes' float32 -> bfloat16 cast, round
    to nearest even in every release, follows: 24 >= 8 + 2 bits makes that second rounding exact.
    """
    _check_float_dtype(dtype)
    np_dtype = _BITS[dtype][0]
    x = np.asarray(to_numpy(x, name="x"), dtype=np.float64)
    if dtype != "bfloat16":
        with np.errstate(over="ignore"):  # beyond the dtype's range is inf, as intended
            return x.astype(np_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
        inexact = np.isfinite(x) & (back != x)
        f = np.where(inexact & (np.abs(back) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
        bits = f.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    return bits.view(np.float32).astype(np_dtype)


def ordered_bits(x, dtype: str) -> np.ndarray:
    """Integers whose order and differences follow the floats' (adjacent floats differ by 1), after
    ``round_once(x, dtype)``.

    +0 and -0 both map to 0, so they are 0 ULP apart.
    """
    _check_float_dtype(dtype)
    _, uint, nbits = _BITS[dtype]
    rounded = round_once(x, dtype)
    raw = np.ascontiguousarray(rounded).view(uint).astype(np.int64).reshape(rounded.shape)  # (0-d stays 0-d)
    sign = raw >> (nbits - 1)
    magnitude = raw & ((1 << (nbits - 1)) - 1)
    return np.where(sign == 1, -magnitude, magnitude)


def ulp_distance(actual, expected, dtype: str) -> np.ndarray:
    """Elementwise distance in units in the last place of ``dtype``.

    Both inputs are first rounded to ``dtype`` (``round_once``), and the non-finite classes are read after that
    rounding (1e6 is +inf in float16). Positions where the classes differ count as infinitely far; matching
    NaN / inf count as 0. Any shape, 0-d included.
    """
    _check_float_dtype(dtype)
    a, e = to_numpy(actual, name="actual"), to_numpy(expected, name="expected")
    check_same_shape(a, e, ("actual", "expected"))
    a64, e64 = round_once(a, dtype).astype(np.float64), round_once(e, dtype).astype(np.float64)
    distance = np.abs(ordered_bits(a64, dtype) - ordered_bits(e64, dtype)).astype(np.float64)
    same_class = (np.isnan(a64) & np.isnan(e64)) | (np.isinf(a64) & (a64 == e64))
    return np.where(finite_both(a64, e64), distance, np.where(same_class, 0.0, np.inf))


def max_ulp(actual, expected, dtype: str) -> tuple[float, Mismatch | None]:
    distance = ulp_distance(actual, expected, dtype)
    if distance.size == 0:
        return 0.0, None
    i = int(np.argmax(distance))
    a, e = as_f64(actual), as_f64(expected)
    return float(distance.flat[i]), Mismatch(_index(i, distance.shape), float(a.flat[i]), float(e.flat[i]))


def nmse(actual, expected) -> float:
    """Normalized mean squared error sum((a-e)^2) / sum(e^2) (llama.cpp's NMSE).

    An all-zero ``expected`` gives 0 when ``actual`` is also zero, else inf.
    """
    a, e = as_f64(actual, name="actual"), as_f64(expected, name="expected")
    check_same_shape(a, e, ("actual", "expected"))
    both = finite_both(a, e)
    a, e = a[both], e[both]
    # Both sums scaled by the largest magnitude first: squares of values below ~1e-154 underflow float64 to 0, and
    # 0 / 0 read as 0 would pass any output there (the ratio is unchanged by a common scale).
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(e), initial=0.0)))
    if scale > 0.0:
        a, e = a / scale, e / scale
    num = float(np.sum((a - e) ** 2))
    den = float(np.sum(e ** 2))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def kl_divergence(ref_logits, test_logits, *, axis: int = -1) -> np.ndarray:
    """KL(p_ref || p_test) per row, from logits, in float64 (scipy's log_softmax).

    Rows whose reference distribution puts mass where the test one has none
    give inf. A row that is not a distribution (a NaN or +inf logit on either side, or every reference
    logit -inf) gives NaN, never 0: ``parity.gates.Gate.kl`` fails it. Shapes must match.
    """
    p, q = as_f64(ref_logits, name="ref_logits"), as_f64(test_logits, name="test_logits")
    check_same_shape(p, q, ("ref_logits", "test_logits"))
    if p.ndim == 0:
        raise ValueError("ref_logits must have at least one axis (the vocabulary)")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    if not -p.ndim <= axis < p.ndim:
        raise ValueError(f"axis must lie in [{-p.ndim}, {p.ndim - 1}] for {p.ndim}-axis logits, got {axis}")
    if p.shape[axis] == 0:
        raise ValueError(f"ref_logits must have a non-empty vocabulary axis, got shape {list(p.shape)}")
    with np.errstate(invalid="ignore"):  # a NaN / inf row: its NaN is the answer (docstring)
        log_p = log_softmax(p, axis=axis)
        log_q = log_softmax(q, axis=axis)
        p_prob = np.exp(log_p)
        terms = np.where(p_prob > 0, p_prob * (log_p - log_q), np.where(np.isnan(p_prob), np.nan, 0.0))
    return np.sum(terms, axis=axis)


def dtype_spacing(magnitude: float, dtype: str) -> float:
    """One ULP of ``dtype`` at |magnitude|: the gap to the neighbouring representable value.

    Measured on the bit pattern, so it works the same for bfloat16. At the largest
    finite value the gap below is used (the gap above would be inf).
    """
    _check_float_dtype(dtype)
    np_dtype, uint, _ = _BITS[dtype]
    magnitude = _check_real(magnitude, "magnitude")
    if math.isnan(magnitude):
        raise ValueError("magnitude must not be NaN")
    with np.errstate(over="ignore"):  # past the dtype's range is inf, whose spacing is inf
        m = np.array(abs(magnitude)).astype(np_dtype)
    if not np.isfinite(np.float64(m)):
        return float("inf")
    bits = m.view(uint)
    up = np.float64((bits + uint(1)).view(np_dtype))
    if not np.isfinite(up):
        return float(np.float64(m) - np.float64((bits - uint(1)).view(np_dtype)))
    return float(up - np.float64(m))


def rounding_noise_floor(expected, dtype: str) -> float:
    """One ``dtype`` ULP at the largest finite |expected|.

    A result computed in higher precision and rounded once to ``dtype`` is off by
    at most half of this; the other half covers the accumulation order of a
    float32 kernel. It is the error-ratio gate's floor, so the gate cannot demand
    better than the output format can hold when the baseline happens to be exact.
    """
    _check_float_dtype(dtype)
    e = as_f64(expected, name="expected")
    finite = e[np.isfinite(e)]
    peak = float(np.max(np.abs(finite))) if finite.size else 0.0
    # a reference beyond the dtype's range: the spacing at its largest finite value
    peak = min(peak, float(ml_dtypes.finfo(_BITS[dtype][0]).max))
    return dtype_spacing(peak, dtype)


@dataclass(frozen=True)
class ErrorRatio:
    error: float  # max |actual - ref|
    baseline_error: float  # max |baseline - ref|
    floor: float
    factor: float
    bound: float  # factor * baseline_error + floor
    worst: Mismatch | None

    @property
    def passed(self) -> bool:
        return self.error <= self.bound


def error_ratio(actual, reference, baseline, *, factor: float, floor: float) -> ErrorRatio:
    """FlashAttention's rule: max|actual-ref| <= factor * max|baseline-ref| + floor."""
    factor, floor = _check_real(factor, "factor"), _check_real(floor, "floor")
    if not np.isfinite(factor) or factor <= 0:
        raise ValueError(f"factor must be a positive finite number, got {factor!r}")
    if not np.isfinite(floor) or floor < 0:
        raise ValueError(f"floor must be a non-negative finite number, got {floor!r}")
    a = as_f64(actual, name="actual")
    r = as_f64(reference, name="reference")
    b = as_f64(baseline, name="baseline")
    check_same_shape(a, r, ("actual", "reference"))
    check_same_shape(b, r, ("baseline", "reference"))
    err, worst = max_abs_error(a, r)
    base_err, _ = max_abs_error(b, r)
    return ErrorRatio(err, base_err, floor, factor, factor * base_err + floor, worst)
