"""Render results.json as one self-contained HTML report.

    python -m reports.render reports/out/results.json -o reports/out/index.html

``render(results)`` is a pure function of the results document
(``reports/results.py``, layout in ``reports/SCHEMA.md``): same results, same
HTML. The page has no external assets: CSS, the sort/filter script and the
plots (inline SVG from matplotlib) are all inside it, and it requests nothing
from the network. Sections, in order: verdict, comparison (when made),
environment, gates (failed rows first, sortable, filterable), per-kernel plots,
tests (per module, skipped with reasons, failures), properties (Hypothesis
statistics, failing examples with replay commands), perf, mutants, the generated mutants' scores, findings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from reports import plots
from reports.compare import usage
from reports.results import (FAILED_OUTCOMES, catalog_mutants, falsified_tests, is_superseded, judged_median_s,
                             load_results, number, of_kind, upgrade)

TEMPLATE = "template.html.j2"
# The comparison lists at most this many moved measurements (largest moves first),
# and the failed-gates table this many failures; results.json keeps them all, and
# the full gate table (built by the page's script from embedded data) has every record.
MOVED_ROWS = 200
FAILED_ROWS = 500


def fmt(value: Any) -> str:
    """A measurement for display: integers as they are, floats to 4 significant digits."""
    v = number(value)
    if v is None:
        return "" if value is None else str(value)
    if isinstance(value, int) or (v.is_integer() and abs(v) < 1e15):
        return str(int(v))
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return f"{v:.4g}"


def sort_value(value: float | None) -> str:
    """A data-v attribute JavaScript's parseFloat understands (Infinity, not inf)."""
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


def shape_text(shape: Any) -> str:
    if isinstance(shape, (list, tuple)):
        return "×".join(str(d) for d in shape) if shape else "scalar"
    return "" if shape is None else str(shape)


def margin(record: dict) -> tuple[str, str]:
    """(text, sort value): threshold − measured, and the share of the threshold left."""
    measured, threshold = number(record.get("measured")), number(record.get("threshold"))
    headroom = 1.0 - usage(record)
    if measured is None or threshold is None or math.isnan(measured) or math.isnan(threshold):
        return "n/a", sort_value(headroom)
    if not math.isfinite(measured):
        return "-inf", sort_value(-math.inf)
    diff = threshold - measured
    text = fmt(diff)
    if threshold > 0 and math.isfinite(threshold) and math.isfinite(headroom):  # (a tiny threshold: no percent)
        # Percent rounded half up, as the page's script rounds it (Math.round).
        percent = math.floor(100.0 * abs(headroom) + 0.5)
        text += f" ({percent}% left)" if diff >= 0 else f" ({percent}% over)"
    return text, sort_value(headroom)


def ordered_gates(gates: list[dict]) -> list[dict]:
    """Failed records first, then by kernel, test id, gate and case."""
    return sorted(gates, key=lambda r: (bool(r.get("passed")), str(r.get("kernel")), str(r.get("test_id")),
                                        str(r.get("gate")), str(r.get("case"))))


def gate_row(r: dict, ref: int) -> dict:
    """One record as display strings (the failed-gates table)."""
    margin_text, _ = margin(r)
    worst = r.get("worst") or None
    return {
        "kernel": r.get("kernel") or "", "arm": r.get("arm") or "", "dtype": r.get("dtype") or "",
        "shape": shape_text(r.get("shape")), "case": r.get("case") or "", "gate": r.get("gate"),
        "measured": fmt(r.get("measured")), "threshold": fmt(r.get("threshold")), "margin": margin_text,
        "test_id": r.get("test_id") or "", "ref": ref, "derivation": str(r.get("derivation") or ""),
        "detail": r.get("detail") or "",
        "worst": (f"index {_index_text(worst.get('index'))}: got {fmt(worst.get('actual'))}, "
                  f"expected {fmt(worst.get('expected'))}") if isinstance(worst, dict) else "",
    }


def _index_text(index: Any) -> str:
    """A worst element's index as written: a tuple for a list of coordinates, else the value itself."""
    return str(tuple(index)) if isinstance(index, (list, tuple)) else str(index if index is not None else ())


