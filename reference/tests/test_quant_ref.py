"""``reference.quant`` against MLX's own ``mx.quantize`` / ``mx.dequantize`` on mx.cpu.

The oracle promises bit-exactness with MLX's CPU backend (0.32.x), so every
comparison here is ``gate.bit_exact``: packed words, scales, biases and the
dequantized values, NaN payloads included. Groups:

* the full grid BITS x GROUP_SIZES x DTYPES on random data;
* adversarial groups (constant, zeros, signed zeros, subnormals, near max,
  one-signed, outliers, exact .5 ties, NaN, +-inf) over the same grid;
* the non-finite and overflow behaviour as named facts: what the installed MLX
  does is recorded with ``gate.finding``, the oracle is held to MLX 0.32.4's rule,
  and oracle == MLX is the dependency check (its failure says MLX changed);
* Hypothesis properties: bit-exactness on drawn shapes and data, and the
  round-trip error bound (derivation in ``test_property_round_trip_error_bound``);
* bad input raising ValueError naming the argument;
* on a machine with MLX's GPU: the CPU/GPU divergence, recorded as findings.
"""

from __future__ import annotations

from contextlib import contextmanager

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from impl import arms as arm_registry
from properties import strategies as sts
from reference import quant
from reference.metrics import to_numpy

BITS = quant.BITS
GROUP_SIZES = quant.GROUP_SIZES
DTYPES = quant.DTYPES
ROWS, COLUMNS = 4, 384  # 384 = 3 groups of 128, 6 of 64, 12 of 32; 384*bits/32 words
QUANTIZE, DEQUANTIZE = "mx.quantize", "mx.dequantize"
_MX_DTYPES = {np.dtype(np.float32): mx.float32, np.dtype(np.float16): mx.float16,
              np.dtype(ml_dtypes.bfloat16): mx.bfloat16}

# What the project relies on, and where: said by any failing oracle-vs-MLX check below.
QUANT_RELIED_ON = (
    "mx.quantize / mx.dequantize (MLX {version}, CPU) differ from reference.quant here ({behaviour}). "
    "reference.quant is MLX 0.32.4's CPU function, and the project relies on that: the KV-cache and decode oracles "
    "(properties/strategies/kv.py, decode.py, paged.py) use it as bit-exact to mx.quantize. If MLX changed, update "
    "reference.quant (and its docstring's rule) to what MLX does now, which the test's findings record")


@contextmanager
def relied_on(behaviour: str):
    """A failing oracle-vs-MLX check: its message also says that MLX may have changed, and who relies on it."""
    try:
        yield
    except AssertionError as exc:
        why = QUANT_RELIED_ON.format(version=mx.__version__, behaviour=behaviour)
        exc.args = (f"{exc.args[0] if exc.args else ''}\n{why}",)
        raise


# The gate fixture only records; it holds no per-example state, so sharing it
# across Hypothesis examples is safe.
PROPERTY_SETTINGS = settings(
    suppress_health_check=list(settings.default.suppress_health_check) + [HealthCheck.function_scoped_fixture])


def dtype_id(dtype) -> str:
    return str(np.dtype(dtype))


def to_mlx(x: np.ndarray) -> mx.array:
    if x.dtype == ml_dtypes.bfloat16:  # NumPy has no bfloat16: hand MLX the bits
        return mx.array(x.view(np.uint16)).view(mx.bfloat16)
    return mx.array(x)


def mlx_quantize(w: np.ndarray, group_size: int, bits: int, device=mx.cpu):
    packed, scales, biases = mx.quantize(to_mlx(w), group_size=group_size, bits=bits, stream=device)
    return to_numpy(packed), to_numpy(scales), to_numpy(biases)


def mlx_dequantize(packed, scales, biases, group_size: int, bits: int, dtype=None, device=mx.cpu):
    out = mx.dequantize(mx.array(packed), to_mlx(scales), to_mlx(biases), group_size=group_size, bits=bits,
                        dtype=None if dtype is None else _MX_DTYPES[np.dtype(dtype)], stream=device)
    return to_numpy(out)


def check_bit_exact(gate, w: np.ndarray, group_size: int, bits: int, *, case: str, out_dtype=None,
                    behaviour: str = "the affine rule of reference.quant's docstring"):
    """Oracle vs mx.quantize on the CPU, then oracle vs mx.dequantize on MLX's
    own packed output (so a quantize mismatch cannot hide a dequantize one).
    ``behaviour``: what of MLX's the case exercises, for the failure message."""
    ref = quant.quantize(w, group_size=group_size, bits=bits)
    got = mlx_quantize(w, group_size, bits)
    with relied_on(behaviour):
        for name, actual, expected in zip(("packed", "scales", "biases"), got, ref):
            gate.bit_exact(actual, expected, what=f"{name}, {bits}-bit group {group_size}", kernel=QUANTIZE,
                           case=case)
        deq = mlx_dequantize(*got, group_size, bits, dtype=out_dtype)
        gate.bit_exact(deq, quant.dequantize(*got, group_size=group_size, bits=bits, dtype=out_dtype),
                       what=f"dequantized, {bits}-bit group {group_size}", kernel=DEQUANTIZE, case=case)
    return got


