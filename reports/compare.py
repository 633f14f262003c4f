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
* ``gone``: checks of the old run the new run lost: gate keys (for a
  Hypothesis-drawn test, the whole test: its cases are drawn) and tests;
  ``not_comparable`` lists those the new run could not have made (their arm did
  not run here, the run did not select their test, or their test skipped on a
  different device);
* ``loosened``: thresholds the new run widened, where the threshold is a fixed
  property of the check (``threshold_changes``);
* ``perf``: benchmarks matched by ``(benchmark, kernel, arm, shape)`` with the
  median change, and every benchmark of the new run flagged ``regressed``.

The comparison fails (``failed``, with ``reasons``) when something newly fails,
a check is gone (unless ``allow_removed``: tests deleted or renamed on
purpose), a threshold was loosened, or a benchmark of the new run regressed
significantly (``regressed: true``, decided by the perf harness against its
baseline with a p-value and effect size).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from reports.results import FAILED_OUTCOMES, counted_gates, number, of_kind

# Measurements equal to this relative tolerance did not move: the same kernel on
# the same inputs is deterministic, so any difference beyond float formatting is real.
MOVED_RTOL = 1e-9
KEY_FIELDS = ("test_id", "gate", "kernel", "arm", "dtype", "case")
# Every gate of parity/gates.py passes on measured <= threshold (error_ratio: error <=
# factor * baseline error + floor), so a larger threshold, factor or floor is a looser
# check. A gate that passes on measured >= threshold would need the opposite test here.
LISTED = 3  # names a reason spells out before "..."


def gate_key(record: dict) -> tuple:
    return tuple(str(record.get(k)) for k in KEY_FIELDS)


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
    for r in counted_gates(records):
        key = gate_key(r)
        rank = (not r.get("passed"), usage(r))
        if key not in worst or rank > (not worst[key].get("passed"), usage(worst[key])):
            worst[key] = r
    return worst


def _key_fields(record: dict) -> dict:
    return {k: record.get(k) for k in KEY_FIELDS}


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


# --- checks the new run lost ----------------------------------------------------


def drawn_tests(*runs: list[dict]) -> set[str]:
    """Node ids of Hypothesis tests (a ``property`` record in either run): their gate keys carry drawn values."""
    return {str(p.get("nodeid")) for records in runs for p in of_kind(records, "property")}


def presence_unit(record: dict, drawn: set[str]) -> dict:
    """What of an old gate record must exist in the new run for its check to count as kept.

    A fixed (parametrized or plain) test makes the same gate calls every run: the
    whole key. A Hypothesis test draws its cases (and so the keys' ``case`` and
    often ``dtype``) anew each run, so a key of one run need not recur in the
    next: for it the unit is the test (and arm), gone only when it records no gate.
    """
    if str(record.get("test_id")) in drawn:
        return {"test_id": record.get("test_id"), "gate": None, "kernel": None, "arm": record.get("arm"),
                "dtype": None, "case": None}
    return _key_fields(record)


def covers(arg: str, nodeid: str) -> bool:
    """Whether a selection argument (a path or node id relative to the rootdir) selects ``nodeid``."""
    if arg in ("", "."):
        return True
    if "::" in arg:
        return nodeid == arg or nodeid.startswith((arg + "::", arg + "["))
    path = nodeid.split("::", 1)[0]
    return path == arg or path.startswith(arg.rstrip("/") + "/")


def selector(selections: list[dict]) -> Callable[[str], bool]:
    """Whether the run that wrote these ``selection`` records selected a node id (no record: every test)."""
    if not selections:
        return lambda nodeid: True
    chosen = [([str(a) for a in s.get("args") or ()], set(s.get("deselected") or ())) for s in selections]
    return lambda nodeid: any(nodeid not in deselected and any(covers(a, nodeid) for a in args)
                              for args, deselected in chosen)


def _environment(records: list[dict], given: dict | None = None) -> dict:
    return given or next((r for r in records if r.get("kind") == "environment"), {})


def _ran_arm(environment: dict, arm: Any) -> bool:
    status = (environment.get("arms") or {}).get(arm)
    return isinstance(status, dict) and status.get("available") is True


