"""The run options ``python -m mutants`` and ``python -m mutants.generated`` share: one definition, one meaning.

``add_run_options`` adds how the inner pytest runs go (workers, device, profile, timeout, the clean check, the
records, the interpreter); ``add_arm_option`` the arm restriction; ``check_run_options`` refuses what argparse's
types let through. The runner (``mutants.runner.run_catalog``) takes the values as they are.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

from .runner import DEFAULT_TIMEOUT

__all__ = ["add_arm_option", "add_run_options", "check_run_options"]


def add_run_options(parser: argparse.ArgumentParser, *, tests: str = "the killing tests") -> None:
    """``--workers --device --profile --timeout --test-limit --no-clean-check --no-record --results --python``; ``tests`` names
    what the inner runs run, in the help texts."""
    parser.add_argument("--workers", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--inner-workers", type=int, default=0, metavar="N",
                        help="run each mutant's tests under pytest-xdist with N processes (default: one process); "
                             "with --workers 1, a survivor's whole test set gets the machine")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="MLX device of the inner runs (default: gpu where MLX has one, else cpu)")
    parser.add_argument("--profile", choices=("dev", "ci", "thorough"), default="ci",
                        help="Hypothesis profile the inner runs derive from (default ci; conftest.py registers them)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per pytest run (default {DEFAULT_TIMEOUT}); a run past it is the mutant's "
                             "error, not a kill")
    parser.add_argument("--test-limit", type=float, default=None, metavar="SECONDS",
                        help="seconds one test of a mutated tree may take before it is hung, a kill by that test "
                             "(default: 10 x the clean check's slowest test + 30 s; none without a clean check)")
    parser.add_argument("--no-clean-check", action="store_true",
                        help=f"skip running {tests} on the unmutated tree first")
    parser.add_argument("--no-record", action="store_true", help="append no records to the results file")
    parser.add_argument("--results", type=Path, default=None, help="results file (default: MLXGATE_RESULTS)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the inner runs (default: this one)")


def add_arm_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--arm", choices=("graph", "metal", "cuda"), default=None, help=help)


def check_run_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` (exit 2) on a value the runner cannot take."""
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.inner_workers < 0:
        parser.error("--inner-workers must be >= 0")
    # "not > 0" and isfinite: float("nan") passes "<= 0" and would time every run out at once (or never).
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        parser.error(f"--timeout must be a finite number > 0, got {args.timeout}")
    if args.test_limit is not None and not (args.test_limit > 0 and math.isfinite(args.test_limit)):
        parser.error(f"--test-limit must be a finite number > 0, got {args.test_limit}")
    # Checked before any mutant runs: a missing interpreter would otherwise be a traceback (exit 1, read as "a mutant
    # survived"), and a results path that is a folder would fail only after the first mutant ran.
    if shutil.which(args.python) is None:  # (a path with a folder is checked as it is, a bare name on PATH)
        parser.error(f"--python: {args.python} is not an executable file")
    if args.results is not None and args.results.is_dir():
        parser.error(f"--results: {args.results} is a folder, not a results file")