# --- the full grid ------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("group_size", GROUP_SIZES, ids=lambda g: f"g{g}")
@pytest.mark.parametrize("bits", BITS, ids=lambda b: f"b{b}")
def test_ref_quantize_grid_matches_mx_cpu(gate, bits, group_size, dtype):
    rng = np.random.default_rng([bits, group_size, DTYPES.index(dtype)])
    # rows at different magnitudes: below the 1e-7 eps floor, around 1, large
    magnitudes = np.array([1e-9, 0.02, 1.0, 300.0])[:, None]
    w = (rng.standard_normal((ROWS, COLUMNS)) * magnitudes).astype(dtype)
    check_bit_exact(gate, w, group_size, bits, case="random")
    for out_dtype in DTYPES:  # mx.dequantize(dtype=...) computes in the scales' dtype, then casts
        got = mlx_quantize(w, group_size, bits)
        with relied_on(f"mx.dequantize(dtype={out_dtype}): in the scales' dtype, then cast"):
            gate.bit_exact(mlx_dequantize(*got, group_size, bits, dtype=out_dtype),
                           quant.dequantize(*got, group_size=group_size, bits=bits, dtype=out_dtype),
                           what=f"dequantized to {out_dtype}", kernel=DEQUANTIZE, case=f"dtype={out_dtype}")


# --- adversarial groups -------------------------------------------------------


def _finfo(dtype):
    return ml_dtypes.finfo(dtype) if dtype == ml_dtypes.bfloat16 else np.finfo(dtype)


def tie_group(dtype, group_size: int, bits: int, sign: float) -> np.ndarray:
    """A group whose codes land exactly on k + 0.5 (before rounding).

    With w_min = -n*s, w_max = 0 (s a power of two, n = 2**bits - 1) MLX gets
    scale = s and bias = -n*s exactly, so (w - bias) / scale = k + 0.5 exactly
    for w = (k + 0.5 - n) * s. ``sign = -1`` mirrors it (scale -s, bias n*s).
    Only the ties that ``dtype`` holds exactly are used (bfloat16 at 8 bits
    keeps k >= 128).
    """
    n, step = (1 << bits) - 1, 0.125
    k = np.arange(n, dtype=np.float64)
    ties = (k + 0.5 - n) * step
    ties = ties[ties.astype(np.float32).astype(dtype).astype(np.float64) == ties]
    body = np.resize(ties, group_size - 2)
    return (sign * np.concatenate([[-n * step, 0.0], body])).astype(np.float32)


def _with(base: np.ndarray, positions: dict[int, float]) -> np.ndarray:
    out = base.copy()
    for i, v in positions.items():
        out[i] = v
    return out


def adversarial_group(name: str, dtype, group_size: int, bits: int) -> np.ndarray:
    """One group of the named kind, in ``dtype`` (built in float32, then rounded)."""
    info = _finfo(dtype)
    big, sub = float(info.max), float(info.smallest_subnormal)
    rng = np.random.default_rng(len(name) * 1000 + group_size + bits)
    base = rng.standard_normal(group_size).astype(np.float32)
    g = group_size
    groups = {
        "constant": np.full(g, 0.37),
        "constant_negative": np.full(g, -2.5),
        "constant_below_eps": np.full(g, 3e-8),  # |c| < eps/2: q0 == 0, bias 0
        "all_zero": np.zeros(g),
        "signed_zeros": np.where(np.arange(g) % 2, 0.0, -0.0),
        "negative_zeros": np.full(g, -0.0),
        "subnormals": rng.standard_normal(g) * sub * 8,
        "subnormal_and_zero": np.where(rng.random(g) < 0.5, sub, -0.0),
        "near_max": rng.uniform(-1, 1, g) * big,
        "max_span": _with(np.full(g, big), {0: -big}),
        "near_max_positive": big - rng.uniform(0, 0.01, g) * big,
        "all_negative": -np.abs(base) - 0.1,
        "all_positive": np.abs(base) + 0.1,
        "outlier_positive": _with(base * 0.01, {5: 50.0}),
        "outlier_negative": _with(base * 0.01, {7: -50.0}),
        "ties_positive_scale": tie_group(dtype, g, bits, 1.0),
        "ties_negative_scale": tie_group(dtype, g, bits, -1.0),
        "nan": _with(base, {3: np.nan}),
        "nan_first": _with(base, {0: np.nan}),
        "all_nan": np.full(g, np.nan),
        "pos_inf": _with(base, {3: np.inf}),
        "neg_inf": _with(base, {3: -np.inf}),
        "both_inf": _with(base, {1: np.inf, 2: -np.inf}),
        "all_inf": np.full(g, np.inf),
        "inf_and_nan": _with(base, {1: np.inf, 2: np.nan}),
    }
    with np.errstate(over="ignore"):
        return groups[name].astype(np.float32).astype(dtype)