def _compact(value: Any) -> float | int | str | None:
    """A measurement for the page's data: 6 significant digits (the table shows 4); nan/inf as strings."""
    v = number(value)
    if v is None:
        return None
    if not math.isfinite(v):
        return fmt(v)
    if v.is_integer() and abs(v) < 2**53:
        return int(v)
    return float(f"{v:.6g}")


GATE_COLUMNS = ("passed", "kernel", "arm", "dtype", "shape", "case", "gate", "measured", "threshold", "headroom",
                "test_id", "why", "numel")


def gate_data(gates: list[dict]) -> tuple[dict, list[dict], list[str]]:
    """The gate table's data for the page's script, the failed rows, and the threshold derivations.

    The failed rows leave out a falsified property's superseded records (the examples
    Hypothesis tried before the minimal one: ``results.counted_gates``); the table has them.

    Every record is one row of ``GATE_COLUMNS``; strings are indices into one
    shared string table and derivations indices into the numbered list, so a
    row costs tens of bytes, not the hundreds an HTML row does (a thorough run
    records tens of thousands of gates).
    """
    strings: dict[str, int] = {}
    derivations: dict[str, int] = {}

    def intern(value: Any) -> int:
        return strings.setdefault("" if value is None else str(value), len(strings))

    rows, failed = [], []
    falsified = falsified_tests(gates)
    for r in ordered_gates(gates):
        ref = derivations.setdefault(str(r.get("derivation") or ""), len(derivations) + 1)
        headroom = 1.0 - usage(r)
        rows.append([int(bool(r.get("passed"))), intern(r.get("kernel")), intern(r.get("arm")),
                     intern(r.get("dtype")), intern(shape_text(r.get("shape"))), intern(r.get("case")),
                     intern(r.get("gate")), _compact(r.get("measured")), _compact(r.get("threshold")),
                     _compact(headroom),
                     intern(r.get("test_id")), ref, plots.numel(r.get("shape"))])
        if not r.get("passed") and not is_superseded(r, falsified):
            failed.append(gate_row(r, ref))
    data = {"columns": list(GATE_COLUMNS), "strings": list(strings), "rows": rows}
    return data, failed, list(derivations)


def script_json(data: Any) -> Markup:
    """JSON safe inside <script type="application/json">: no "<", ">" or "&" survive as such."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def kernel_plots(gates: list[dict]) -> list[dict]:
    by_kernel: dict[str, list[dict]] = defaultdict(list)
    for r in gates:
        by_kernel[r.get("kernel") or "(no kernel)"].append(r)
    return [{"kernel": k, "svg": Markup(plots.kernel_plot(k, rs)),
             "failed": sum(not r.get("passed") for r in rs), "total": len(rs)}
            for k, rs in sorted(by_kernel.items())]


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def test_sections(tests: list[dict]) -> dict[str, Any]:
    modules: dict[str, Counter] = defaultdict(Counter)
    durations: dict[str, float] = defaultdict(float)
    for t in tests:
        module = t.get("module") or module_of(str(t.get("nodeid")))
        modules[module][t.get("outcome")] += 1
        durations[module] += number(t.get("duration")) or 0.0
    skipped: dict[str, list[str]] = defaultdict(list)
    for t in tests:
        if t.get("outcome") == "skipped":
            skipped[t.get("skip_reason") or "(no reason given)"].append(str(t.get("nodeid")))
    return {
        "modules": [{"module": m, "counts": c, "seconds": durations[m],
                     "failed": c.get("failed", 0) + c.get("error", 0)} for m, c in sorted(modules.items())],
        "skipped": sorted(({"reason": reason, "count": len(ids), "nodeids": sorted(ids)} for reason, ids in
                           skipped.items()), key=lambda s: (-s["count"], s["reason"])),
        "failed": [t for t in tests if t.get("outcome") in FAILED_OUTCOMES],
    }


def dependencies_text(deps) -> str:
    """The environment record's ``dependencies``: the lock it was installed from, or how it differs from it."""
    if not isinstance(deps, dict) or not deps.get("lock"):
        return "no lock for this platform (locks/)"
    differs = [str(line) for line in deps.get("differs") or []]
    if not differs:
        return f"{deps['lock']}, exactly (the tested versions)"
    return f"{len(differs)} differ from {deps['lock']} (locked -> installed): " + "; ".join(differs)


