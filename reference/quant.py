"""NumPy oracle for MLX affine quantization, bit-exact with ``mx.quantize`` /
``mx.dequantize`` (mode ``"affine"``) on MLX's **CPU backend, 0.32.x** (checked
against 0.32.4).

Which function this is
----------------------
MLX has no single "affine quantize": each backend has its own kernel, and they
are different functions. This module reproduces the CPU one
(``fast::Quantize::eval_cpu`` for quantize, the op-graph fallback of
``affine_dequantize`` for dequantize). MLX's GPU kernels are NOT this function:
on an NVIDIA H200, ``mx.quantize`` on the GPU gave different packed values and
scales than on the CPU for all-negative groups at 8 bits (dequantized values up
to 0.033 apart). A rerun of ``test_gpu_quantize_divergence_is_recorded`` there
(MLX 0.32.4, CUDA 13) saw the same for every dtype and for 3 to 8 bits (other
scales in up to every group, up to every packed word), and, for float16 and
bfloat16 only, isolated codes one step apart on ordinary data with identical
scales; float32 random data matched. Use this oracle to pin the CPU contract;
compare GPU output to it with a tolerance gate or record the divergence, never
expect bit-exactness.

Contract
--------
``quantize(w, group_size=g, bits=b) -> (packed, scales, biases)``

* ``w``: float32 / float16 / bfloat16 (``ml_dtypes.bfloat16``), ``ndim >= 1``,
  last axis ``D`` divisible by ``g``. (MLX itself also wants ``ndim >= 2``;
  the oracle accepts 1-D rows too.)
* ``packed``: uint32 ``[..., D*b/32]``. Per row, element ``j``'s code occupies
  bits ``[j*b, (j+1)*b)`` of a little-endian bit stream, so 3/5/6-bit codes
  straddle uint32 words. (MLX writes 3/5/6-bit codes as 3- or 5-byte packs of
  8 codes; that is the same stream.)
* ``scales``, ``biases``: ``w.dtype`` ``[..., D/g]``.

Per group of ``g`` values, in float32 (the input is widened exactly)::

    w_max, w_min = max(w), min(w)          # NaN elements are skipped
    n_bins       = 2**b - 1
    mask         = |w_min| > |w_max|       # the edge with larger magnitude
    scale        = max((w_max - w_min) / n_bins, 1e-7)   # eps for constant groups
    scale        = scale if mask else -scale
    edge         = w_min if mask else w_max
    q0           = rint(edge / scale)      # round half to even
    if q0 != 0: scale, bias = edge / q0, edge   # edge lands exactly on code q0
    else:       bias = 0
    code         = clip(rint((w - bias) / scale), 0, n_bins)
    scales, biases = T(scale), T(bias)     # rounded to nearest even in w.dtype

The codes use the float32 ``scale``, not the rounded ``T(scale)``: for float16
and bfloat16 the stored scale is not the one the codes were computed with.

``dequantize(packed, scales, biases, group_size=g, bits=b, dtype=None)``
computes ``T(code) * scale`` then ``+ bias``, each rounded to ``T`` (the scales'
dtype) as MLX's CPU op graph does (no fused multiply-add), then casts to
``dtype`` if one is given. Each step is computed here in float32 and rounded to
``T``: float32 has at least ``2p + 2`` significand bits for float16 (p = 11)
and bfloat16 (p = 8), so that equals the correctly rounded ``T`` operation.

Non-finite values and overflow (MLX CPU 0.32.4; each is a named test in
``reference/tests/test_quant_ref.py``):

* NaN elements are skipped by the min/max scan, get code 0 and so dequantize
  to the group's bias.
* +-inf in a group, or a group of NaNs only: scale NaN, bias +inf (if +inf is
  in the group, else -inf), every code 0; the whole group dequantizes to NaN.
  Other groups are untouched.
* A finite group whose float32 span ``w_max - w_min`` overflows (float32 and
  bfloat16 near max) gets scale +-inf, bias 0, codes 0, and dequantizes to NaN.
* NaN encodings follow MLX's conversions, not NumPy's: see ``narrow``/``widen``.
  When code*scale and bias are both NaN the product's NaN wins.

Round trip: ``|dequantize(quantize(w)) - w| <= max(|s|/2, span - n_bins*|s|)``
(plus rounding), which is ``|s|/2`` for one-signed groups but up to ``|s|`` for
groups straddling zero (the far edge clips after ``scale = edge / q0``); the
derivation is in the round-trip property test.

MLX 0.32.4 also accepts ``bits=1``, but its scales, biases and codes do not
follow the rule above (checked on random data); this oracle covers ``BITS`` only.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = [
    "BITS",
    "GROUP_SIZES",
    "DTYPES",
    "EPS",
    "quantize",
    "dequantize",
    "packed_width",
    "unpack",
    "pack",
    "widen",
    "narrow",
    "cast",
]

BITS = (2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
# MLX's `float eps = 1e-7`: the smallest |scale|, so a constant group does not divide by 0.
EPS = np.float32(1e-7)


# --- argument checks (TypeError: wrong kind, ValueError: out of range; each names its argument) ---

_MAX_AXIS = int(np.iinfo(np.int64).max)  # no array axis is longer


def _check_int(value, name: str, *, minimum: int = 0, maximum: int = _MAX_AXIS) -> int:
    """``value`` as a Python int (Python or NumPy integer, never bool) in [minimum, maximum]: a NumPy uint8 4
    would overflow ``columns * bits``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an int in [{minimum}, {maximum}], got {value!r}")
    return int(value)


