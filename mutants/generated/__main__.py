"""``python -m mutants.generated``: run generated mutants and print their score per target.

    python -m mutants.generated --bodies --list                      # id, arms, operator, the change, its diff
    python -m mutants.generated --bodies --sample 40 --seed 1 --list # the sample a run with them would take
    python -m mutants.generated --bodies --device gpu --arm cuda --workers 12 --profile dev
    python -m mutants.generated --bodies --sample 60 --seed 7 --device gpu --arm cuda --workers 12 --profile dev
    python -m mutants.generated --python-mutants --sample 40 --seed 1          # cosmic-ray's mutants of the Python
    python -m mutants.generated --python-mutants --targets impl/kv/pool.py --operators comparison boolean

``--bodies``: the kernel-body mutants (``bodies``), scored per kernel family. Every one is in a compiled body, so
only a compiled arm (cuda on an NVIDIA GPU, metal on a Mac) runs it: a CPU run leaves them all out, and says so.
``--python-mutants``: cosmic-ray's mutants of the graph arms, the KV state, the masks, the gates and the verdicts
(``python``), scored per file; they run on every device, the CPU's graph arm included.

A run appends a ``mutation_run`` record (its strata: population and sample per target) and one ``mutant`` record
per mutant to the results file (``MLXGATE_RESULTS``, default ``reports/out/results.jsonl``), prints the score table
(killed / non-equivalent that ran, the score, its 95% Wilson interval when the run was a sample) and every
survivor's diff. Exit status 0 when the run completed (survivors are its finding, not a failure), 1 when the clean
check failed (then nothing was measured), 2 on a usage error, 130 when interrupted. docs/generated-mutants.md has
the details.
"""

from __future__ import annotations

import argparse
import signal
import sys
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from ..options import add_arm_option, add_run_options, check_run_options
from ..runner import REPO_ROOT, MutantResult, _arms, mutant_diff, mutant_record, run_catalog, stop_live_runs
from . import bodies
from .equivalents import EQUIVALENTS
from .sampling import stratified_sample
from .score import format_table, run_record, score_rows

TOOL = "mlxgate-bodies"  # the body generator's name in mutation_run records (the Python one's: python.TOOL)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mutants.generated", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)  # which generator's mutants
    what.add_argument("--bodies", action="store_true",
                      help="the kernel-body mutants (mutants/generated/bodies.py), per kernel family")
    what.add_argument("--python-mutants", action="store_true",
                      help="cosmic-ray's mutants of the suite's Python (mutants/generated/python.py), per file")
    parser.add_argument("--list", action="store_true", help="print the mutants (id, arms, change, diff); run none")
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="run N mutants in all, stratified per target (default: every one)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.add_argument("--targets", nargs="+", default=(), metavar="TARGET",
                        help=f"only these targets: kernel families with --bodies ({', '.join(bodies.TARGETS)}); "
                             "files with --python-mutants (python.TARGETS, e.g. impl/kv/pool.py)")
    parser.add_argument("--operators", nargs="+", default=(), metavar="OPERATOR",
                        help=f"only these operators: with --bodies {', '.join(bodies.OPERATORS)}; with "
                             "--python-mutants cosmic-ray's, by family (binary, comparison, unary, boolean, loop, "
                             "exception, number, decorator) or full name (core/ReplaceAndWithOr)")
    parser.add_argument("--files", nargs="+", default=(), metavar="FILE",
                        help="--bodies only: only the mutants of these body files (e.g. "
                             "impl/paged_attention/merge.metal); a sample is then of their mutants")
    parser.add_argument("--ids", nargs="+", default=(), metavar="ID",
                        help="--bodies only: run exactly these mutants (ids as --list prints them), e.g. a second "
                             "pass over a run's undetermined ones; their score is of a chosen set: no interval")
    add_arm_option(parser, "--bodies only: run the tests on this arm only (cuda on an NVIDIA GPU, metal on a Mac)")
    add_run_options(parser, tests="the tests")
    args = parser.parse_args(argv)
    check_run_options(parser, args)
    if args.sample is not None and args.sample < 1:
        parser.error("--sample must be >= 1")
    if args.ids and args.sample is not None:
        parser.error("--ids and --sample exclude each other: --ids chooses the mutants, --sample draws them")
    if args.files and not args.bodies:
        parser.error("--files is for --bodies (a Python mutant's file is its target: --targets)")
    if args.ids and not args.bodies:
        parser.error("--ids is for --bodies (a Python mutant is built only when drawn: --targets narrows a rerun)")
    if args.python_mutants:
        from . import python

        if args.arm is not None:
            parser.error("--arm is for --bodies: a Python mutant runs on every arm of the device (its tests' "
                         "compiled-arm cases run where the device has them)")
        known_ops = set(python.FAMILIES.values()) | {name for name, _ in python.operators()}
        targets, operators = python.TARGETS, sorted(set(python.FAMILIES.values()))
    else:
        known_ops, targets, operators = set(bodies.OPERATORS), bodies.TARGETS, bodies.OPERATORS
    for option, given, known, shown in (("--targets", args.targets, set(targets), sorted(targets)),
                                        ("--operators", args.operators, known_ops, operators)):
        unknown = [v for v in given if v not in known]
        if unknown:
            parser.error(f"{option}: unknown {', '.join(unknown)} (known: {', '.join(shown)})")
    return args