ADVERSARIAL = (
    "constant", "constant_negative", "constant_below_eps", "all_zero", "signed_zeros", "negative_zeros",
    "subnormals", "subnormal_and_zero", "near_max", "max_span", "near_max_positive", "all_negative",
    "all_positive", "outlier_positive", "outlier_negative", "ties_positive_scale", "ties_negative_scale",
    "nan", "nan_first", "all_nan", "pos_inf", "neg_inf", "both_inf", "all_inf", "inf_and_nan",
)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ADVERSARIAL)
def test_ref_quantize_adversarial_matches_mx_cpu(gate, name, dtype):
    for bits in BITS:
        for group_size in GROUP_SIZES:
            group = adversarial_group(name, dtype, group_size, bits)
            normal = np.random.default_rng(bits).standard_normal(group_size).astype(dtype)
            # the group next to a normal one, forwards and reversed (first-occurrence
            # rules for +0/-0 and NaN), so cross-group leaks would show too
            w = np.stack([np.concatenate([normal, group]), np.concatenate([group[::-1], normal])])
            check_bit_exact(gate, w, group_size, bits, case=f"{name} bits={bits} group={group_size}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("sign", (1.0, -1.0), ids=("positive_scale", "negative_scale"))
def test_ties_round_half_to_even(gate, sign, dtype):
    """The tie groups really tie, and MLX rounds each tie to the even code."""
    for bits in BITS:
        group_size = 64
        w = tie_group(dtype, group_size, bits, sign)[None].astype(dtype)
        packed, scales, biases = check_bit_exact(gate, w, group_size, bits, case=f"ties bits={bits}")
        t = (w.astype(np.float64) - biases.astype(np.float64)) / scales.astype(np.float64)
        ties = np.abs(t - np.floor(t) - 0.5) == 0
        assert np.count_nonzero(ties) >= min(group_size - 2, (1 << bits) - 1) // 2, "the construction must tie"
        codes = quant.unpack(packed, bits)
        gate.equal(codes[ties], np.rint(t[ties]).astype(np.uint32),
                   what="round half to even on exact .5 ties", kernel=QUANTIZE, case=f"bits={bits}")
        gate.equal(codes[ties] % 2, np.zeros(np.count_nonzero(ties), np.uint32),
                   what="every tied code is even", kernel=QUANTIZE, case=f"bits={bits}")


# --- named facts: non-finite values and overflow --------------------------------
#
# Each fact is MLX 0.32.4's rule, which reference.quant reproduces (its docstring's "Non-finite values and
# overflow"). A test states the rule's parts once (``facts``), then: what the installed MLX does is recorded as a
# finding (each part held or not); the oracle is held to every part (the project's contract); and oracle == MLX
# bit for bit is the dependency check (``check_bit_exact``), whose failure says that MLX changed and who relies on it.

MLX_OPS = (mlx_quantize, mlx_dequantize)
ORACLE_OPS = (lambda w, g, b: quant.quantize(w, group_size=g, bits=b),
              lambda packed, s, bias, g, b: quant.dequantize(packed, s, bias, group_size=g, bits=b))
ORACLE = "reference.quant"


def _holds(kind: str, actual, expected) -> bool:
    """What ``gate.<kind>(actual, expected)`` would pass, as a bool (for MLX's side: recorded, not gated)."""
    a, e = np.asarray(to_numpy(actual)), np.asarray(to_numpy(expected))
    if kind == "bit_exact":
        return a.dtype == e.dtype and a.shape == e.shape and np.ascontiguousarray(a).tobytes() == \
            np.ascontiguousarray(e).tobytes()
    return a.shape == e.shape and bool(np.all(a == e))


def hold_oracle_to(gate, facts: dict, case: str) -> None:
    """The oracle's side: every part of the rule is gated (reference.quant's documented contract)."""
    for what, (kind, actual, expected) in facts.items():
        getattr(gate, kind)(actual, expected, what=what, kernel=ORACLE, case=case)


def record_mlx_rule(gate, rule: str, facts: dict, evidence: dict) -> None:
    """MLX's side: the rule's parts, each held or not, recorded with the MLX version; nothing asserted."""
    held = {what: _holds(kind, actual, expected) for what, (kind, actual, expected) in facts.items()}
    departs = [what for what, ok in held.items() if not ok]
    title = rule if not departs else f"NOT on this MLX: {rule} (departs: {'; '.join(departs)})"
    gate.finding(title, {"mlx": mx.__version__, **evidence, "rule parts held": held}, kernel=QUANTIZE)


def _row(*groups: np.ndarray, dtype) -> np.ndarray:
    return np.concatenate(groups).astype(np.float32)[None].astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_fact_nan_is_skipped_and_dequantizes_to_the_bias(gate, dtype):
    """MLX 0.32.4: NaN in a group is skipped by the min/max scan (the scale and bias are
    those of the group without it), gets code 0, and so dequantizes to the
    group's bias (its larger-magnitude edge)."""
    g, bits = 64, 4
    base = np.random.default_rng(7).standard_normal(g).astype(np.float32).astype(dtype)
    with_nan = base.copy()
    with_nan[10] = np.nan
    edge_fill = base.copy()
    edge_fill[10] = base.astype(np.float32).max()  # inside [min, max]: same scale and bias

    def facts(quantize, dequantize):
        q, s, b = quantize(with_nan[None], g, bits)
        _, s_fill, b_fill = quantize(edge_fill[None], g, bits)
        deq = dequantize(q, s, b, g, bits)
        return {"scale ignores the NaN": ("bit_exact", s, s_fill), "bias ignores the NaN": ("bit_exact", b, b_fill),
                "NaN's code is 0": ("equal", quant.unpack(q, bits)[0, 10], np.uint32(0)),
                "NaN dequantizes to the bias": ("bit_exact", deq[0, 10:11], b[0])}, b, deq

    seen, b_nan, deq = facts(*MLX_OPS)
    record_mlx_rule(gate, "mx.quantize (CPU) skips NaN in a group; the NaN element gets code 0 and dequantizes to the "
                    "group's bias", seen, {"dtype": str(dtype), "bits": bits, "group_size": g,
                                           "bias": float(b_nan[0, 0]), "dequantized_nan_element": float(deq[0, 10])})
    hold_oracle_to(gate, facts(*ORACLE_OPS)[0], case="nan")
    check_bit_exact(gate, with_nan[None], g, bits, case="nan",
                    behaviour="NaN in a group: skipped by the min/max scan, code 0, dequantized to the bias")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("where", ("pos_inf", "neg_inf", "both_inf", "all_inf", "all_nan"))
def test_fact_inf_or_all_nan_poisons_only_its_group(gate, where, dtype):
    """MLX 0.32.4: +-inf in a group (or a group of NaNs only) makes its scale NaN and its
    bias infinite (+inf when +inf is in the group, else -inf), every code 0,
    and every dequantized value NaN. The neighbouring group is untouched."""
    g, bits = 32, 4
    normal = np.random.default_rng(3).standard_normal(g).astype(np.float32)
    bad = adversarial_group(where, dtype, g, bits).astype(np.float32)
    w = _row(normal, bad, dtype=dtype)
    words = g * bits // 32
    expected_bias = np.inf if np.any(bad == np.inf) else -np.inf

    def facts(quantize, dequantize):
        packed, scales, biases = quantize(w, g, bits)
        alone = quantize(_row(normal, dtype=dtype), g, bits)
        deq = dequantize(packed, scales, biases, g, bits)
        return {"neighbour's codes untouched": ("bit_exact", packed[:, :words], alone[0]),
                "neighbour's scale untouched": ("bit_exact", scales[:, :1], alone[1]),
                "the group's scale is NaN": ("equal", np.isnan(scales[0, 1]), True),
                "the group's bias is the infinite edge": ("equal", biases[0, 1].astype(np.float64), expected_bias),
                "every code 0": ("equal", quant.unpack(packed, bits)[0, g:], np.zeros(g, np.uint32)),
                "the group dequantizes to NaN": ("equal", np.isnan(deq[0, g:]), np.ones(g, bool))}, scales, biases

    seen, scales, biases = facts(*MLX_OPS)
    record_mlx_rule(gate, "mx.quantize (CPU): +-inf or all-NaN in a group gives scale NaN, bias +-inf, codes 0; the "
                    "whole group dequantizes to NaN, neighbours are unaffected", seen,
                    {"case": where, "dtype": str(dtype), "bits": bits, "group_size": g, "bias": float(biases[0, 1]),
                     "scale_bits": hex(int(np.atleast_1d(scales[0, 1]).view(
                         np.uint32 if scales.itemsize == 4 else np.uint16)[0]))})
    hold_oracle_to(gate, facts(*ORACLE_OPS)[0], case=where)
    check_bit_exact(gate, w, g, bits, case=where,
                    behaviour="+-inf or all-NaN in a group: scale NaN, bias the infinite edge, codes 0, NaN out")


@pytest.mark.parametrize("dtype", (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)), ids=dtype_id)
def test_fact_span_overflow_turns_finite_groups_to_nan(gate, dtype):
    """MLX 0.32.4: a finite group whose span w_max - w_min overflows float32 (float32 and
    bfloat16 near max; float16 cannot overflow it) gets scale -inf (+inf when
    |w_min| > |w_max|), bias 0 and codes 0, and dequantizes to NaN (0 * inf)."""
    g, bits = 32, 8
    big = float(_finfo(dtype).max)
    cases = {"max_span": (_with(np.full(g, big), {0: -big}), -1.0),
             "negative_heavy": (_with(np.full(g, -big), {0: big / 2}), 1.0)}

    def facts(quantize, dequantize):
        out = {}
        for case, (group, scale_sign) in cases.items():
            packed, scales, biases = quantize(_row(group, dtype=dtype), g, bits)
            deq = dequantize(packed, scales, biases, g, bits)
            out.update({
                f"{case}: scale is the overflowed span": ("equal", scales.astype(np.float64),
                                                          np.full((1, 1), scale_sign * np.inf)),
                f"{case}: bias 0 (q0 == 0)": ("equal", biases.astype(np.float64), np.zeros((1, 1))),
                f"{case}: codes 0": ("equal", quant.unpack(packed, bits), np.zeros((1, g), np.uint32)),
                f"{case}: finite input dequantizes to NaN": ("equal", np.isnan(deq), np.ones((1, g), bool))})
        return out

    record_mlx_rule(gate, "mx.quantize (CPU): a finite group whose span overflows float32 dequantizes to NaN",
                    facts(*MLX_OPS), {"dtype": str(dtype), "bits": bits, "group_size": g, "max": big})
    hold_oracle_to(gate, facts(*ORACLE_OPS), case="span overflow")
    for case, (group, _) in cases.items():
        check_bit_exact(gate, _row(group, dtype=dtype), g, bits, case=case,
                        behaviour="a finite group whose float32 span overflows: scale +-inf, bias 0, codes 0, NaN out")