def _check_choice(value, name: str, choices: tuple[int, ...]) -> int:
    """An int (never bool) that is one of ``choices``, as a Python int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, one of {choices}, got {type(value).__name__}")
    if int(value) not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return int(value)


def _check_bits(bits) -> int:
    return _check_choice(bits, "bits", BITS)


def _check_bits_group(group_size, bits) -> tuple[int, int]:
    """(group_size, bits) as Python ints."""
    bits = _check_bits(bits)
    return _check_choice(group_size, "group_size", GROUP_SIZES), bits


def _check_array(x, name: str) -> np.ndarray:
    """A NumPy array: the oracle does not guess a dtype for a list."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(x).__name__}")
    return x


def _check_array_like(x, name: str) -> np.ndarray:
    """``np.asarray(x)``, refusing what holds no numbers (None, strings, ragged lists)."""
    a = np.asarray(x)
    if a.dtype.kind in "OUS":
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__} "
                        f"(dtype {a.dtype} under np.asarray)")
    return a


def _check_float(x: np.ndarray, name: str) -> None:
    if x.dtype not in DTYPES:
        names = ", ".join(str(d) for d in DTYPES)
        raise ValueError(f"{name} must have dtype in ({names}), got {x.dtype}")


def _check_dtype(dtype, name: str = "dtype") -> np.dtype:
    """One of ``DTYPES``, from anything ``np.dtype`` reads (``np.float16``, ``"bfloat16"``, a dtype)."""
    choices = [str(d) for d in DTYPES]
    if dtype is None or isinstance(dtype, (bool, int, float)):  # np.dtype(None) would be float64
        raise TypeError(f"{name} must be a dtype, one of {choices}, got {type(dtype).__name__}")
    try:
        out = np.dtype(dtype)
    except TypeError:
        if isinstance(dtype, str):
            raise ValueError(f"{name} must be one of {choices}, got {dtype!r}") from None
        raise TypeError(f"{name} must be a dtype, one of {choices}, got {type(dtype).__name__}") from None
    if out not in DTYPES:
        raise ValueError(f"{name} must be one of {choices}, got {out}")
    return out


