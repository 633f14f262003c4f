"""Summarize a gate run: read results.jsonl, print per-kernel counts, write results.json.

Exit status: non-zero when pytest failed (its status is passed in) or when any
gate record failed. ``results.json`` holds the environment, every record and
the counts, with a schema version, for the report and for run comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from reports.recorder import SCHEMA_VERSION, read_records

# pytest exit codes that mean the run itself is fine: 0 all passed, 5 nothing collected.
PYTEST_OK = (0,)


def summarize(records: list[dict]) -> dict:
    gates = [r for r in records if r.get("kind") == "gate"]
    counts = Counter((r.get("kernel") or "-", r["gate"], "pass" if r["passed"] else "FAIL") for r in gates)
    env = next((r for r in records if r.get("kind") == "environment"), {})
    return {
        "schema": SCHEMA_VERSION,
        "environment": env,
        "totals": {"gates": len(gates), "passed": sum(r["passed"] for r in gates),
                   "failed": sum(not r["passed"] for r in gates),
                   "findings": sum(r.get("kind") == "finding" for r in records)},
        "by_kernel_gate": [{"kernel": k, "gate": g, "verdict": v, "count": n} for (k, g, v), n in sorted(counts.items())],
        "records": records,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="the reports/out directory of the run")
    parser.add_argument("--pytest-status", type=int, default=0)
    args = parser.parse_args(argv)
    records = list(read_records(args.out / "results.jsonl"))
    summary = summarize(records)
    (args.out / "results.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    env = summary["environment"]
    arms = env.get("arms", {})
    print(f"\nmlxgate summary  device={env.get('device')} mlx={env.get('mlx')} profile={env.get('profile')}")
    for name, status in arms.items():
        print(f"  arm {name:6s} {'ran' if status['available'] else 'skipped'}: {status['reason']}")
    print(f"  {'kernel':28s} {'gate':12s} {'verdict':7s} count")
    for row in summary["by_kernel_gate"]:
        print(f"  {row['kernel']:28s} {row['gate']:12s} {row['verdict']:7s} {row['count']}")
    totals = summary["totals"]
    print(f"  gates: {totals['passed']} passed, {totals['failed']} failed; findings: {totals['findings']}")
    for r in records:
        if r.get("kind") == "gate" and not r["passed"]:
            print(f"  FAIL {r['test_id']}: {r['gate']} measured {r['measured']} > {r['threshold']} ({r.get('detail')})")
    print(f"  pytest exit status {args.pytest_status}; results in {args.out}/")
    return 1 if (args.pytest_status not in PYTEST_OK or totals["failed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