def test_fact_half_precision_nan_encodings(gate):
    """The NaN scales MLX 0.32.4 stores: float16 sign|0x7D00 (a signaling-NaN pattern:
    quiet bit clear), bfloat16 0x7FC0 whatever the sign; float32 keeps the
    hardware's default NaN from inf/inf (x86: 0xFFC00000), whose sign float16 keeps."""
    g, bits = 32, 4
    group = adversarial_group("pos_inf", np.float32, g, bits)
    uint = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16, np.dtype(ml_dtypes.bfloat16): np.uint16}

    def scale_bits(quantize) -> dict:
        return {dtype: quantize(group[None].astype(dtype), g, bits)[1].view(uint[dtype]) for dtype in DTYPES}

    def facts(raw: dict) -> dict:
        f32 = int(raw[np.dtype(np.float32)][0, 0])
        sign = (f32 >> 16) & 0x8000
        return {"float32 scale is NaN": ("equal", np.isnan(raw[np.dtype(np.float32)].view(np.float32)[0, 0]), True),
                "float16: the float32 NaN's sign | 0x7D00": ("equal", raw[np.dtype(np.float16)],
                                                            np.array([[sign | 0x7D00]], np.uint16)),
                "bfloat16: 0x7FC0": ("equal", raw[np.dtype(ml_dtypes.bfloat16)], np.array([[0x7FC0]], np.uint16))}

    raw = scale_bits(mlx_quantize)
    seen = {str(dtype): hex(int(bits_[0, 0])) for dtype, bits_ in raw.items()}
    held = {what: _holds(kind, a, e) for what, (kind, a, e) in facts(raw).items()}
    title = ("MLX CPU NaN encodings: float32->float16 gives sign|0x7D00, float32->bfloat16 gives 0x7FC0"
             if all(held.values()) else f"MLX CPU NaN encodings: float32->float16 gives {seen['float16']}, "
             f"float32->bfloat16 gives {seen['bfloat16']} (not MLX 0.32.4's sign|0x7D00, 0x7FC0)")
    gate.finding(title, {"mlx": mx.__version__, "scale_bits_for_pos_inf_group": seen, "rule parts held": held},
                 kernel=QUANTIZE)
    hold_oracle_to(gate, facts(scale_bits(ORACLE_OPS[0])), case="nan scale")
    for dtype in DTYPES:
        check_bit_exact(gate, group[None].astype(dtype), g, bits, case=f"nan scale {dtype}",
                        behaviour="NaN scales: float16 sign|0x7D00, bfloat16 0x7FC0 (reference.quant.narrow)")