def packed_width(columns: int, bits: int) -> int:
    """uint32 words that hold ``columns`` codes of ``bits`` bits.

    ``columns = 0`` is allowed (0 words): an empty row packs to an empty row.
    """
    bits = _check_bits(bits)
    columns = _check_int(columns, "columns")
    if (columns * bits) % 32:
        raise ValueError(f"columns * bits must be a multiple of 32, got {columns} * {bits}")
    return columns * bits // 32


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack integer codes ``[..., D]`` (each < 2**bits) into uint32 ``[..., D*bits/32]``
    as a little-endian bit stream per row."""
    bits = _check_bits(bits)
    codes = _check_array_like(codes, "codes")
    if codes.ndim < 1 or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be an integer array with at least one axis, got {codes.dtype} {codes.shape}")
    if codes.shape[-1] * bits % 32:
        raise ValueError(f"codes' last axis must fill whole uint32 words: columns * bits must be a multiple of 32, "
                         f"got {codes.shape[-1]} * {bits}")
    width = packed_width(codes.shape[-1], bits)
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError(f"codes must lie in [0, {(1 << bits) - 1}] for {bits} bits")
    codes = codes.astype(np.uint8)
    lead, columns = codes.shape[:-1], codes.shape[-1]
    # bit k of code j -> stream bit j*bits + k
    stream = np.unpackbits(codes[..., None], axis=-1, count=bits, bitorder="little")
    packed = np.packbits(stream.reshape(lead + (columns * bits,)), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u4").astype(np.uint32).reshape(lead + (width,))


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """The integer codes (uint32 ``[..., W*32/bits]``) held in ``packed`` uint32 ``[..., W]``."""
    bits = _check_bits(bits)
    packed = _check_array_like(packed, "packed")
    if packed.dtype != np.uint32 or packed.ndim < 1:
        raise ValueError(f"packed must be a uint32 array with at least one axis, got {packed.dtype} {packed.shape}")
    if packed.shape[-1] * 32 % bits:
        raise ValueError(f"packed's last axis ({packed.shape[-1]} words) does not hold whole {bits}-bit codes")
    packed = np.ascontiguousarray(packed, dtype="<u4")
    lead, words = packed.shape[:-1], packed.shape[-1]
    stream = np.unpackbits(packed.view(np.uint8).reshape(lead + (words * 4,)), axis=-1, bitorder="little")
    stream = stream.reshape(lead + (words * 32 // bits, bits)).astype(np.uint32)
    return (stream << np.arange(bits, dtype=np.uint32)).sum(axis=-1, dtype=np.uint32)


def _group_max_min(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """max and min over the last axis as MLX's CPU loop finds them:
    ``w_max = std::max(w_max, x)`` from -inf, so a NaN never wins (the comparison
    with NaN is false), and among equal values (+0/-0) the first one stays."""
    nan = np.isnan(g)
    neg_inf, pos_inf = np.float32(-np.inf), np.float32(np.inf)
    for_max = np.where(nan, neg_inf, g)
    for_min = np.where(nan, pos_inf, g)
    w_max = np.take_along_axis(for_max, np.argmax(for_max, axis=-1)[..., None], axis=-1)[..., 0]
    w_min = np.take_along_axis(for_min, np.argmin(for_min, axis=-1)[..., None], axis=-1)[..., 0]
    return w_max, w_min


# MLX's CPU conversions, as measured on 0.32.4 (x86-64). Finite values and
# infinities round to nearest even exactly as NumPy / ml_dtypes do; NaNs do not:
#   float32 -> float16 : every NaN becomes sign | 0x7D00 (payload dropped)
#   float32 -> bfloat16: every NaN becomes 0x7FC0 (sign dropped too)
#   float16 -> float32 : the payload is shifted and the quiet bit set (NumPy
#                        keeps a signaling NaN signaling)
#   bfloat16 -> float32: the exact 16-bit shift (same as ml_dtypes)
_F16_NAN = np.uint16(0x7D00)
_BF16_NAN = np.uint16(0x7FC0)
_F32_QUIET = np.uint32(0x00400000)


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` (float32/float16/bfloat16) as float32, converted as MLX's CPU does."""
    _check_float(_check_array(x, "x"), "x")
    out = x.astype(np.float32)
    if x.dtype == np.float16:
        bits = out.view(np.uint32)
        out = np.where(np.isnan(out), bits | _F32_QUIET, bits).view(np.float32)
    return out


def narrow(x: np.ndarray, dtype) -> np.ndarray:
    """float32 ``x`` rounded to ``dtype`` as MLX's CPU ``static_cast`` / ``astype`` does."""
    if _check_array(x, "x").dtype != np.float32:  # a wider x would be rounded twice
        raise ValueError(f"x must be a float32 array, got {x.dtype}")
    dtype = _check_dtype(dtype)
    if dtype == np.float32:
        return x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        bits = x.astype(dtype).view(np.uint16)
    if dtype == np.float16:
        sign = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)
        nan_bits = sign | _F16_NAN
    else:
        nan_bits = _BF16_NAN
    return np.where(np.isnan(x), nan_bits, bits).view(dtype)


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """``mx.astype`` on the CPU: through float32 (exact), then rounded to ``dtype``."""
    dtype = _check_dtype(dtype)
    return narrow(widen(x), dtype)


