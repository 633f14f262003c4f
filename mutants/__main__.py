"""``python -m mutants``: run the mutant catalog; non-zero unless every mutant is killed.

    python -m mutants                        # the whole catalog, 2 at a time, on the default device
    python -m mutants paged_gqa_head_map_modulo kvq4_scale_bias_swapped
    python -m mutants --list
    python -m mutants --device gpu --arm cuda   # the kernel-body mutants, killed on the cuda arm alone
    python -m mutants --rotate 4             # today's quarter of the catalog (CI's rotating subset)

One ``mutant`` record per mutant is appended to the results file
(``MLXGATE_RESULTS``, default ``reports/out/results.jsonl``); a survivor's diff
is printed.
"""

from __future__ import annotations

import argparse
import signal
import sys

from .catalog import CATALOG, by_name
from .options import add_arm_option, add_run_options, check_run_options
from .runner import REPO_ROOT, rotation, run_catalog, stop_live_runs


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: the whole catalog)")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")
    add_arm_option(parser, "run the killing tests on this arm only (and only the kernel-body mutants)")
    parser.add_argument("--rotate", type=int, default=None, metavar="N",
                        help="run the 1/N of the catalog chosen by today's date (or --rotate-key)")
    parser.add_argument("--rotate-key", type=int, default=None, help="the rotation's key (default: today's ordinal)")
    add_run_options(parser)
    args = parser.parse_args(argv)
    check_run_options(parser, args)
    if args.rotate is not None and args.rotate < 1:
        parser.error("--rotate must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        mutants = by_name(args.names) if args.names else list(CATALOG)
    except ValueError as exc:
        print(f"python -m mutants: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            arms = ("/".join(m.arms) + " body" if m.arms else "body+graph") if m.in_kernel_body else "code"
            print(f"{m.name:44} {m.target:20} {arms:10} {m.idea}")
        return 0
    if args.rotate:
        mutants = rotation(mutants, args.rotate, args.rotate_key)

    def stop(signum, _frame):  # SIGTERM (a CI cancel) as Ctrl-C: the inner runs die, the copies are removed
        stop_live_runs()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    try:
        report = run_catalog(mutants, root=REPO_ROOT, python=args.python, device=args.device, arm=args.arm,
                             profile=args.profile, workers=args.workers, inner_workers=args.inner_workers,
                             timeout=args.timeout, test_limit=args.test_limit,
                             clean_check=not args.no_clean_check, record=not args.no_record,
                             results_path=args.results)
    except ValueError as exc:
        print(f"python -m mutants: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"python -m mutants: stopped ({exc or 'interrupted'}); inner runs killed, copies removed",
              file=sys.stderr)
        return 130
    for result in report.results:
        if result.status == "survived":
            print(f"\nSURVIVED {result.mutant.name}: {result.mutant.idea}\n"
                  f"  killing tests, all passed: {', '.join(result.tests)}\n{result.diff}")
        elif result.status in ("stale", "error"):
            print(f"\n{result.status.upper()} {result.mutant.name}: {result.detail}")
    total = len(report.results)
    print(f"\nmutants: {report.count('killed')}/{total} killed ({report.score:.0%}), {report.count('survived')} "
          f"survived, {report.count('stale')} stale, {report.count('error')} errors in {report.seconds:.0f} s "
          f"(device {report.device}, arms {', '.join(report.arms)}, {report.workers} at a time, "
          f"profile {report.profile})"
          + (f"; {len(report.left_out)} left out: their code runs only on "
             f"{', '.join(sorted({a for m in report.left_out for a in m.arms}))}" if report.left_out else ""))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