def test_fact_half_step_bound_fails_when_the_far_edge_clips(gate):
    """|dequant(quant(w)) - w| <= |scale|/2 is NOT MLX's bound: moving the
    scale so the near edge lands on a code (scale = edge / q0) can shrink it,
    and the far edge then clips. 2 bits, group {-1.5, 1.5, 0...}: scale -0.75,
    bias 1.5, and -1.5 is off by a whole step."""
    g, bits = 32, 2
    w = _row(_with(np.zeros(g), {0: -1.5, 1: 1.5}), dtype=np.float32)

    def facts(quantize, dequantize):
        packed, scales, biases = quantize(w, g, bits)
        error = np.abs(dequantize(packed, scales, biases, g, bits).astype(np.float64) - w)
        return {"scale = edge / rint(edge / s0)": ("equal", scales, np.array([[-0.75]], np.float32)),
                "bias = edge": ("equal", biases, np.array([[1.5]], np.float32)),
                "the clipped far edge is a whole step off": ("equal", error.max(), 0.75)}, error

    seen, error = facts(*MLX_OPS)
    record_mlx_rule(gate, "mx.quantize round-trip error can reach |scale| (not |scale|/2) when a group straddles zero",
                    seen, {"bits": bits, "group": "[-1.5, 1.5, 0 x 30]", "scale": -0.75, "bias": 1.5,
                           "max_error": float(error.max())})
    hold_oracle_to(gate, facts(*ORACLE_OPS)[0], case="far-edge clip")
    check_bit_exact(gate, w, g, bits, case="far-edge clip",
                    behaviour="scale = edge / q0, so the far edge clips (the round-trip bound's |scale| case)")