def selection(args, root: Path = REPO_ROOT):
    """(the mutants to run, the strata: ``{target: {"population", "sampled", "equivalent"}}``)."""
    if args.python_mutants:
        from . import python

        return python.sample(args.sample, args.seed, root, targets=args.targets, operators=args.operators)
    every = bodies.all_mutants(root, targets=args.targets, operators=args.operators)
    if args.files:
        unknown = sorted(set(args.files) - {m.file for m in every})
        if unknown:
            raise ValueError(f"--files: no mutants in {', '.join(unknown)} (body files: "
                             f"{', '.join(sorted(bodies.body_files(root)))})")
        every = [m for m in every if m.file in args.files]
    mutants = [m for m in every if m.id not in EQUIVALENTS]
    equivalent = Counter(m.target for m in every if m.id in EQUIVALENTS)
    if args.ids:
        return _chosen(args.ids, mutants, every)
    if args.sample is not None:
        mutants, strata = stratified_sample(mutants, args.sample, args.seed)
    else:
        strata = {t: {"population": n, "sampled": n} for t, n in sorted(Counter(m.target for m in mutants).items())}
    for target in sorted(set(equivalent) | set(strata)):
        strata.setdefault(target, {"population": 0, "sampled": 0})["equivalent"] = equivalent.get(target, 0)
    return mutants, strata


def _chosen(ids, mutants, every):
    """``--ids``: exactly those mutants; the strata count them as chosen (``score``: no interval)."""
    known = {m.id: m for m in mutants}
    equivalent = sorted(i for i in ids if i not in known and i in {m.id for m in every})
    unknown = sorted(i for i in ids if i not in known and i not in equivalent)
    problems = []
    if equivalent:
        problems.append(f"argued equivalent (mutants/generated/equivalents.py): {', '.join(equivalent)}")
    if unknown:
        problems.append(f"no such mutant: {', '.join(unknown)}")
    if problems:
        raise ValueError("--ids: " + "; ".join(problems))
    chosen = [known[i] for i in dict.fromkeys(ids)]
    population = Counter(m.target for m in mutants)
    strata = {t: {"population": population[t], "sampled": n, "equivalent": 0, "chosen": True}
              for t, n in sorted(Counter(m.target for m in chosen).items())}
    return chosen, strata


