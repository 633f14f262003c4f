"""``python -m mutants.generated``: run the generated kernel-body mutants and print their score per kernel family.

    python -m mutants.generated --bodies --list                      # id, arms, operator, the change, its diff
    python -m mutants.generated --bodies --sample 40 --seed 1 --list # the sample a run with them would take
    python -m mutants.generated --bodies --device gpu --arm cuda --workers 12 --profile dev
    python -m mutants.generated --bodies --sample 60 --seed 7 --device gpu --arm cuda --workers 12 --profile dev

Every generated mutant is in a compiled body, so only a compiled arm (cuda on an NVIDIA GPU, metal on a Mac)
runs it: a CPU run leaves them all out, and says so. A run appends a ``mutation_run`` record (its strata:
population and sample per target) and one ``mutant`` record per mutant to the results file (``MLXGATE_RESULTS``,
default ``reports/out/results.jsonl``), prints the score table (killed / non-equivalent that ran, the score, its
95% Wilson interval when the run was a sample) and every survivor's diff. Exit status 0 when the run completed
(survivors are its finding, not a failure), 1 when the clean check failed (then nothing was measured), 2 on a
usage error, 130 when interrupted. docs/generated-mutants.md has the details.
"""

from __future__ import annotations

import argparse
import signal
import sys
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from ..runner import DEFAULT_TIMEOUT, REPO_ROOT, MutantResult, _arms, mutant_diff, mutant_record, run_catalog, \
    stop_live_runs
from . import bodies
from .equivalents import EQUIVALENTS
from .sampling import stratified_sample
from .score import format_table, run_record, score_rows

