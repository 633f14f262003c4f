"""Summarize a gate run: results.jsonl -> results.json + index.html, a printed summary, the exit status.

    python -m reports.summary reports/out --pytest-status N [--compare OLD/results.json [--allow-removed]]

Reads the run's records (``OUT/results.jsonl``), builds the results document
(``reports/results.py``; layout in ``reports/SCHEMA.md``), compares it with an
earlier run's results.json when ``--compare`` is given, writes
``OUT/results.json`` and renders ``OUT/index.html`` from it
(``reports.render``). Exit status: 1 when the verdict is FAIL (pytest failed,
a gate or test failed, a benchmark regressed, or, with ``--compare``, a gate
newly fails, a check is gone or a threshold was loosened); 2 when the inputs are unusable; else 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports import render
from reports.compare import compare
from reports.recorder import read_records
from reports.results import build_results, counted_gates, dump_results, load_results, number

PRINTED = 20  # gone checks and loosened thresholds printed; results.json and the report list them all


def summarize(records: list[dict], pytest_status: int | None = None, compare_with: dict | None = None,
              allow_removed: bool = False) -> dict:
    """The results document for ``records``, compared with an earlier results document if given."""
    comparison = None
    if compare_with is not None:
        comparison = compare(compare_with["records"], records, compare_with.get("environment"),
                             allow_removed=allow_removed)
    return build_results(records, pytest_status=pytest_status, comparison=comparison)


def print_summary(results: dict, out: Path, html: Path | None, stream=None) -> None:
    def say(text: str = "") -> None:
        print(text, file=stream or sys.stdout)

    env = results["environment"]
    git = env.get("git") or {}
    say(f"\nmlxgate summary  device={env.get('device')} backend={env.get('mlx_backend')} mlx={env.get('mlx')} "
        f"profile={env.get('profile')} commit={(git.get('commit') or '?')[:12]}{'+dirty' if git.get('dirty') else ''}")
    for name, status in (env.get("arms") or {}).items():
        status = status if isinstance(status, dict) else {}
        say(f"  arm {str(name):6s} {'ran' if status.get('available') else 'skipped'}: {status.get('reason', '')}")
    width = max([28] + [len(str(row["kernel"])) for row in results["by_kernel_gate"]])
    if results["by_kernel_gate"]:
        say(f"  {'kernel':{width}s} {'gate':12s} {'verdict':7s} count")
    for row in results["by_kernel_gate"]:
        say(f"  {str(row['kernel']):{width}s} {str(row['gate']):12s} {row['verdict']:7s} {row['count']}")
    t = results["totals"]
    gates = t["gates"] or {"passed": 0, "failed": 0}
    parts = [f"gates: {gates['passed']} passed, {gates['failed']} failed"]
    if t["tests"]:
        parts.append(f"tests: {t['tests']['passed']} passed, {t['tests']['failed'] + t['tests']['error']} failed, "
                     f"{t['tests']['skipped']} skipped")
    if t["properties"]:
        parts.append(f"properties: {t['properties']['passed']}/{t['properties']['total']} passed "
                     f"({t['properties']['examples']} examples)")
    parts.append(f"perf: {t['perf']['regressed']} of {t['perf']['total']} regressed" if t["perf"] else "perf: not run")
    parts.append(f"mutants: {t['mutants']['killed']}/{t['mutants']['total']} killed"
                 + (f" ({t['mutants']['left_out']} left out: their arm is not here)" if t["mutants"].get("left_out")
                    else "") if t["mutants"] else "mutants: not run")
    parts.append(f"findings: {t['findings']}")
    say("  " + "; ".join(parts))
    for row in render.mutation_score_rows(results.get("mutation_scores") or []):
        # generated mutants, per target (the report's score table): killed / non-equivalent that ran, its interval
        survivors = len(row.get("survivors") or [])
        say(f"  generated {row['generated']} mutants {row['target']}: {row['killed']}/{row['ran']} killed "
            f"({row['score_text']}, 95% {row['interval_text']}; {row['sample_text']})"
            + (f", {row['apart_text']}" if row["apart_text"] else "")
            + (f"; {survivors} survivor(s), diffs in the report" if survivors else ""))
    for r in counted_gates(results["records"]):
        if not r.get("passed"):
            say(f"  FAIL {r.get('test_id')}: {r.get('gate')} measured {r.get('measured')} > {r.get('threshold')}"
                f" ({r.get('detail')})")
    comparison = results.get("comparison")
    if comparison:
        old = comparison["old"]
        say(f"  compared with {(old.get('commit') or '?')[:12]} ({old.get('date') or 'date unknown'}): "
            f"{len(comparison['new_failures'])} new failure(s), {len(comparison.get('gone', []))} gone, "
            f"{len(comparison.get('loosened', []))} loosened, {len(comparison['fixed'])} fixed, "
            f"{len(comparison['moved'])} moved, {comparison['perf_regressions']} perf regression(s)")
        for m in comparison["moved"][:10]:
            say(f"    moved {m['test_id']} {m['gate']}: {m['old_measured']:.4g} -> {m['new_measured']:.4g}")
        for f in comparison["new_failures"]:
            say(f"    NEW FAILURE {f['kind']} {f['test_id']} {f.get('gate') or ''}")
        gone = comparison.get("gone", [])
        for g in gone[:PRINTED]:
            what = " ".join(str(g[k]) for k in ("gate", "kernel", "dtype", "case") if g.get(k) is not None)
            say(f"    GONE {g['kind']} {g['test_id']} {what}"
                + (" (allowed: --allow-removed)" if comparison.get("allow_removed") else ""))
        if len(gone) > PRINTED:
            say(f"    ... {len(gone) - PRINTED} more gone (results.json lists them all)")
        if comparison.get("not_comparable"):
            say(f"    {len(comparison['not_comparable'])} check(s) of the earlier run not comparable here "
                "(arm did not run, test not selected, or skipped on another device)")
        for e in comparison.get("loosened", [])[:PRINTED]:
            say(f"    LOOSENED {e['test_id']} {e['gate']} {e['field']}: {e['old']:g} -> {e['new']:g}")
        if comparison.get("thresholds_skipped"):
            say(f"    thresholds not compared: {comparison['thresholds_skipped']}")
        for p in comparison["perf"]:
            change = number(p.get("change"))
            if p.get("regressed") or (change is not None and abs(change) >= 0.05):
                say(f"    perf {p['benchmark']}: {'' if change is None else f'{change:+.1%}'}"
                    f"{' REGRESSED' if p.get('regressed') else ''}")
    status = results.get("pytest_status")
    say(f"  pytest exit status {status}; results in {out}/" + (f"; report {html}" if html else ""))
    say(f"  verdict: {results['verdict']}" + (f" ({'; '.join(results['reasons'])})" if results["reasons"] else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the reports/out directory of the run")
    parser.add_argument("--pytest-status", type=int, default=None, help="pytest's exit status")
    parser.add_argument("--compare", type=Path, default=None, metavar="OLD/results.json",
                        help="an earlier run's results.json: report moved gates, new failures, perf changes")
    parser.add_argument("--allow-removed", action="store_true",
                        help="with --compare: list gates and tests gone since the earlier run without failing "
                             "(tests deleted or renamed on purpose)")
    parser.add_argument("--no-html", action="store_true", help="write results.json only")
    args = parser.parse_args(argv)
    if args.allow_removed and args.compare is None:
        parser.error("--allow-removed needs --compare")
    html = args.out / "index.html"
    try:
        old = load_results(args.compare) if args.compare else None
        source = args.out / "results.jsonl"
        if not source.is_file():
            raise ValueError(f"{source}: no records (did the pytest run start?)")
        records = list(read_records(source))
        if not records:
            raise ValueError(f"{source}: no records (did the pytest run start?)")
        results = summarize(records, args.pytest_status, old, allow_removed=args.allow_removed)
        dump_results(results, args.out / "results.json")
        if not args.no_html:
            render.render_file(args.out / "results.json", html)
    except (OSError, TypeError, ValueError) as exc:
        # An earlier run's report must not stand beside this run's results: it would show another verdict.
        html.unlink(missing_ok=True)
        print(f"reports.summary: {exc}", file=sys.stderr)
        return 2
    except BaseException:  # an unexpected failure (a bug, an interrupt) must not leave that report standing either
        html.unlink(missing_ok=True)
        raise
    print_summary(results, args.out, None if args.no_html else html)
    return 1 if results["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
