"""results.json: the machine-readable outcome of one gate run (layout in reports/SCHEMA.md).

``build_results(records, ...)`` turns the records of ``results.jsonl`` into the
results document: schema version, verdict with its reasons, the environment,
per-section totals, per-kernel gate counts, every record, and the comparison
with an earlier run when one was made. ``load_results(path)`` reads a
results.json back, rebuilding the derived fields of an older schema from its
records, so comparison and rendering accept results of earlier runs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from reports.recorder import SCHEMA_VERSION as RECORD_SCHEMA

RESULTS_SCHEMA = 2
KINDS = ("environment", "gate", "finding", "test", "property", "perf", "mutant")
# pytest exit codes that mean the run itself is fine (0: all passed). 5 (nothing
# collected) is a failure: a gate that checked nothing must not pass.
PYTEST_OK = (0,)
FAILED_OUTCOMES = ("failed", "error")


def number(value: Any) -> float | None:
    """A record's numeric field as a float: the recorder writes nan/inf as strings."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def of_kind(records: Iterable[dict], kind: str) -> list[dict]:
    return [r for r in records if r.get("kind") == kind]


def totals(records: list[dict]) -> dict[str, Any]:
    """Counts per section; a section with no records is None ("not run in this session")."""
    gates = of_kind(records, "gate")
    tests = of_kind(records, "test")
    props = of_kind(records, "property")
    perf = of_kind(records, "perf")
    left_out = sum(m.get("status") == "left_out" for m in of_kind(records, "mutant"))
    mutants = [m for m in of_kind(records, "mutant") if m.get("status") != "left_out"]  # the ones that ran
    outcomes = Counter(t.get("outcome") for t in tests)
    killed = sum(bool(m.get("killed")) for m in mutants)
    return {
        "gates": {"total": len(gates), "passed": sum(bool(g.get("passed")) for g in gates),
                  "failed": sum(not g.get("passed") for g in gates)} if gates else None,
        "tests": {"total": len(tests), **{o: outcomes.get(o, 0) for o in
                                          ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}}
        if tests else None,
        "properties": {"total": len(props), "failed": sum(p.get("outcome") in FAILED_OUTCOMES for p in props),
                       "passed": sum(p.get("outcome") == "passed" for p in props),
                       "examples": sum(int(p.get("examples") or 0) for p in props)} if props else None,
        "perf": {"total": len(perf), "regressed": sum(bool(p.get("regressed")) for p in perf)} if perf else None,
        "mutants": {"total": len(mutants), "killed": killed, "survived": len(mutants) - killed,
                    "score": killed / len(mutants), "left_out": left_out} if mutants else None,
        "findings": len(of_kind(records, "finding")),
    }


def verdict_reasons(records: list[dict], pytest_status: int | None, comparison: dict | None) -> list[str]:
    """Why the run fails; empty when it passes."""
    reasons = []
    if pytest_status is not None and pytest_status not in PYTEST_OK:
        reasons.append(f"pytest exited with status {pytest_status}")
    failed_gates = [g for g in of_kind(records, "gate") if not g.get("passed")]
    if failed_gates:
        reasons.append(f"{len(failed_gates)} gate record(s) failed")
    failed_tests = [t for t in of_kind(records, "test") if t.get("outcome") in FAILED_OUTCOMES]
    if failed_tests:
        reasons.append(f"{len(failed_tests)} test(s) failed")
    regressed = [p for p in of_kind(records, "perf") if p.get("regressed")]
    if regressed:
        reasons.append(f"{len(regressed)} benchmark(s) regressed against their baseline")
    if comparison and comparison.get("failed"):
        reasons.extend(f"comparison: {r}" for r in comparison.get("reasons", []))
    return reasons


def by_kernel_gate(records: list[dict]) -> list[dict]:
    counts = Counter((r.get("kernel") or "-", r.get("gate"), "pass" if r.get("passed") else "FAIL")
                     for r in of_kind(records, "gate"))
    return [{"kernel": k, "gate": g, "verdict": v, "count": n} for (k, g, v), n in sorted(counts.items())]


def build_results(records: list[dict], pytest_status: int | None = None,
                  comparison: dict | None = None) -> dict[str, Any]:
    if pytest_status is not None and not isinstance(pytest_status, int):
        raise TypeError(f"pytest_status must be an int or None, got {pytest_status!r}")
    records = list(records)
    for i, r in enumerate(records):
        if not isinstance(r, dict) or "kind" not in r:
            raise ValueError(f"records[{i}] is not a record (a dict with a 'kind'): {r!r:.80}")
    reasons = verdict_reasons(records, pytest_status, comparison)
    return {
        "schema": RESULTS_SCHEMA,
        "record_schema": RECORD_SCHEMA,
        "verdict": "FAIL" if reasons else "PASS",
        "reasons": reasons,
        "pytest_status": pytest_status,
        "environment": next((r for r in records if r.get("kind") == "environment"), {}),
        "totals": totals(records),
        "by_kernel_gate": by_kernel_gate(records),
        "records": records,
        "comparison": comparison,
    }


def upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """A results document in the current schema (older ones are rebuilt from their records)."""
    if not isinstance(results, dict) or not isinstance(results.get("records"), list):
        raise ValueError("not a results document: expected an object with a 'records' list")
    if results.get("schema") == RESULTS_SCHEMA:
        return results
    # Schema 1 (the first summary) had no verdict; pytest's status was not stored.
    return build_results(results["records"], pytest_status=results.get("pytest_status"),
                         comparison=results.get("comparison"))


def load_results(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such results file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    try:
        return upgrade(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def jsonable(value: Any) -> Any:
    """JSON has no nan/inf: write them as the strings the recorder uses ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def dump_results(results: dict[str, Any], path: Path | str) -> None:
    Path(path).write_text(json.dumps(jsonable(results), indent=1, sort_keys=True, allow_nan=False) + "\n")


def is_finite(value: Any) -> bool:
    v = number(value)
    return v is not None and math.isfinite(v)