def environment_rows(env: dict, results: dict) -> list[tuple[str, str]]:
    git = env.get("git") or {}
    commit = git.get("commit")
    dirty = git.get("dirty")
    versions = ", ".join(f"{name} {env[name]}" for name in ("mlx", "numpy", "torch", "hypothesis", "scipy", "python")
                         if env.get(name))
    return [
        ("OS", env.get("os") or env.get("platform") or "unknown"),
        ("platform", env.get("platform") or ""),
        ("device", env.get("device") or "unknown"),
        ("MLX backend", env.get("mlx_backend") or "unknown"),
        ("versions", versions),
        ("dependencies", dependencies_text(env.get("dependencies"))),
        ("git commit", (commit or "unknown") + ("" if dirty is None else " (dirty)" if dirty else " (clean)")),
        ("date", env.get("date") or ""),
        ("Hypothesis profile", env.get("profile") or ""),
        ("pytest exit status", "" if results.get("pytest_status") is None else str(results["pytest_status"])),
    ]


def metal_arm_text(gates: list[dict], arms: dict) -> str:
    """What checked the Metal arm: the Linux front-end check (``impl/kernels/test_metal_frontend.py``: its
    ``equal`` gate over one flag per unit, kernel ``metal_frontend``) and whether a Metal device ran the gates."""
    checks = [g for g in gates if g.get("kernel") == "metal_frontend" and g.get("gate") == "equal"]
    if checks:
        units = sum(math.prod(int(n) for n in g.get("shape") or [0]) for g in checks)
        failing = sum(int(number(g.get("measured")) or 0) for g in checks)
        front = (f"front-end check (clang against the Metal stand-in): {units} units type-checked, "
                 + (f"{failing} with errors" if failing else "all clean"))
    else:
        front = "front-end check: not run"
    metal = arms.get("metal") or {}
    device = ("a Metal device ran the metal-arm gates" if metal.get("available")
              else f"no Metal device ran the gates ({metal.get('reason') or 'metal arm not recorded'})")
    return f"{front}; {device}"