def list_mutants(mutants, strata, root: Path = REPO_ROOT) -> None:
    python_mutants = any(m.generated == "python" for m in mutants)
    for m in mutants:
        arms = " " if python_mutants else f"  [{'/'.join(m.arms)}]"
        print(f"{m.id}{arms} line {m.line}\n  {m.idea}\n"
              + "".join(f"  {line}\n" for line in mutant_diff(m, root).splitlines()[2:]))
    if python_mutants:
        from .python import FAMILIES, family

        kinds, order = Counter(family(m.operator) for m in mutants), list(dict.fromkeys(FAMILIES.values()))
        label = "per operator family"
    else:
        kinds, order, label = Counter(m.operator for m in mutants), bodies.OPERATORS, "per operator"
    print(f"{len(mutants)} mutants; per target: "
          + ", ".join(f"{t} {s['sampled']}/{s['population']} ({s['equivalent']} equivalent skipped)"
                      for t, s in strata.items())
          + f"; {label}: " + ", ".join(f"{o} {kinds[o]}" for o in order if kinds[o]))


def new_run_id() -> str:
    """A run's id: its UTC start time and 8 random hex digits."""
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"


def execute(args, mutants, strata, root: Path = REPO_ROOT, *, log=print) -> tuple[int, list[dict]]:
    """Run ``selection``'s mutants as ``args`` say: (the exit status, the run's records: its ``mutation_run``, then
    a ``mutant`` record per mutant). Appends the records to the results file unless ``--no-record``; prints the
    survivors' diffs and the score table through ``log``."""
    from reports.recorder import append_record

    try:
        device, arms = _arms(args.device, args.arm)
        if args.bodies:
            mutants = bodies.resolve_tests(mutants, arms, root=root, python=args.python, device=device)
    except ValueError as exc:
        print(f"python -m mutants.generated: {exc}", file=sys.stderr)
        return 2, []
    if args.python_mutants:
        from .python import TOOL as tool

        generated = "python"
    else:
        tool, generated = TOOL, "body"
    run = new_run_id()
    context = {"device": device, "arms": arms, "profile": args.profile, "run": run}
    header = run_record(run, generated, tool, strata, seed=args.seed if args.sample is not None else None,
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
    why = f"their code runs only on {', '.join(sorted({a for m in left_out for a in m.arms}))}; " if left_out else ""
    log(f"mutants.generated: run {run}: {len(runnable)} to run, {len(left_out)} left out ({why}this run's arms: "
        f"{', '.join(arms)})")
    clean_failed = False
    if runnable:
        try:
            report = run_catalog(runnable, root=root, python=args.python, device=args.device, arm=args.arm,
                                 profile=args.profile, workers=args.workers, inner_workers=args.inner_workers,
                                 timeout=args.timeout, test_limit=args.test_limit,
                                 clean_check=not args.no_clean_check, record=not args.no_record,
                                 results_path=args.results, record_context={"run": run}, log=log)
        except ValueError as exc:
            print(f"python -m mutants.generated: {exc}", file=sys.stderr)
            return 2, records
        except KeyboardInterrupt as exc:
            print(f"python -m mutants.generated: stopped ({exc or 'interrupted'}); inner runs killed, copies removed",
                  file=sys.stderr)
            return 130, records
        records += [mutant_record(r, context) for r in report.results]
        clean_failed = report.clean is not None and not report.clean.passed
    rows = score_rows(records)
    for row in rows:
        for s in row["survivors"]:
            log(f"\nSURVIVED {s['id']} (line {s['line']}): {s['idea']}\n{s['diff']}")
    log("\n" + format_table(rows))
    if clean_failed:
        print("mutants.generated: the clean check FAILED: the tests fail on the unmutated tree, nothing was measured",
              file=sys.stderr)
        return 1, records
    return 0, records


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

    def stop(signum, _frame):  # SIGTERM (a CI cancel) as Ctrl-C: the inner runs die, the copies are removed
        stop_live_runs()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    return execute(args, mutants, strata, root)[0]


if __name__ == "__main__":
    sys.exit(main())