def _f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


# (scale, bias) pairs whose dequantization meets two NaNs, or makes one
NAN_PAIRS = {
    "nan_scale_nan_bias": (_f32(0x7FC00000), _f32(0xFFC00001)),
    "neg_nan_scale_pos_nan_bias": (_f32(0xFFC00001), _f32(0x7FC00000)),
    "inf_scale_nan_bias": (np.float32(np.inf), _f32(0xFFC00001)),  # code 0: 0*inf is NaN too
    "zero_scale_nan_bias": (np.float32(0), _f32(0x7FC00000)),
    "inf_scale_neg_inf_bias": (np.float32(np.inf), np.float32(-np.inf)),
    "signaling_nan_scale": (_f32(0xFF800003), _f32(0x7FC00000)),
    "signaling_nan_bias": (np.float32(1), _f32(0xFF800003)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("pair", NAN_PAIRS)
def test_dequantize_nan_propagation(gate, pair, dtype):
    """code * scale + bias with NaNs on both sides keeps the product's NaN (x86
    hands back the first operand's), quiets signaling NaNs, and re-encodes
    half-precision NaNs (see test_fact_half_precision_nan_encodings)."""
    scale, bias = NAN_PAIRS[pair]
    # one row and two: NumPy's add picks a different NaN on its broadcast-scalar
    # loop than on its elementwise one, which is why the oracle picks explicitly
    for rows in (1, 2):
        scales = quant.narrow(np.full((rows, 1), scale, np.float32), dtype)
        biases = quant.narrow(np.full((rows, 1), bias, np.float32), dtype)
        packed = quant.pack(np.arange(32 * rows, dtype=np.uint32).reshape(rows, 32) % 16, 4)
        for out_dtype in DTYPES:
            with relied_on("code * scale + bias with NaNs: the product's NaN wins, quieted, half NaNs re-encoded"):
                gate.bit_exact(mlx_dequantize(packed, scales, biases, 32, 4, dtype=out_dtype),
                               quant.dequantize(packed, scales, biases, group_size=32, bits=4, dtype=out_dtype),
                               what=f"NaN propagation to {out_dtype}", kernel=DEQUANTIZE, case=f"{pair} rows={rows}")


# --- Hypothesis properties ----------------------------------------------------


@PROPERTY_SETTINGS
@given(case=sts.quant_weights(nonfinite=True, extremes=True))
def test_property_quantize_bit_exact(gate, case):
    check_bit_exact(gate, case.w, case.group_size, case.bits, case="hypothesis")


@PROPERTY_SETTINGS
@given(inputs=sts.dequant_inputs(nonfinite=True))
def test_property_dequantize_bit_exact(gate, inputs):
    args = (inputs.packed, inputs.scales, inputs.biases)
    with relied_on("mx.dequantize on drawn planes, non-finite scales and biases included"):
        gate.bit_exact(mlx_dequantize(*args, inputs.group_size, inputs.bits, dtype=inputs.dtype),
                       quant.dequantize(*args, group_size=inputs.group_size, bits=inputs.bits, dtype=inputs.dtype),
                       what=f"dequantized, {inputs.bits}-bit group {inputs.group_size}", kernel=DEQUANTIZE,
                       case="hypothesis")


def round_trip_bound(w: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int, bits: int):
    """Per-element bound on |dequant(quant(w)) - w| (float64, shape of w).

    Derivation (real arithmetic first). b is an edge of the group and codes are
    t = (w - b) / s >= 0, so an element whose code is not clipped is within
    |s|/2. Only the far edge can clip, at code n = 2**bits - 1, and then its
    error is |w - b| - n|s| <= span - n|s|. So

        error <= E = max(|s|/2, span - n|s|).

    span - n|s| can exceed |s|/2: s0 = span/n, x = |edge|/|s0|, q0 = rint(x),
    |s| = |s0| x / q0 >= |s0| x / (x + 1/2). For a group straddling zero
    x >= n/2 only, giving span - n|s| <= |s| (reached: 2 bits, {-1.5, 1.5},
    see test_fact_half_step_bound_fails_when_the_far_edge_clips); for a
    one-signed group x >= n, giving span - n|s| <= |s|/2, so E = |s|/2 there.

    Rounding on top (u = unit roundoff of T, d = T's smallest subnormal):
    codes are chosen from float32 (w - b) / s, off by <= 2**-23 (n + 1) in
    code units; T(s) and T(b) are each off by <= u|.| + d/2; T(code*T(s)) and
    T(. + T(b)) round once each. With M = n|s| + |b| that is at most
    |s| 2**-22 (n + 1) + 5 u M + (n + 3) d/2.
    """
    info = _finfo(w.dtype)
    u, d = float(info.eps) / 2, float(info.smallest_subnormal)
    n = (1 << bits) - 1
    lead = w.shape[:-1]
    x = w.astype(np.float64).reshape(lead + (-1, group_size))
    s = np.abs(scales.astype(np.float64))[..., None]
    b = np.abs(biases.astype(np.float64))[..., None]
    span = (x.max(axis=-1) - x.min(axis=-1))[..., None]
    one_signed = ((x.min(axis=-1) >= 0) | (x.max(axis=-1) <= 0))[..., None]
    exact = np.where(one_signed, s / 2, np.maximum(s / 2, span - n * s))
    slack = s * 2.0**-22 * (n + 1) + 5 * u * (n * s + b) + (n + 3) * d / 2
    return np.broadcast_to(exact + slack, x.shape).reshape(w.shape)


@PROPERTY_SETTINGS
@given(case=sts.quant_weights(nonfinite=False, extremes=False))
def test_property_round_trip_error_bound(gate, case):
    w, g, bits = case.w, case.group_size, case.bits
    packed, scales, biases = check_bit_exact(gate, w, g, bits, case="round trip")
    gate.equal(np.isfinite(scales), np.ones(scales.shape, bool),
               what="finite groups within max/4 get finite scales", kernel=QUANTIZE)
    error = np.abs(mlx_dequantize(packed, scales, biases, g, bits).astype(np.float64) - w.astype(np.float64))
    within = error <= round_trip_bound(w, scales, biases, g, bits)
    gate.equal(within, np.ones(w.shape, bool), kernel=DEQUANTIZE, case=f"bits={bits} group={g} {w.dtype}",
               what="|dequant(quant(w)) - w| <= max(|s|/2, span - n|s|) (|s|/2 for one-signed groups) "
                    "+ float32 code choice + rounding to the dtype")


# --- packing helpers ----------------------------------------------------------


@pytest.mark.parametrize("bits", BITS, ids=lambda b: f"b{b}")
def test_pack_unpack_round_trip(gate, bits):
    codes = np.random.default_rng(bits).integers(0, 1 << bits, (3, 96), dtype=np.uint32)
    packed = quant.pack(codes, bits)
    gate.equal(packed.shape, (3, 96 * bits // 32), what="words per row", kernel="reference.quant.pack")
    gate.equal(quant.unpack(packed, bits), codes, what="unpack inverts pack", kernel="reference.quant.pack")


# --- bad input ----------------------------------------------------------------


def test_pack_unpack_reject_bad_input():
    for call, argument in (
        (lambda: quant.pack(np.full((1, 32), 16), 4), "codes"),
        (lambda: quant.pack(np.zeros((1, 32), np.float32), 4), "codes"),
        (lambda: quant.pack(np.zeros((1, 32), np.uint8), 7), "bits"),
        (lambda: quant.unpack(np.zeros((1, 4), np.int32), 4), "packed"),
        (lambda: quant.unpack(np.zeros((1, 4), np.uint32), 5), "packed"),
        (lambda: quant.pack(np.zeros(3, np.int64), 4), "columns"),
    ):
        with pytest.raises(ValueError, match=argument):
            call()


def _good():
    w = np.zeros((2, 64), np.float32)
    return w, quant.quantize(w, group_size=32, bits=4)


@pytest.mark.parametrize("kwargs, error, argument", [
    ({"group_size": 48, "bits": 4}, ValueError, "group_size"),
    ({"group_size": 32, "bits": 7}, ValueError, "bits"),
    ({"group_size": 32, "bits": 1}, ValueError, "bits"),
    ({"group_size": 32, "bits": True}, TypeError, "bits"),  # a bool is never an int
    ({"group_size": 32.0, "bits": 4}, TypeError, "group_size"),
], ids=["group_size48", "bits7", "bits1", "bits_bool", "group_size_float"])
def test_quantize_rejects_bad_parameters(kwargs, error, argument):
    w, _ = _good()
    with pytest.raises(error, match=argument):
        quant.quantize(w, **kwargs)


@pytest.mark.parametrize("w, error, argument", [
    (np.zeros((2, 96), np.float32), ValueError, "group_size"),  # 96 is not a multiple of 64
    (np.zeros((2, 64), np.float64), ValueError, "w"),
    (np.zeros((2, 64), np.int32), ValueError, "w"),
    ([[0.0] * 64], TypeError, "w"),  # not a NumPy array: the oracle does not guess its dtype
    (np.zeros((2, 0), np.float32), ValueError, "group_size"),
], ids=["not_divisible", "float64", "int32", "list", "empty"])
def test_quantize_rejects_bad_w(w, error, argument):
    with pytest.raises(error, match=argument):
        quant.quantize(w, group_size=64, bits=4)


@pytest.mark.parametrize("kind", [np.uint8, np.int8, np.int64])
def test_numpy_integer_parameters_are_the_ints(kind):
    # a NumPy uint8 4 would overflow columns * bits (and int8 1 << bits): the checks hand back Python ints
    w = np.random.default_rng(0).normal(size=(2, 128)).astype(np.float32)
    expected = quant.quantize(w, group_size=32, bits=4)
    got = quant.quantize(w, group_size=kind(32), bits=kind(4))
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    assert np.array_equal(quant.dequantize(*got, group_size=kind(32), bits=kind(4)),
                          quant.dequantize(*expected, group_size=32, bits=4))


def test_dequantize_rejects_bad_inputs():
    _, (packed, scales, biases) = _good()
    cases = [
        ((packed.astype(np.int32), scales, biases), {}, "packed"),
        ((packed, scales.astype(np.float64), biases), {}, "scales"),
        ((packed, scales, biases.astype(np.float16)), {}, "biases"),
        ((packed, scales, biases[:, :1]), {}, "biases"),
        ((packed[:1], scales, biases), {}, "packed"),
        ((packed[:, :4], scales, biases), {}, "packed"),
        ((packed, scales, biases), {"dtype": np.float64}, "dtype"),
        ((packed, scales, biases), {"dtype": "not a dtype"}, "dtype"),
        ((packed, scales[0, 0, ...], biases[0, 0, ...]), {}, "scales"),  # 0-d arrays: no group axis
        ((packed, scales, biases), {"bits": 7}, "bits"),
        ((packed, scales, biases), {"group_size": 16}, "group_size"),
    ]
    for args, override, argument in cases:
        kwargs = {"group_size": 32, "bits": 4, **override}
        with pytest.raises(ValueError, match=argument):
            quant.dequantize(*args, **kwargs)
    with pytest.raises(TypeError, match="scales"):  # a NumPy scalar is no array
        quant.dequantize(packed, scales[0, 0], biases[0, 0], group_size=32, bits=4)


# --- the GPU backend is a different function -----------------------------------

GPU_CASES = ("random", "all_negative", "all_positive")


@pytest.mark.skipif(not arm_registry.gpu_available(),
                    reason="no GPU: the CPU/GPU quantize divergence check needs MLX's GPU backend")
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_gpu_quantize_divergence_is_recorded(gate, dtype):
    """mx.quantize on mx.gpu vs mx.cpu on the same data. The CPU side must be
    bit-exact to the oracle; each GPU divergence is recorded as a finding
    (not a failure: the GPU kernel is a different function)."""
    rng = np.random.default_rng(11)
    data = {"random": rng.standard_normal((ROWS, COLUMNS)),
            "all_negative": -np.abs(rng.standard_normal((ROWS, COLUMNS))) - 0.05,
            "all_positive": np.abs(rng.standard_normal((ROWS, COLUMNS))) + 0.05}
    for case in GPU_CASES:
        w = data[case].astype(np.float32).astype(dtype)
        for bits in BITS:
            for group_size in GROUP_SIZES:
                label = f"{case} bits={bits} group={group_size}"
                cpu = check_bit_exact(gate, w, group_size, bits, case=label)
                gpu = mlx_quantize(w, group_size, bits, device=mx.gpu)
                # dequantize both with the oracle so only the quantization differs
                deq_cpu = quant.dequantize(*cpu, group_size=group_size, bits=bits).astype(np.float64)
                deq_gpu = quant.dequantize(*gpu, group_size=group_size, bits=bits).astype(np.float64)
                words = int(np.count_nonzero(cpu[0] != gpu[0]))
                scale_diffs = int(np.count_nonzero(cpu[1].astype(np.float64) != gpu[1].astype(np.float64)))
                bias_diffs = int(np.count_nonzero(cpu[2].astype(np.float64) != gpu[2].astype(np.float64)))
                if words or scale_diffs or bias_diffs:
                    gate.finding("mx.quantize on the GPU differs from the CPU backend", {
                        "case": case, "bits": bits, "group_size": group_size, "dtype": str(dtype),
                        "max_dequantized_difference": float(np.nanmax(np.abs(deq_gpu - deq_cpu))),
                        "differing_packed_words": words, "packed_words": int(cpu[0].size),
                        "differing_scales": scale_diffs, "differing_biases": bias_diffs,
                        "device": str(mx.default_device()),
                    }, kernel=QUANTIZE)