TOOL = "mlxgate-bodies"  # the generator's name in mutation_run records


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mutants.generated", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)  # which generator's mutants (one, for now)
    what.add_argument("--bodies", action="store_true",
                      help="the kernel-body mutants (mutants/generated/bodies.py; a Python mutation tool writes "
                           "records of this format itself: reports/SCHEMA.md)")
    parser.add_argument("--list", action="store_true", help="print the mutants (id, arms, change, diff); run none")
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="run N mutants in all, stratified per kernel family (default: every one)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.add_argument("--targets", nargs="+", choices=bodies.TARGETS, default=(), metavar="TARGET",
                        help=f"only these kernel families ({', '.join(bodies.TARGETS)})")
    parser.add_argument("--operators", nargs="+", choices=bodies.OPERATORS, default=(), metavar="OPERATOR",
                        help=f"only these operators ({', '.join(bodies.OPERATORS)})")
    parser.add_argument("--workers", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="MLX device of the inner runs (default: gpu where MLX has one, else cpu)")
    parser.add_argument("--arm", choices=("graph", "metal", "cuda"), default=None,
                        help="run the tests on this arm only (cuda on an NVIDIA GPU, metal on a Mac)")
    parser.add_argument("--profile", choices=("dev", "ci", "thorough"), default="ci",
                        help="Hypothesis profile the inner runs derive from (default ci)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per pytest run (a dropped barrier can hang: it times out as an error)")
    parser.add_argument("--no-clean-check", action="store_true",
                        help="skip running the tests on the unmutated tree first")
    parser.add_argument("--no-record", action="store_true", help="append no records to the results file")
    parser.add_argument("--results", type=Path, default=None, help="results file (default: MLXGATE_RESULTS)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the inner runs (default: this one)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.sample is not None and args.sample < 1:
        parser.error("--sample must be >= 1")
    return args


def selection(args, root: Path = REPO_ROOT):
    """(the mutants to run, the strata: ``{target: {"population", "sampled", "equivalent"}}``)."""
    every = bodies.all_mutants(root, targets=args.targets, operators=args.operators)
    mutants = [m for m in every if m.id not in EQUIVALENTS]
    equivalent = Counter(m.target for m in every if m.id in EQUIVALENTS)
    if args.sample is not None:
        mutants, strata = stratified_sample(mutants, args.sample, args.seed)
    else:
        strata = {t: {"population": n, "sampled": n} for t, n in sorted(Counter(m.target for m in mutants).items())}
    for target in sorted(set(equivalent) | set(strata)):
        strata.setdefault(target, {"population": 0, "sampled": 0})["equivalent"] = equivalent.get(target, 0)
    return mutants, strata


def list_mutants(mutants, strata, root: Path = REPO_ROOT) -> None:
    for m in mutants:
        print(f"{m.id}  [{'/'.join(m.arms)}] line {m.line}\n  {m.idea}\n"
              + "".join(f"  {line}\n" for line in mutant_diff(m, root).splitlines()[2:]))
    operators = Counter(m.operator for m in mutants)
    print(f"{len(mutants)} mutants; per target: "
          + ", ".join(f"{t} {s['sampled']}/{s['population']} ({s['equivalent']} equivalent skipped)"
                      for t, s in strata.items())
          + "; per operator: " + ", ".join(f"{o} {operators[o]}" for o in bodies.OPERATORS if operators[o]))


def main(argv=None, root: Path = REPO_ROOT) -> int:
    args = parse_args(argv)
    try:
        mutants, strata = selection(args, root)
    except ValueError as exc:
        print(f"python -m mutants.generated: {exc}", file=sys.stderr)
        return 2
    if args.list:
        list_mutants(mutants, strata, root)
        return 0
    from reports.recorder import append_record

    try:
        device, arms = _arms(args.device, args.arm)
        mutants = bodies.resolve_tests(mutants, arms, root=root, python=args.python, device=device)
    except ValueError as exc:
        print(f"python -m mutants.generated: {exc}", file=sys.stderr)
        return 2
    run = f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    context = {"device": device, "arms": arms, "profile": args.profile, "run": run}
    header = run_record(run, "body", TOOL, strata, seed=args.seed if args.sample is not None else None,
                        sample=args.sample, device=device, arms=arms, profile=args.profile)
    records = [header]
    runnable = [m for m in mutants if m.runs_on(arms)]
    left_out = [m for m in mutants if not m.runs_on(arms)]
    if args.arm is not None:
        runnable = [m for m in runnable if m.in_kernel_body]
    for m in left_out:
        records.append(mutant_record(MutantResult(m, "left_out", [], detail=(
            f"its code runs only on the {'/'.join(m.arms)} arm; this run's arms: {', '.join(arms)}")), context))
    if not args.no_record:
        for record in records:
            append_record(record, args.results)
    print(f"mutants.generated: run {run}: {len(runnable)} to run, {len(left_out)} left out (their code runs only on "
          f"{', '.join(sorted({a for m in left_out for a in m.arms})) or '-'}; this run's arms: {', '.join(arms)})")

    def stop(signum, _frame):  # SIGTERM (a CI cancel) as Ctrl-C: the inner runs die, the copies are removed
        stop_live_runs()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    clean_failed = False
    if runnable:
        try:
            report = run_catalog(runnable, root=root, python=args.python, device=args.device, arm=args.arm,
                                 profile=args.profile, workers=args.workers, timeout=args.timeout,
                                 clean_check=not args.no_clean_check, record=not args.no_record,
                                 results_path=args.results, record_context={"run": run})
        except ValueError as exc:
            print(f"python -m mutants.generated: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:
            print(f"python -m mutants.generated: stopped ({exc or 'interrupted'}); inner runs killed, copies removed",
                  file=sys.stderr)
            return 130
        records += [mutant_record(r, context) for r in report.results]
        clean_failed = report.clean is not None and not report.clean.passed
    rows = score_rows(records)
    for row in rows:
        for s in row["survivors"]:
            print(f"\nSURVIVED {s['id']} (line {s['line']}): {s['idea']}\n{s['diff']}")
    print("\n" + format_table(rows))
    if clean_failed:
        print("mutants.generated: the clean check FAILED: the tests fail on the unmutated tree, nothing was measured",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
