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
KINDS = ("environment", "selection", "canary", "gate", "finding", "test", "property", "perf", "mutant",
         "mutation_run")
GENERATED = ("body", "python")  # a generated mutant's "generated" (mutants/generated/score.py)
# The fields a verdict or a count is read from: a value of another type would be read as something else (the
# string "false" is truthy), so a record holding one is refused, not counted.
_BOOLEAN_FIELDS = {"gate": ("passed",), "perf": ("regressed",), "mutant": ("killed",)}
# Fields the summary, the comparison and the report use as text (dict keys, set members, names) or as lists: a
# value of another type (a list for a test id, a number for the args) failed deep inside them with an internal
# message, so a record holding one is refused naming the field. (case is read through str(): any value will do.)
_TEXT_FIELDS = {"gate": ("test_id", "kernel", "arm", "dtype"), "test": ("nodeid", "module", "outcome", "skip_reason"),
                "property": ("nodeid", "module", "outcome"), "perf": ("benchmark", "kernel", "arm", "figure"),
                "finding": ("test_id",), "canary": ("device_name",), "mutant": ("name", "status"),
                "selection": ("keyword", "markexpr")}
_LIST_FIELDS = {"gate": ("shape",), "perf": ("shape", "kernel_names"), "selection": ("args", "deselected")}
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


def judged_median_s(record: dict) -> float | None:
    """The median of the figure a perf record's verdict judged (``figure``: ``kernel`` -> ``kernel_median_s``,
    else ``median_s``, the call time): what its ``baseline_median_s`` is the baseline's value of."""
    return number(record.get("kernel_median_s" if record.get("figure") == "kernel" else "median_s"))


def check_record(record: Any, where: str) -> dict:
    """``record`` if it is one the summary can count, else ValueError naming ``where`` (a file:line or an index):
    a JSON object of a known ``kind`` (an unknown kind would be dropped from every count, a failure with it),
    whose gate records name their gate and whose verdict fields are true or false."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not a record (a JSON object), got {type(record).__name__}")
    kind = record.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: a record's kind must be one of {KINDS}, got {kind!r}")
    if kind == "gate" and not isinstance(record.get("gate"), str):
        raise ValueError(f"{where}: a gate record must name its gate, got {record.get('gate')!r}")
    for name in _BOOLEAN_FIELDS.get(kind, ()):
        if name in record and not isinstance(record[name], bool):
            raise ValueError(f"{where}: {kind} record field {name!r} must be true or false, got {record[name]!r}")
    # A generated mutant's kind of code decides where it is scored; a run record's strata are the populations.
    if kind == "mutant" and "generated" in record and record["generated"] not in GENERATED:
        raise ValueError(f"{where}: a mutant record's generated must be one of {GENERATED}, "
                         f"got {record['generated']!r}")
    if kind == "mutation_run" and not (isinstance(record.get("run"), str) and isinstance(record.get("strata"), dict)):
        raise ValueError(f"{where}: a mutation_run record needs its run (a string) and strata (an object), got "
                         f"{record.get('run')!r}, {record.get('strata')!r}")
    _check_field_types(record, kind, where)
    return record


def _check_field_types(record: dict, kind: str, where: str) -> None:
    """ValueError naming ``where`` and the field unless the fields readers use have their types (null allowed)."""
    # A record's schema names its layout: one of another version would be read as this one's fields. (A record
    # without one is read as version 1: records built in memory get theirs only from append_record.)
    schema = record.get("schema", RECORD_SCHEMA)
    if isinstance(schema, bool) or schema != RECORD_SCHEMA:
        raise ValueError(f"{where}: record schema {schema!r} is not {RECORD_SCHEMA}, the version this reader knows")

    def typed(field: str, value, kinds: type | tuple, want: str, *, null: bool = True):
        """``value`` (the record's ``field``, a dotted path below it) when of ``kinds`` (or None where ``null``)."""
        if (value is None and not null) or (value is not None and not isinstance(value, kinds)):
            text = repr(value)
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise ValueError(f"{where}: {kind} record field {field!r} must be {want}, got {shown}")
        return value

    for name in _TEXT_FIELDS.get(kind, ()):
        typed(name, record.get(name), str, "a string or null")
    for name in _LIST_FIELDS.get(kind, ()):
        typed(name, record.get(name), list, "a list or null")
    if kind == "selection":
        for name in ("args", "deselected"):
            if any(not isinstance(a, str) for a in record.get(name) or ()):
                typed(name, record[name], (), "a list of strings")
    if kind == "perf" and any(not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str))
                              for pair in record.get("kernel_names") or ()):
        typed("kernel_names", record["kernel_names"], (), "a list of [name, count] pairs")
    if kind == "environment":  # the objects git, arms (name -> status) and dependencies, as their readers take them
        git = typed("git", record.get("git"), dict, 'an object {"commit", "dirty"} or null') or {}
        typed("git.commit", git.get("commit"), str, "a string or null")
        typed("git.dirty", git.get("dirty"), bool, "true, false or null")
        arms = typed("arms", record.get("arms"), dict, 'an object {name: {"available", "reason"}} or null') or {}
        for name, status in arms.items():
            typed(f"arms.{name}", status, dict, 'an object {"available", "reason"}', null=False)
            if "available" in status:  # the string "false" would read as ran
                typed(f"arms.{name}.available", status["available"], bool, "true or false", null=False)
        deps = typed("dependencies", record.get("dependencies"), dict, 'an object {"lock", "differs"} or null') or {}
        typed("dependencies.differs", deps.get("differs"), list, "a list or null")


