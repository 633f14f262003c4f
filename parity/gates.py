"""The one gate API: every conformance check in mlxgate is a call on a ``Gate``.

A gate compares a kernel's output with a reference under a stated threshold.
Each call, pass or fail, produces one record (test id, gate, kernel, arm, dtype,
shape, measured, threshold, derivation, verdict, worst element) that goes to the
results file (``reports.recorder``) and from there into the report. A failing
gate raises ``GateFailure`` whose message names the worst element (index, both
values), the threshold and where the threshold comes from.

Tests get a ``Gate`` from the ``gate`` fixture (``conftest.py``), already bound
to the test id and the ``arm`` parameter. Thresholds that the caller chooses
take a ``why=`` argument that must state the derivation (dtype epsilon, length,
measured noise floor); an empty ``why`` is refused.

Gates:
  bit_exact    identical dtype, shape and bytes (NaN payloads included)
  equal        identical values for integer outputs (token ids, block tables)
  max_ulp      max distance in units in the last place of the output dtype
  nmse         sum((a-r)^2) / sum(r^2), llama.cpp's normalized MSE
  kl           max over rows of KL(p_ref || p_test) from logits
  error_ratio  max|a-r| <= factor * max|base-r| + floor (FlashAttention's rule)

Non-finite values are compared by position and sign first (NaN vs NaN, +inf vs
+inf); the numeric gates then measure only the positions finite in both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from reference import metrics
from reports.recorder import append_record

FLASH_ATTENTION_FACTOR = 2.0
ERROR_RATIO_WHY = (
    "FlashAttention's rule: the kernel may be at most {factor:g}x as far from the float64 "
    "oracle as the same computation done naively in the input dtype (baseline), plus a floor "
    "of one {dtype} ULP at max|ref| ({floor:.3g}) so an exact baseline cannot force 0"
)


def _exactly_equal(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Elementwise equality of the values, never through a rounding common type: NumPy compares int64 with float64
    (and int64 with uint64) as float64, where 2**53 + 1 equals 2**53. Floats of any width are exact in float64; an
    integer beside a float, or signed beside unsigned, is compared as Python numbers (exact)."""
    def exact(x: np.ndarray) -> np.ndarray:
        return x if x.dtype.kind in "biu" else x.astype(np.float64)  # bfloat16 (kind "V") and float16/32/64

    a, e = exact(a), exact(e)
    kinds = {a.dtype.kind, e.dtype.kind}
    if kinds <= {"b", "i"} or kinds <= {"b", "u"} or kinds == {"f"}:
        return a == e
    if kinds == {"i", "u"}:  # token ids in uint32 against int64: unsigned values below 2**63 are int64 exactly
        u = a if a.dtype.kind == "u" else e
        if u.size == 0 or int(u.max()) < 2**63:
            return a.astype(np.int64) == e.astype(np.int64)
    return np.frompyfunc(lambda x, y: x == y, 2, 1)(a.astype(object), e.astype(object)).astype(bool)


class GateFailure(AssertionError):
    """A gate's measurement exceeded its threshold."""

    def __init__(self, record: dict[str, Any]):
        self.record = record
        super().__init__(describe_failure(record))


def describe_failure(record: dict[str, Any]) -> str:
    where = ", ".join(f"{k}={record[k]}" for k in ("kernel", "arm", "dtype") if record.get(k))
    text = (
        f"{record['gate']} gate failed ({where or 'no context'}; shape {record.get('shape')}): "
        f"measured {record['measured']!r} > threshold {record['threshold']!r}"
    )
    if record.get("worst"):
        worst = record["worst"]
        text += f"; worst element at index {tuple(worst['index'])}: got {worst['actual']!r}, expected {worst['expected']!r}"
    if record.get("detail"):
        text += f"; {record['detail']}"
    return text + f". Threshold: {record['derivation']}"