def _same_device(old_env: dict, new_env: dict) -> bool:
    return all(old_env.get(k) == new_env.get(k) for k in ("device", "mlx_backend"))


def lost_checks(old_records: list[dict], new_records: list[dict], old_env: dict, new_env: dict) -> tuple[list, list]:
    """(gone, not_comparable): the old run's gate units and tests the new run has no record of.

    Not comparable, so not a loss: a gate unit of an arm that did not run now (the
    environment record's ``arms``), or of a test the new run did not select (its
    ``selection`` record: paths, ``-k``/``-m``, shards), or of a test that skipped
    now on another device or backend (itself, or its module at collection). A test is gone
    when it has no ``test`` record now (the plugin writes one for every test that ran or
    skipped, and one for a module skipped at collection), unless not selected.
    """
    drawn = drawn_tests(old_records, new_records)
    selected = selector(of_kind(new_records, "selection"))
    new_tests = {str(t.get("nodeid")): t for t in of_kind(new_records, "test")}

    def now(nodeid: str) -> dict | None:
        """The new run's record of a test: its own, or its module's when the module skipped at collection (one
        record, node id the module's, ``when`` "collect")."""
        module = new_tests.get(nodeid.split("::", 1)[0])
        return new_tests.get(nodeid) or (module if module and module.get("when") == "collect" else None)

    kept = {gate_key(presence_unit(r, drawn)) for r in counted_gates(new_records)}
    gone, not_comparable = [], []
    units: dict[tuple, dict] = {}
    for r in counted_gates(old_records):
        unit = presence_unit(r, drawn)
        units.setdefault(gate_key(unit), unit)
    for key, unit in sorted(units.items()):
        if key in kept:
            continue
        test_id = str(unit["test_id"])
        skipped = (now(test_id) or {}).get("outcome") == "skipped"
        entry = {"kind": "gate", **unit, "drawn": test_id in drawn}
        if unit["arm"] is not None and not _ran_arm(new_env, unit["arm"]):
            not_comparable.append({**entry, "why": f"arm {unit['arm']} did not run"})
        elif not selected(test_id):
            not_comparable.append({**entry, "why": "test not selected"})
        elif skipped and not _same_device(old_env, new_env):
            not_comparable.append({**entry, "why": f"skipped on {new_env.get('device')}/{new_env.get('mlx_backend')}: "
                                                   f"{now(test_id).get('skip_reason')}"})
        else:
            gone.append(entry)
    if new_tests:  # (a run without reports.plugin has no test records: there is nothing to tell)
        for t in of_kind(old_records, "test"):
            nodeid = str(t.get("nodeid"))
            # A module skipped at collection before held no test; a test skipped now (itself or its module) is
            # reported, and its gates' loss is judged above.
            if t.get("when") == "collect" or now(nodeid) is not None:
                continue
            if selected(nodeid):
                gone.append({"kind": "test", "test_id": nodeid})
            else:
                not_comparable.append({"kind": "test", "test_id": nodeid, "why": "test not selected"})
    return gone, not_comparable


# --- thresholds the new run widened ------------------------------------------------


def threshold_values(records: list[dict], drawn: set[str]) -> dict[tuple, tuple[float, dict]]:
    """The largest value of each comparable threshold setting, by (key, shape, setting), with where it is.

    A threshold can be compared between runs only where it is a fixed property of
    the check. Fixed tests make the same gate calls on the same inputs every run,
    so a key's threshold at one shape (derivations may scale with the shape) is
    fixed: ``threshold``, except for ``error_ratio``, whose threshold includes a
    measurement (``factor`` x the naive baseline's error + ``floor``): there the
    settings ``factor`` and ``floor`` are compared. A Hypothesis test's thresholds
    may be derived from its drawn inputs (max|ref|, a drawn length), which differ
    between runs, so only ``error_ratio``'s ``factor``, a constant of the rule, is
    compared for it, per key without the drawn case and shape.
    """
    values: dict[tuple, tuple[float, dict]] = {}
    for r in counted_gates(records):
        if str(r.get("test_id")) in drawn:
            settings = ("factor",) if r.get("gate") == "error_ratio" else ()
            where = {**_key_fields(r), "case": None, "shape": None}
        else:
            settings = ("factor", "floor") if r.get("gate") == "error_ratio" else ("threshold",)
            where = {**_key_fields(r), "shape": str(list(r.get("shape") or []))}
        for name in settings:
            value = number(r.get(name))
            if value is None or math.isnan(value):
                continue
            slot = gate_key(where) + (str(where["shape"]), name)
            if slot not in values or value > values[slot][0]:
                values[slot] = (value, {**where, "field": name})
    return values