def of_kind(records: Iterable[dict], kind: str) -> list[dict]:
    return [r for r in records if r.get("kind") == kind]


def counted_gates(records: Iterable[dict]) -> list[dict]:
    """The gate records that count: all but a falsified property's superseded failures.

    A gate inside a Hypothesis test writes a record per example it runs, the failing
    examples Hypothesis tried while searching and shrinking included (``example:
    "search"``), then one per gate call of the minimal example it reports
    (``"final"``). Where a test has such a final failure, its earlier failing records
    are steps toward it, not more failures: they stay in the records (evidence) but
    are not counted. Without a final failure (an interrupted or flaky run) they count.
    """
    gates = of_kind(records, "gate")
    falsified = falsified_tests(gates)
    return [g for g in gates if not is_superseded(g, falsified)]


def falsified_tests(gates: list[dict]) -> set:
    """Test ids with a failing gate record of the example Hypothesis reports (``example: "final"``)."""
    return {g.get("test_id") for g in gates if g.get("example") == "final" and not g.get("passed")}


def is_superseded(gate: dict, falsified: set) -> bool:
    """A failing record of an example Hypothesis tried before the minimal one of a test in ``falsified``."""
    return gate.get("example") == "search" and not gate.get("passed") and gate.get("test_id") in falsified


def totals(records: list[dict]) -> dict[str, Any]:
    """Counts per section; a section with no records is None (the report says it did not run)."""
    gates = counted_gates(records)
    superseded = len(of_kind(records, "gate")) - len(gates)
    tests = of_kind(records, "test")
    props = of_kind(records, "property")
    perf = of_kind(records, "perf")
    catalog = catalog_mutants(records)  # generated mutants are scored apart: mutation_scores
    left_out = sum(m.get("status") == "left_out" for m in catalog)
    mutants = [m for m in catalog if m.get("status") != "left_out"]  # the ones that ran
    outcomes = Counter(t.get("outcome") for t in tests)
    killed = sum(bool(m.get("killed")) for m in mutants)
    statuses = Counter(m.get("status") for m in mutants)
    return {
        "gates": {"total": len(gates), "passed": sum(bool(g.get("passed")) for g in gates),
                  "failed": sum(not g.get("passed") for g in gates), "superseded": superseded} if gates else None,
        "tests": {"total": len(tests), **{o: outcomes.get(o, 0) for o in
                                          ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}}
        if tests else None,
        "properties": {"total": len(props), "failed": sum(p.get("outcome") in FAILED_OUTCOMES for p in props),
                       "passed": sum(p.get("outcome") == "passed" for p in props),
                       "examples": sum(_count(p.get("examples")) for p in props)} if props else None,
        "perf": {"total": len(perf), "regressed": sum(bool(p.get("regressed")) for p in perf)} if perf else None,
        # survived: the tests passed with the mutant in; stale (its code moved) and error (nothing ran, or its
        # killers fail unmutated) are neither kills nor survivals, counted apart
        "mutants": {"total": len(mutants), "killed": killed,
                    "survived": sum(not m.get("killed") and m.get("status") in (None, "survived") for m in mutants),
                    "stale": statuses.get("stale", 0), "error": statuses.get("error", 0),
                    "score": killed / len(mutants), "left_out": left_out} if mutants else None,
        "findings": len(of_kind(records, "finding")),
    }