def _to_code(x: np.ndarray) -> np.ndarray:
    """The clipped float codes as integers. A NaN code (a NaN element, or a NaN
    scale) is undefined behaviour in MLX's ``static_cast<uint64_t>``; on 0.32.4
    x86-64 it sets no bit of the packed word, i.e. code 0 (the NaN tests pin it)."""
    return np.where(np.isnan(x), np.float32(0), x).astype(np.uint8)


def quantize(w, *, group_size: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Affine-quantize ``w`` along its last axis; see the module docstring."""
    group_size, bits = _check_bits_group(group_size, bits)
    _check_float(_check_array(w, "w"), "w")
    if w.ndim < 1:
        raise ValueError("w must have at least one axis")
    columns = w.shape[-1]
    if columns == 0 or columns % group_size:
        raise ValueError(f"group_size {group_size} must divide w's last axis ({columns})")
    dtype = w.dtype
    lead = w.shape[:-1]
    groups = widen(w).reshape(lead + (columns // group_size, group_size))

    n_bins = np.float32((1 << bits) - 1)
    with np.errstate(all="ignore"):
        w_max, w_min = _group_max_min(groups)
        mask = np.abs(w_min) > np.abs(w_max)
        spread = (w_max - w_min) / n_bins
        # std::max(spread, eps) keeps spread when the comparison is false (NaN spread)
        scale = np.where(spread < EPS, EPS, spread)
        scale = np.where(mask, scale, -scale)
        edge = np.where(mask, w_min, w_max)
        q0 = np.rint(edge / scale)
        on_code = q0 != 0
        scale = np.where(on_code, edge / np.where(on_code, q0, np.float32(1)), scale).astype(np.float32)
        bias = np.where(on_code, edge, np.float32(0)).astype(np.float32)

        codes = np.rint((groups - bias[..., None]) / scale[..., None])
        # std::min(std::max(c, 0), n_bins): a NaN c survives both comparisons
        codes = np.where(codes < 0, np.float32(0), codes)
        codes = np.where(codes > n_bins, n_bins, codes)
    packed = pack(_to_code(codes).reshape(lead + (columns,)), bits)
    return packed, narrow(scale, dtype), narrow(bias, dtype)


def dequantize(packed, scales, biases, *, group_size: int, bits: int, dtype=None) -> np.ndarray:
    """``scales * code + biases`` per group, as MLX's CPU dequantize computes it."""
    group_size, bits = _check_bits_group(group_size, bits)
    for name, x in (("packed", packed), ("scales", scales), ("biases", biases)):
        _check_array(x, name)
    if packed.dtype != np.uint32:
        raise ValueError(f"packed must be uint32, got {packed.dtype}")
    _check_float(scales, "scales")
    _check_float(biases, "biases")
    if scales.dtype != biases.dtype:
        raise ValueError(f"biases must have the scales' dtype {scales.dtype}, got {biases.dtype}")
    if scales.ndim < 1:
        raise ValueError(f"scales must have at least one axis, got shape {scales.shape}")
    if scales.shape != biases.shape:
        raise ValueError(f"biases must have the scales' shape {scales.shape}, got {biases.shape}")
    if packed.ndim < 1 or packed.shape[:-1] != scales.shape[:-1]:
        raise ValueError(f"packed {packed.shape} and scales {scales.shape} must share their leading axes")
    columns = packed.shape[-1] * 32 // bits
    if packed.shape[-1] * 32 % bits or columns != scales.shape[-1] * group_size:
        raise ValueError(
            f"packed's last axis ({packed.shape[-1]} words = {packed.shape[-1] * 32 / bits:g} codes of {bits} bits) "
            f"must hold scales.shape[-1] * group_size = {scales.shape[-1] * group_size} codes")
    out_dtype = scales.dtype if dtype is None else _check_dtype(dtype)
    t = scales.dtype
    lead = packed.shape[:-1]
    codes = unpack(packed, bits).reshape(lead + (scales.shape[-1], group_size))
    s = widen(scales)[..., None]
    b = widen(biases)[..., None]
    with np.errstate(all="ignore"):
        # one MLX op per step, each rounded to T: code -> T (exact, < 2**8),
        # T*T -> T, T+T -> T
        scaled = widen(narrow(codes.astype(np.float32) * s, t))
        # x86 keeps the first operand's NaN when both are NaN; NumPy's add may
        # hand back the second's, so pick the NaN explicitly
        out = narrow(np.where(np.isnan(scaled), scaled, scaled + b), t)
    return cast(out.reshape(lead + (columns,)), out_dtype)