Sink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Gate:
    """Gate calls bound to one test (and optionally one kernel / arm)."""

    test_id: str
    kernel: str | None = None
    arm: str | None = None
    sink: Sink = field(default=append_record, repr=False, compare=False)

    def __post_init__(self):
        _check_context(self.test_id, {"kernel": self.kernel, "arm": self.arm})
        if not callable(self.sink):
            raise TypeError(f"sink must be callable, got {type(self.sink).__name__}")

    def bind(self, **context: Any) -> "Gate":
        """A copy with ``kernel`` and/or ``arm`` set."""
        unknown = set(context) - {"kernel", "arm"}
        if unknown:
            raise ValueError(f"bind accepts kernel and arm, not {sorted(unknown)}")
        return replace(self, **context)

    # --- the gates -------------------------------------------------------

    def bit_exact(self, actual, expected, *, what: str = "", **context: Any) -> dict[str, Any]:
        """Same dtype, same shape, same bytes."""
        a, e = metrics.to_numpy(actual, name="actual"), metrics.to_numpy(expected, name="expected")
        derivation = "bit-exact: the contract promises identical bytes" + (f" ({what})" if what else "")
        detail = ""
        if a.dtype != e.dtype:
            detail = f"dtype {a.dtype} != expected {e.dtype}"
        elif a.shape != e.shape:
            detail = f"shape {a.shape} != expected {e.shape}"
        if detail:
            return self._record("bit_exact", a, measured=float("inf"), threshold=0, derivation=derivation,
                                passed=False, detail=detail, **context)
        a_bytes = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (-1,)) if a.size else a
        e_bytes = np.ascontiguousarray(e).view(np.uint8).reshape(e.shape + (-1,)) if e.size else e
        differs = np.any(a_bytes != e_bytes, axis=-1) if a.size else np.zeros(a.shape, bool)
        count = int(np.count_nonzero(differs))
        worst = None
        if count:
            i = int(np.flatnonzero(differs)[0])
            worst = metrics.Mismatch(tuple(int(v) for v in np.unravel_index(i, a.shape)),
                                     _scalar(a.flat[i]), _scalar(e.flat[i]))
        return self._record("bit_exact", a, measured=count, threshold=0, derivation=derivation,
                            passed=count == 0, worst=worst, detail=f"{count} of {a.size} elements differ" if count else "",
                            **context)

    def equal(self, actual, expected, *, what: str = "", **context: Any) -> dict[str, Any]:
        """Exact equality of values (integer outputs; dtype width may differ)."""
        a, e = metrics.to_numpy(actual, name="actual"), metrics.to_numpy(expected, name="expected")
        derivation = "exact equality of values" + (f" ({what})" if what else "")
        if a.shape != e.shape:
            return self._record("equal", a, measured=float("inf"), threshold=0, derivation=derivation,
                                passed=False, detail=f"shape {a.shape} != expected {e.shape}", **context)
        differs = ~_exactly_equal(a, e)
        count = int(np.count_nonzero(differs))
        worst = None
        if count:
            i = int(np.flatnonzero(differs)[0])
            worst = metrics.Mismatch(tuple(int(v) for v in np.unravel_index(i, a.shape)),
                                     _scalar(a.flat[i]), _scalar(e.flat[i]))
        return self._record("equal", a, measured=count, threshold=0, derivation=derivation, passed=count == 0,
                            worst=worst, detail=f"{count} of {a.size} elements differ" if count else "", **context)

    def max_ulp(self, actual, expected, *, ulps: float, why: str, dtype: str | None = None,
                **context: Any) -> dict[str, Any]:
        _require_threshold("ulps", ulps, why)
        if dtype is not None:
            _check_dtype_label(dtype, True)
        a = metrics.to_numpy(actual, name="actual")
        dtype = dtype or metrics.dtype_name(a.dtype)
        self._same_shape("max_ulp", a, expected, ulps, why, dtype=dtype, **context)
        measured, worst = metrics.max_ulp(a, expected, dtype)
        return self._record("max_ulp", a, measured=measured, threshold=ulps, derivation=why,
                            passed=measured <= ulps, worst=worst, dtype=dtype, **context)

    def nmse(self, actual, expected, *, limit: float, why: str, **context: Any) -> dict[str, Any]:
        _require_threshold("limit", limit, why)
        a = metrics.to_numpy(actual, name="actual")
        self._same_shape("nmse", a, expected, limit, why, **context)
        bad = metrics.nonfinite_mismatch(a, expected)
        if bad:
            return self._nonfinite("nmse", a, bad, limit, why, **context)
        measured = metrics.nmse(a, expected)
        _, worst = metrics.max_abs_error(a, expected)
        return self._record("nmse", a, measured=measured, threshold=limit, derivation=why,
                            passed=measured <= limit, worst=worst, **context)

    def kl(self, ref_logits, test_logits, *, limit: float, why: str, **context: Any) -> dict[str, Any]:
        """max over rows of KL(softmax(ref) || softmax(test))."""
        _require_threshold("limit", limit, why)
        t = metrics.to_numpy(test_logits, name="test_logits")
        self._same_shape("kl", t, ref_logits, limit, why, **context)
        if t.ndim == 0 or t.shape[-1] == 0:
            raise ValueError(f"test_logits must have a non-empty last (vocabulary) axis, got shape {t.shape}")
        per_row = metrics.kl_divergence(ref_logits, t)
        per_row = np.atleast_1d(per_row)
        if per_row.size == 0:  # no rows: nothing can differ
            return self._record("kl", t, measured=0.0, threshold=limit, derivation=why, passed=True,
                                detail="no rows", **context)
        i = int(np.nanargmax(np.where(np.isnan(per_row), np.inf, per_row)))
        measured = float(per_row.flat[i]) if not np.isnan(per_row.flat[i]) else float("inf")
        worst = metrics.Mismatch(tuple(int(v) for v in np.unravel_index(i, per_row.shape)), measured, 0.0)
        return self._record("kl", t, measured=measured, threshold=limit, derivation=why,
                            passed=measured <= limit, worst=worst, detail=f"row {worst.index} has the largest KL",
                            **context)

    def error_ratio(self, actual, reference, baseline, *, factor: float = FLASH_ATTENTION_FACTOR,
                    floor: float | None = None, dtype: str | None = None, why: str | None = None,
                    **context: Any) -> dict[str, Any]:
        """max|actual-ref| <= factor * max|baseline-ref| + floor.

        ``floor`` defaults to ``metrics.rounding_noise_floor(reference, dtype)``:
        one output-dtype ULP at the largest |ref|.
        """
        # Every argument checked before anything is recorded: a bad factor or dtype is the caller's error, not a
        # failed gate in the report.
        factor = _check_number("factor", factor)
        if factor == 0:
            raise ValueError("factor must be positive (the baseline's error scaled by 0 bounds nothing)")
        if floor is not None:
            floor = _check_number("floor", floor)
        if why is not None:
            _require_threshold("factor", factor, why)  # a stated derivation must state something
        if dtype is not None:
            _check_dtype_label(dtype, floor is None)
        a = metrics.to_numpy(actual, name="actual")
        dtype = dtype or metrics.dtype_name(a.dtype)
        self._same_shape("error_ratio", a, reference, float("nan"), why or "error ratio", dtype=dtype, **context)
        if metrics.to_numpy(baseline, name="baseline").shape != a.shape:
            self._same_shape("error_ratio", metrics.to_numpy(baseline, name="baseline"), a, float("nan"),
                             why or "error ratio", dtype=dtype, what="baseline", **context)
        bad = metrics.nonfinite_mismatch(a, reference)
        if floor is None:
            floor = metrics.rounding_noise_floor(reference, dtype)
        derivation = why or ERROR_RATIO_WHY.format(factor=factor, dtype=dtype, floor=floor)
        if bad:
            return self._nonfinite("error_ratio", a, bad, float("nan"), derivation, dtype=dtype, **context)
        result = metrics.error_ratio(a, reference, baseline, factor=factor, floor=floor)
        return self._record(
            "error_ratio", a, measured=result.error, threshold=result.bound, derivation=derivation,
            passed=result.passed, worst=result.worst, dtype=dtype,
            detail=f"baseline error {result.baseline_error:.3g}, factor {factor:g}, floor {floor:.3g}",
            extra={"baseline_error": result.baseline_error, "floor": floor, "factor": factor}, **context)

    def finding(self, title: str, evidence: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Record a fact established about MLX itself (not a pass/fail gate)."""
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"title must name the finding, got {title!r}")
        unknown = set(context) - {"kernel", "arm"}
        if unknown:
            raise ValueError(f"unknown finding context {sorted(unknown)}; use kernel=, arm=")
        _check_context(self.test_id, context)
        if not isinstance(evidence, dict):
            raise TypeError(f"evidence must be a dict of named facts, got {type(evidence).__name__}")
        record = {"kind": "finding", "test_id": self.test_id, "title": title, "evidence": evidence,
                  "kernel": context.get("kernel", self.kernel), "arm": context.get("arm", self.arm),
                  "time": time.time()}
        self.sink(record)
        return record

    # --- plumbing ---------------------------------------------------------

    def _same_shape(self, gate: str, a: np.ndarray, expected, threshold: float, why: str, *, what: str = "expected",
                    **context: Any) -> None:
        """A shape mismatch is a failed gate, recorded like any other failure (measured inf), not a bare error."""
        e = metrics.to_numpy(expected, name=what)
        if a.shape != e.shape:
            self._record(gate, a, measured=float("inf"), threshold=threshold, derivation=why, passed=False,
                         detail=f"shape {a.shape} != {what} {e.shape}", **context)

    def _nonfinite(self, gate: str, a: np.ndarray, bad: metrics.Mismatch, threshold: float, why: str,
                   **context: Any) -> dict[str, Any]:
        return self._record(gate, a, measured=float("inf"), threshold=threshold, derivation=why, passed=False,
                            worst=bad, detail="NaN/inf placement or sign differs from the reference", **context)

    def _record(self, gate: str, a: np.ndarray, *, measured, threshold, derivation: str, passed: bool,
                worst: metrics.Mismatch | None = None, detail: str = "", extra: dict | None = None,
                dtype: str | None = None, **context: Any) -> dict[str, Any]:
        unknown = set(context) - {"kernel", "arm", "shape", "case"}
        if unknown:
            raise ValueError(f"unknown gate context {sorted(unknown)}; use kernel=, arm=, shape=, case=")
        _check_context(self.test_id, context)
        record = {
            "kind": "gate",
            "test_id": self.test_id,
            "gate": gate,
            "kernel": context.get("kernel", self.kernel),
            "arm": context.get("arm", self.arm),
            "case": context.get("case"),
            "dtype": dtype or metrics.dtype_name(a.dtype),
            "shape": list(context.get("shape", a.shape)),
            "measured": measured,
            "threshold": threshold,
            "derivation": derivation,
            "passed": bool(passed),
            "worst": None if worst is None else {"index": list(worst.index), "actual": worst.actual,
                                                 "expected": worst.expected},
            "detail": detail,
            "time": time.time(),
            **(extra or {}),
        }
        self.sink(record)
        if not passed:
            raise GateFailure(record)
        return record


def _scalar(value) -> float | int:
    value = value.item() if hasattr(value, "item") else value
    return value if isinstance(value, (int, bool)) else float(value)


def _require_threshold(name: str, value: float, why: str) -> None:
    _check_number(name, value)
    if not isinstance(why, str):
        raise TypeError(f"why must be a str stating the threshold's derivation, got {type(why).__name__}")
    if not why.strip():
        raise ValueError("why must state the threshold's derivation (dtype epsilon, length, measured noise floor)")


def _check_dtype_label(dtype, rounds: bool) -> str:
    """A gate's ``dtype``: the name of a float dtype; one whose ULP the gate computes (``rounds``) is one of
    ``metrics.FLOAT_DTYPES``, a label beside a given floor may also be float64 (a float64 comparison)."""
    names = metrics.FLOAT_DTYPES if rounds else metrics.FLOAT_DTYPES + ("float64",)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be one of {names} (a str), got {type(dtype).__name__}")
    if dtype not in names:
        raise ValueError(f"dtype must be one of {names}, got {dtype!r}")
    return dtype


def _check_number(name: str, value) -> float:
    """A non-negative finite real (Python's or NumPy's, never a bool), as a float. (A wrong kind stays a ValueError:
    the gate API has said so since its first release, and tests match it.)"""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number (a non-negative finite threshold), got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        number = float("inf")
    if not np.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a non-negative finite threshold, got {value!r}")
    return number


ARMS = ("graph", "metal", "cuda")  # impl.arms.ARMS: the report and the comparison group records by these


def _check_context(test_id, context: dict[str, Any]) -> None:
    """What a record is filed under: the report and the comparison key on these fields, so a wrong kind would file
    a record where no one looks (a kernel of 3, an arm "gpu", a shape "x")."""
    if not isinstance(test_id, str) or not test_id:
        raise TypeError(f"test_id must be a non-empty str (the pytest node id), got {test_id!r}")
    for name in ("kernel", "case"):
        if context.get(name) is not None and not isinstance(context[name], str):
            raise TypeError(f"{name} must be a str or None, got {type(context[name]).__name__}")
    if context.get("arm") is not None and context["arm"] not in ARMS:
        raise ValueError(f"arm must be one of {ARMS} or None, got {context['arm']!r}")
    shape = context.get("shape")
    if shape is not None and (isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__") or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise TypeError(f"shape must be a sequence of non-negative ints, got {shape!r}")