def loosened_thresholds(old_records: list[dict], new_records: list[dict]) -> list[dict]:
    drawn = drawn_tests(old_records, new_records)
    old, new = threshold_values(old_records, drawn), threshold_values(new_records, drawn)
    loosened = []
    for slot in sorted(set(old) & set(new)):
        (before, _), (now, where) = old[slot], new[slot]
        if now > before and not math.isclose(before, now, rel_tol=MOVED_RTOL, abs_tol=0.0):
            loosened.append({**where, "old": before, "new": now})
    return loosened


def threshold_check_skipped(new_records: list[dict], old_env: dict, new_env: dict) -> str | None:
    """Why thresholds cannot be compared between these runs, or None when they can."""
    if not _same_device(old_env, new_env):
        return (f"the runs differ in device or backend ({old_env.get('device')}/{old_env.get('mlx_backend')} before, "
                f"{new_env.get('device')}/{new_env.get('mlx_backend')} now): thresholds may be chosen per device")
    if not of_kind(new_records, "test"):
        return ("the new run has no test records (reports.plugin not loaded): "
                "Hypothesis-drawn cases cannot be told apart")
    return None


def _names(entries: list[dict], fields: tuple[str, ...]) -> str:
    text = ", ".join(" ".join(str(e[f]) for f in fields if e.get(f) is not None) for e in entries[:LISTED])
    return text + (" ..." if len(entries) > LISTED else "")


def compare(old_records: list[dict], new_records: list[dict], old_environment: dict | None = None, *,
            allow_removed: bool = False) -> dict[str, Any]:
    """The comparison of two runs' records (``allow_removed``: gone checks are listed but do not fail it)."""
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

    old_env, new_env = _environment(old_records, old_environment), _environment(new_records)
    gone, not_comparable = lost_checks(old_records, new_records, old_env, new_env)
    thresholds_skipped = threshold_check_skipped(new_records, old_env, new_env)
    loosened = [] if thresholds_skipped else loosened_thresholds(old_records, new_records)

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
        reasons.append(f"{len(gate_failures)} gate(s) newly fail: " + _names(gate_failures, ("test_id", "gate")))
    if test_failures:
        reasons.append(f"{len(test_failures)} test(s) newly fail")
    if not allow_removed:
        for kind, fields in (("gate", ("test_id", "gate", "kernel", "dtype", "case")), ("test", ("test_id",))):
            lost = [g for g in gone if g["kind"] == kind]
            if lost:
                reasons.append(f"{len(lost)} {kind}(s) gone: {_names(lost, fields)}")
    if loosened:
        reasons.append(f"{len(loosened)} threshold(s) loosened: " + ", ".join(
            f"{e['test_id']} {e['gate']} {e['field']} {e['old']:g} -> {e['new']:g}" for e in loosened[:LISTED])
            + (" ..." if len(loosened) > LISTED else ""))
    if regressions:
        reasons.append(f"{len(regressions)} benchmark(s) regressed: "
                       + ", ".join(str(c["benchmark"]) for c in regressions[:LISTED]))
    return {
        "old": {"commit": (old_env.get("git") or {}).get("commit"), "dirty": (old_env.get("git") or {}).get("dirty"),
                "date": old_env.get("date"), "device": old_env.get("device"), "profile": old_env.get("profile")},
        "matched": len(set(old_gates) & set(new_gates)),
        "added": len(set(new_gates) - set(old_gates)),
        "removed": len(set(old_gates) - set(new_gates)),
        "new_failures": new_failures,
        "fixed": fixed,
        "moved": moved,
        "gone": gone,
        "not_comparable": not_comparable,
        "allow_removed": allow_removed,
        "loosened": loosened,
        "thresholds_skipped": thresholds_skipped,
        "perf": perf,
        "perf_regressions": len(regressions),
        "failed": bool(reasons),
        "reasons": reasons,
    }