def catalog_mutants(records: Iterable[dict]) -> list[dict]:
    """The catalog's mutant records: all but the generated ones (a ``generated`` field)."""
    return [m for m in of_kind(records, "mutant") if "generated" not in m]


def mutation_scores(records: list[dict]) -> list[dict] | None:
    """The generated mutants' scores per run and target (``mutants.generated.score.score_rows``); None without
    generated mutant records ("not part of this run")."""
    if not any(r.get("kind") == "mutant" and "generated" in r for r in records):
        return None
    from mutants.generated.score import score_rows  # (imported only where there is something to score)

    return score_rows(records)


def _count(value: Any) -> int:
    """A count field (Hypothesis's examples): a whole number, else 0 (nan / inf written as strings count nothing)."""
    v = number(value)
    return int(v) if v is not None and math.isfinite(v) else 0


def verdict_reasons(records: list[dict], pytest_status: int | None, comparison: dict | None) -> list[str]:
    """Why the run fails; empty when it passes."""
    reasons = []
    if pytest_status is not None and pytest_status not in PYTEST_OK:
        reasons.append(f"pytest exited with status {pytest_status}")
    # A gate that fails inside a test marked xfail fails as that mark expects (pytest counts the test xfailed);
    # a strict xfail whose gates all pass is an xpass, which pytest itself fails.
    expected = {t.get("nodeid") for t in of_kind(records, "test") if t.get("outcome") == "xfailed"}
    failed_gates = [g for g in counted_gates(records) if not g.get("passed") and g.get("test_id") not in expected]
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
                     for r in counted_gates(records))
    return [{"kernel": k, "gate": g, "verdict": v, "count": n} for (k, g, v), n in sorted(counts.items())]


def build_results(records: list[dict], pytest_status: int | None = None,
                  comparison: dict | None = None) -> dict[str, Any]:
    if pytest_status is not None and not isinstance(pytest_status, int):
        raise TypeError(f"pytest_status must be an int or None, got {pytest_status!r}")
    records = list(records)
    if not records:
        raise ValueError("no records (did the pytest run start?)")
    for i, r in enumerate(records):
        check_record(r, f"records[{i}]")
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
        "mutation_scores": mutation_scores(records),
        "records": records,
        "comparison": comparison,
    }


def upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """A results document in the current schema (older ones are rebuilt from their records)."""
    if not isinstance(results, dict) or not isinstance(results.get("records"), list):
        raise ValueError("not a results document: expected an object with a 'records' list")
    # Every schema is rebuilt from its records (schema 1, the first summary, had no verdict): the verdict, totals and
    # counts are derived fields, and a document is only trusted as far as its records are valid.
    comparison = results.get("comparison")
    if comparison is not None and not isinstance(comparison, dict):
        raise ValueError(f"comparison must be an object or null, got {type(comparison).__name__}")
    status = results.get("pytest_status")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
        raise ValueError(f"pytest_status must be an int or null, got {status!r}")
    return build_results(results["records"], pytest_status=status, comparison=comparison)


def load_results(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such results file") from None
    except OSError as exc:  # a folder, no permission
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    try:
        return upgrade(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def jsonable(value: Any) -> Any:
    """JSON has no nan/inf: write them as the strings the recorder uses ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(float(value))  # "nan", "inf", "-inf" (a NumPy float's repr is "np.float64(nan)")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def dump_results(results: dict[str, Any], path: Path | str) -> None:
    Path(path).write_text(json.dumps(jsonable(results), indent=1, sort_keys=True, allow_nan=False) + "\n")