def canary_rows(canaries: list[dict]) -> list[dict]:
    """The Metal canary's records (one per process that ran it) grouped by outcome; failures first."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for c in canaries:
        groups[(str(c.get("status")), str(c.get("message")), c.get("device_name"))].append(str(c.get("where") or "?"))
    order = {"failed": 0, "passed": 1, "unavailable": 2, "not_run": 3}
    return [{"status": status, "message": message, "device": device, "where": sorted(set(where)),
             "ok": status == "passed", "bad": status == "failed"}
            for (status, message, device), where in sorted(groups.items(), key=lambda g: (order.get(g[0][0], 9), g[0]))]


def timing_text(p: dict) -> str:
    """How a perf record was timed, for a reader: protocol, calls per round and their input sets
    (``perf.run``: ``--protocol``, ``--batch``, ``--inputs``); empty where the record does not say."""
    if p.get("batch") is None:
        return ""
    text = f"{p.get('protocol') or 'eval'}, {p['batch']} call{'s' if p['batch'] != 1 else ''} per round"
    if p.get("inputs") == "distinct":
        sets = p.get("input_sets")
        text += f", {sets} input sets" if sets is not None else ", distinct inputs"
    elif p.get("inputs") == "shared" and p["batch"] != 1:
        text += ", one input set"
    return text


def kernel_text(p: dict) -> tuple[str, str]:
    """(cell, tooltip) of a perf record's kernel time (``perf.kernel_time``): the median in ms, else
    ``not measured`` with why (``kernel_status``, ``kernel_reason``); the tooltip lists the kernels per call."""
    median = number(p.get("kernel_median_s"))
    if median is None:
        status, reason = p.get("kernel_status"), p.get("kernel_reason")
        why = {"off": "not asked for", "unavailable": "unavailable", "error": "failed"}.get(status, "not recorded")
        return "not measured", why + (f": {reason}" if reason else "")
    names = "; ".join(f"{name} x{count}" for name, count in p.get("kernel_names") or [])
    return fmt(1e3 * median), (f"{p.get('kernels_per_call')} kernels per call, {p.get('kernel_calls')} calls, "
                               f"{p.get('kernel_timer')}" + (f": {names}" if names else ""))


def perf_rows(perf: list[dict]) -> list[dict]:
    rows = []
    for p in sorted(perf, key=lambda p: (not p.get("regressed"), str(p.get("benchmark")))):
        base, median, judged = number(p.get("baseline_median_s")), number(p.get("median_s")), judged_median_s(p)
        kernel_ms, kernel_title = kernel_text(p)
        rows.append({**p, "label": plots.perf_label(p), "shape": shape_text(p.get("shape")),
                     "change": f"{100.0 * (judged / base - 1.0):+.1f}%" if base and judged is not None else "",
                     "kernel_ms": kernel_ms, "kernel_title": kernel_title,
                     "kernel_gbps": fmt(p.get("kernel_gbps")) if number(p.get("kernel_gbps")) is not None else "",
                     "judged": (p.get("figure") or "call") if base is not None else "",
                     "median_ms": fmt(1e3 * median) if median is not None else "",
                     "iqr_ms": fmt(1e3 * number(p.get("iqr_s"))) if number(p.get("iqr_s")) is not None else "",
                     "baseline_ms": fmt(1e3 * base) if base is not None else "",
                     "gbps": fmt(p.get("gbps")), "pct": fmt(p.get("pct_copy_bw")),
                     "p_value": fmt(p.get("p_value")), "effect": fmt(p.get("effect")), "timing": timing_text(p)})
    return rows


def finding_groups(findings: list[dict]) -> list[dict]:
    """Findings grouped by title (one fact, established by one or more tests), each with its evidence."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        groups[str(f.get("title"))].append(f)
    return [{"title": title, "kernels": sorted({str(f.get("kernel")) for f in items if f.get("kernel")}),
             "tests": [{"test_id": f.get("test_id") or "", "arm": f.get("arm"),
                        "evidence": evidence_rows(f.get("evidence"))} for f in items]}
            for title, items in groups.items()]


