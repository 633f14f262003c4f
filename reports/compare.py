"""Run-to-run comparison: the kernel regression gate across commits.

``compare(old_records, new_records)`` matches gate records of two runs by
``(test_id, gate, kernel, arm, dtype, case)`` (the shape is left out: Hypothesis
draws it anew each run) and keeps, per key, the worst record of each run (the
failing one, else the one closest to its threshold). It reports

* ``new_failures``: keys failing now that passed, or did not exist, before;
  tests (kind "test") whose outcome became failed/error likewise;
* ``fixed``: keys or tests that failed before and pass now;
* ``moved``: keys present in both whose worst measured value changed, with the
  delta, also as a fraction of the threshold (what the sort uses);
* ``perf``: benchmarks matched by ``(benchmark, kernel, arm, shape)`` with the
  median change, and every benchmark of the new run flagged ``regressed``.

The comparison fails (``failed``, with ``reasons``) when something newly fails
or a benchmark of the new run regressed significantly (``regressed: true``,
decided by the perf harness against its baseline with a p-value and effect size).
"""

from __future__ import annotations

import math
from typing import Any

from reports.results import FAILED_OUTCOMES, number, of_kind

# Measurements equal to this relative tolerance did not move: the same kernel on
# the same inputs is deterministic, so any difference beyond float formatting is real.
MOVED_RTOL = 1e-9


def gate_key(record: dict) -> tuple:
    return tuple(str(record.get(k)) for k in ("test_id", "gate", "kernel", "arm", "dtype", "case"))


def usage(record: dict) -> float:
    """How much of the threshold the measurement used (inf when it exceeded a zero threshold)."""
    measured, threshold = number(record.get("measured")), number(record.get("threshold"))
    if measured is None or math.isnan(measured):
        return math.inf
    if threshold is None or math.isnan(threshold):
        return math.inf
    if threshold > 0:
        return measured / threshold
    return 0.0 if measured <= 0 else math.inf


def worst_by_key(records: list[dict]) -> dict[tuple, dict]:
    worst: dict[tuple, dict] = {}
    for r in of_kind(records, "gate"):
        key = gate_key(r)
        rank = (not r.get("passed"), usage(r))
        if key not in worst or rank > (not worst[key].get("passed"), usage(worst[key])):
            worst[key] = r
    return worst


def _key_fields(record: dict) -> dict:
    return {k: record.get(k) for k in ("test_id", "gate", "kernel", "arm", "dtype", "case")}


def _moved(old: dict, new: dict) -> dict | None:
    a, b = number(old.get("measured")), number(new.get("measured"))
    if a is None or b is None:
        return None
    if a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=MOVED_RTOL, abs_tol=0.0):
        return None
    delta = b - a if math.isfinite(a) and math.isfinite(b) else math.inf if b > a else -math.inf
    threshold = number(new.get("threshold"))
    of_threshold = delta / threshold if threshold and math.isfinite(delta) else (
        delta if not math.isfinite(delta) else math.copysign(math.inf, delta))
    return {**_key_fields(new), "old_measured": a, "new_measured": b, "delta": delta,
            "delta_of_threshold": of_threshold, "threshold": threshold,
            "old_passed": bool(old.get("passed")), "new_passed": bool(new.get("passed"))}


def perf_key(record: dict) -> tuple:
    return (str(record.get("benchmark")), str(record.get("kernel")), str(record.get("arm")),
            str(list(record.get("shape") or [])))


def compare(old_records: list[dict], new_records: list[dict], old_environment: dict | None = None) -> dict[str, Any]:
    if not isinstance(old_records, list) or not isinstance(new_records, list):
        raise TypeError("old_records and new_records must be lists of records")
    old_gates, new_gates = worst_by_key(old_records), worst_by_key(new_records)
    new_failures, fixed, moved = [], [], []
    for key, new in new_gates.items():
        old = old_gates.get(key)
        if not new.get("passed") and (old is None or old.get("passed")):
            new_failures.append({"kind": "gate", **_key_fields(new), "measured": new.get("measured"),
                                 "threshold": new.get("threshold"), "was": "absent" if old is None else "passed"})
        if old is not None and not old.get("passed") and new.get("passed"):
            fixed.append({"kind": "gate", **_key_fields(new)})
        if old is not None:
            change = _moved(old, new)
            if change:
                moved.append(change)
    moved.sort(key=lambda m: (-abs(m["delta_of_threshold"]), m["test_id"] or ""))

    old_tests = {t.get("nodeid"): t for t in of_kind(old_records, "test")}
    for t in of_kind(new_records, "test"):
        before = old_tests.get(t.get("nodeid"))
        was_failed = before is not None and before.get("outcome") in FAILED_OUTCOMES
        if t.get("outcome") in FAILED_OUTCOMES and not was_failed:
            new_failures.append({"kind": "test", "test_id": t.get("nodeid"), "outcome": t.get("outcome"),
                                 "was": "absent" if before is None else before.get("outcome")})
        elif was_failed and t.get("outcome") == "passed":
            fixed.append({"kind": "test", "test_id": t.get("nodeid")})

    old_perf = {perf_key(p): p for p in of_kind(old_records, "perf")}
    perf = []
    for p in of_kind(new_records, "perf"):
        before = old_perf.get(perf_key(p))
        old_median, new_median = (number(before.get("median_s")) if before else None), number(p.get("median_s"))
        change = (new_median / old_median - 1.0) if old_median and new_median is not None else None
        perf.append({k: p.get(k) for k in ("benchmark", "kernel", "arm", "shape", "p_value", "effect", "regressed")}
                    | {"old_median_s": old_median, "new_median_s": new_median, "change": change})
    perf.sort(key=lambda c: (not c["regressed"], -(c["change"] or 0.0)))
    regressions = [c for c in perf if c["regressed"]]

    reasons = []
    gate_failures = [f for f in new_failures if f["kind"] == "gate"]
    test_failures = [f for f in new_failures if f["kind"] == "test"]
    if gate_failures:
        reasons.append(f"{len(gate_failures)} gate(s) newly fail: "
                       + ", ".join(f"{f['test_id']} {f['gate']}" for f in gate_failures[:3])
                       + (" ..." if len(gate_failures) > 3 else ""))
    if test_failures:
        reasons.append(f"{len(test_failures)} test(s) newly fail")
    if regressions:
        reasons.append(f"{len(regressions)} benchmark(s) regressed: "
                       + ", ".join(str(c["benchmark"]) for c in regressions[:3]))
    env = old_environment or next((r for r in old_records if r.get("kind") == "environment"), {})
    return {
        "old": {"commit": (env.get("git") or {}).get("commit"), "dirty": (env.get("git") or {}).get("dirty"),
                "date": env.get("date"), "device": env.get("device"), "profile": env.get("profile")},
        "matched": len(set(old_gates) & set(new_gates)),
        "added": len(set(new_gates) - set(old_gates)),
        "removed": len(set(old_gates) - set(new_gates)),
        "new_failures": new_failures,
        "fixed": fixed,
        "moved": moved,
        "perf": perf,
        "perf_regressions": len(regressions),
        "failed": bool(reasons),
        "reasons": reasons,
    }