def evidence_rows(evidence: Any) -> list[tuple[str, str]]:
    """Top-level evidence fields as (name, compact JSON) rows."""
    if not isinstance(evidence, dict):
        return [("evidence", json.dumps(evidence, sort_keys=True, default=str))]
    return [(str(k), v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
            for k, v in sorted(evidence.items())]


def build_context(results: dict) -> dict[str, Any]:
    results = upgrade(results)
    records = results["records"]
    env = results.get("environment") or {}
    gates = of_kind(records, "gate")
    data, failed_rows, derivations = gate_data(gates)
    tests = of_kind(records, "test")
    props = sorted(of_kind(records, "property"),
                   key=lambda p: (p.get("outcome") not in FAILED_OUTCOMES, str(p.get("nodeid"))))
    perf = of_kind(records, "perf")
    mutants = sorted(catalog_mutants(records), key=lambda m: (m.get("status") == "left_out", bool(m.get("killed")),
                                                                str(m.get("name"))))
    arms = env.get("arms") or {}
    comparison = results.get("comparison")
    return {
        "results": results,
        "verdict": results["verdict"],
        "reasons": results.get("reasons") or [],
        "totals": results["totals"],
        "env_rows": environment_rows(env, results),
        "canaries": canary_rows(of_kind(records, "canary")),
        "metal_arm": metal_arm_text(gates, arms),
        # Sorted: results.json is written with sorted keys, and the page must not depend on dict order.
        "arms_ran": [(n, s.get("reason", "")) for n, s in sorted(arms.items()) if s.get("available")],
        "arms_skipped": [(n, s.get("reason", "")) for n, s in sorted(arms.items()) if not s.get("available")],
        "gate_count": len(gates),
        "gate_json": script_json(data),
        "failed_rows": failed_rows[:FAILED_ROWS],
        "failed_count": len(failed_rows),
        "failed_rows_limit": FAILED_ROWS,
        "derivations": derivations,
        "plots": kernel_plots(gates) if gates else [],
        "tests": test_sections(tests) if tests else None,
        "properties": props,
        "perf": perf_rows(perf),
        "perf_svg": Markup(plots.perf_plot(perf)) if perf else None,
        "mutants": mutants,
        "mutation_scores": mutation_score_rows(results.get("mutation_scores") or []),
        "findings": finding_groups(of_kind(records, "finding")),
        "comparison": comparison,
        "moved_rows": (comparison or {}).get("moved", [])[:MOVED_ROWS],
        "moved_rows_limit": MOVED_ROWS,
    }


def mutation_score_rows(rows: list[dict]) -> list[dict]:
    """The generated mutants' score rows (results.json ``mutation_scores``) as display strings: a target's
    killed / non-equivalent that ran, score, 95% interval (a sampled run's), sample of population, counted apart."""
    from mutants.generated.score import interval_text  # (as results.py: imported only where there are scores)

    shown = []
    for row in rows:
        population = row.get("population")
        shown.append({
            **row,
            "score_text": "–" if row.get("score") is None else f"{100.0 * row['score']:.1f}%",
            "interval_text": interval_text(row, between=" – ", none="–"),
            "sample_text": "?" if population is None else f"{row.get('sample')} of {population}"
                           + (f" ({row['equivalent']} equivalent skipped)" if row.get("equivalent") else ""),
            "apart_text": ", ".join(f"{row[k]} {k.replace('_', ' ')}" for k in ("error", "stale", "left_out")
                                    if row.get(k)),
            "pooled": row.get("target") == "(all)",
        })
    return shown


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["shape"] = shape_text
    # number(): a results.json read back holds nan/inf as the strings "nan", "inf" (results.jsonable)
    env.filters["pct"] = lambda v: "" if number(v) is None else f"{100.0 * number(v):.1f}%"
    env.filters["change"] = lambda v: "" if number(v) is None else f"{100.0 * number(v):+.1f}%"
    return env


def render(results: dict) -> str:
    """The report for ``results`` (a results document) as one HTML string."""
    if not isinstance(results, dict):
        raise TypeError(f"results must be a results document (dict), got {type(results).__name__}")
    return _environment().get_template(TEMPLATE).render(**build_context(results))


def render_file(results_path: Path | str, html_path: Path | str) -> Path:
    """Render ``results_path`` to ``html_path``: rendered first, then written beside it and moved into place, so
    the path holds either the old report or the whole new one (ValueError naming the path when it cannot)."""
    html_path = Path(html_path)
    text = render(load_results(results_path))
    if not html_path.parent.is_dir():
        raise ValueError(f"{html_path}: its folder {html_path.parent} does not exist")
    temp = html_path.with_name(f".{html_path.name}.tmp")
    try:
        # backslashreplace: a lone surrogate (valid JSON, "\udc80") in a record's text has no UTF-8 encoding; the page
        # shows it escaped, as \udc80, where strict encoding failed and left an empty temporary file behind.
        temp.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(temp, html_path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise ValueError(f"{html_path}: cannot write the report ({exc.strerror or exc})") from None
    except BaseException:  # whatever failed (an interrupt too), no half-written temporary file stays beside it
        temp.unlink(missing_ok=True)
        raise
    return html_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render results.json as one self-contained HTML report.")
    parser.add_argument("results", type=Path, help="results.json written by reports.summary")
    parser.add_argument("-o", "--output", type=Path, default=None, help="HTML file (default: index.html beside it)")
    args = parser.parse_args(argv)
    try:
        path = render_file(args.results, args.output or args.results.with_name("index.html"))
    except ValueError as exc:
        print(f"reports.render: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
