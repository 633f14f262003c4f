"""Run mutants: copy the tree, apply one mutant, run its killing tests, record killed or survived.

The repository is never edited. For each mutant the runner copies the working
tree (tracked files plus untracked files git does not ignore, as they are on
disk now) into a fresh temporary directory, applies the mutant's substitutions
there, runs ``python -m pytest <killing tests> -x`` with that directory as the
working directory, and deletes the directory whatever happens. Inside the
copy:

* ``MLXGATE_RESULTS`` points into the copy, so the suite's real results file is
  neither reset nor appended to by the inner runs;
* ``CI=true`` and the ``mutants.pytest_plugin`` profile: the ``ci`` profile
  without an example database (the shared ``.hypothesis/`` is not copied and
  none is created), derandomized and without shrinking (``pytest_plugin``);
* ``--device`` is passed through, and ``{arm}`` in a killing test id expands to
  every arm that device runs, compiled arms first (graph on a CPU; cuda then
  graph, or metal then graph, on a GPU): a mutant in a kernel body reaches every
  compiled arm, since metal and cuda compile the same body string. ``arm=``
  runs one arm alone (``--arm cuda``: the compiled arm must kill every
  kernel-body mutant by itself).

A mutant whose ``arms`` (a variant only those arms compile) miss every arm of
the run is left out: named in the log and in ``Report.left_out``, recorded with
status ``left_out`` (so a report says which mutants this machine could not
run), and not a result: it can neither die nor survive here.

Statuses: ``killed`` (a killing test failed; ``killed_by`` is the first one),
``survived`` (every killing test passed: the suite has no teeth there),
``stale`` (a substitution's old text does not occur exactly once: the catalog
drifted from the code) and ``error`` (no killing test ran, the run crashed
or timed out, or the killing tests already fail on the unmutated tree). Only
``killed`` passes.

Before any mutant runs, the union of their killing tests runs once on an
unmutated copy (the clean check): a mutant "killed" by a test that fails anyway
proves nothing, so such mutants are errors, not kills.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .catalog import CATALOG, Mutant
from .pytest_plugin import HANG_SUFFIX, OUTCOMES_ENV, PARENT_ENV, TEST_LIMIT_ENV

__all__ = [
    "REPO_ROOT", "CleanCheck", "MutantResult", "PytestRun", "Report", "StaleMutant", "apply_mutant", "copy_tree",
    "expand_tests", "mutant_diff", "mutant_record", "mutated_files", "rotation", "run_catalog", "run_pytest",
    "selects", "stop_live_runs", "tree_files",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
STATUSES = ("killed", "survived", "stale", "error")  # a result's; a left-out mutant's record says "left_out"
DEFAULT_TIMEOUT = 300  # seconds per pytest run; the slowest kill measured takes under 10
OUTPUT_TAIL = 4000  # characters of pytest's output kept for a survivor's or an error's detail
# Never copied: they are rebuilt or irrelevant, and a venv inside the tree would be huge.
SKIP_PARTS = {".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", ".benchmarks"}


class StaleMutant(ValueError):
    """A substitution's old text does not occur exactly once in its file."""


# --- applying a mutant ---------------------------------------------------------


def mutated_files(mutant: Mutant, root: Path = REPO_ROOT) -> dict[str, tuple[str, str]]:
    """``{path: (original text, mutated text)}``; StaleMutant unless every old text occurs exactly once.

    Substitutions apply in order, each to the text the previous ones left.
    """
    texts: dict[str, tuple[str, str]] = {}
    for sub in mutant.substitutions:
        path = Path(root, sub.path)
        if sub.path not in texts:
            if not path.is_file():
                raise StaleMutant(f"{mutant.name}: {sub.path} does not exist")
            original = path.read_text()
            texts[sub.path] = (original, original)
        original, current = texts[sub.path]
        count = current.count(sub.old)
        if count != 1:
            raise StaleMutant(f"{mutant.name}: {sub.path}: the old text occurs {count} times, not exactly once: "
                              f"{sub.old!r}")
        texts[sub.path] = (original, current.replace(sub.old, sub.new))
    return texts


def mutant_diff(mutant: Mutant, root: Path = REPO_ROOT) -> str:
    """Unified diff of the mutant against ``root`` (StaleMutant if it does not apply)."""
    chunks = []
    for path, (before, after) in mutated_files(mutant, root).items():
        chunks.extend(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                           fromfile=f"a/{path}", tofile=f"b/{path}", n=1))
    return "".join(chunks)


def apply_mutant(mutant: Mutant, tree: Path, root: Path = REPO_ROOT) -> None:
    """Write the mutant's files into the copy ``tree`` (texts computed from ``root``)."""
    for path, (_, after) in mutated_files(mutant, root).items():
        Path(tree, path).write_text(after)


# --- copying the tree ----------------------------------------------------------


def tree_files(root: Path = REPO_ROOT) -> list[str]:
    """The files a copy holds: git's tracked and untracked-not-ignored files that exist on disk.

    Outside a git checkout: every file except ``SKIP_PARTS`` and ``reports/out``.
    """
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not SKIP_PARTS & set(p.relative_to(root).parts)
                  and not p.relative_to(root).as_posix().startswith("reports/out/")]
    files = []
    for name in dict.fromkeys(listed):
        path = Path(root, name)
        if name and (path.is_file() or path.is_symlink()) and not SKIP_PARTS & set(Path(name).parts):
            files.append(name)
    return files


def copy_tree(dest: Path, files: Sequence[str], root: Path = REPO_ROOT) -> None:
    """Copy ``files`` (relative to ``root``) into ``dest``; a file deleted since it was listed is skipped."""
    for name in files:
        target = Path(dest, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(Path(root, name), target, follow_symlinks=False)
        except FileNotFoundError:  # others work in the same checkout: the tree may change during a run
            continue


# --- running pytest in a copy ----------------------------------------------------


def expand_tests(tests: Iterable[str], arms: Sequence[str]) -> list[str]:
    """Node ids with ``{arm}`` replaced by each arm in turn (others unchanged), duplicates dropped."""
    expanded = []
    for test in tests:
        expanded += [test.replace("{arm}", arm) for arm in arms] if "{arm}" in test else [test]
    return list(dict.fromkeys(expanded))


@dataclass
class PytestRun:
    """What one pytest run in a copy did."""

    exitstatus: int | None  # None: killed at the timeout, or no outcome written
    passed: int
    failed: int
    skipped: int
    failed_ids: list[str]
    seconds: float
    output: str
    timed_out: bool = False
    hung: str | None = None  # the node id of a test the watchdog ended (it did not return within the test limit)
    slowest: tuple[str, float] | None = None  # the test whose phases took longest, and their seconds

    @property
    def first_failed(self) -> str | None:
        return self.failed_ids[0] if self.failed_ids else None


def _child_env(tree: Path, outcomes: Path, profile: str, root: Path, test_limit: float | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MLXGATE_", "HYPOTHESIS_"))}
    if env.get("PYTHONPATH"):  # never let the real tree's modules shadow the copy's
        keep = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and Path(p).resolve() != root.resolve()]
        env["PYTHONPATH"] = os.pathsep.join(keep)
    env.update({"CI": "true", "MLXGATE_RESULTS": str(tree / "reports" / "out" / "results.jsonl"),
                OUTCOMES_ENV: str(outcomes), PARENT_ENV: profile, "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1"})
    if test_limit is not None:
        env[TEST_LIMIT_ENV] = repr(float(test_limit))
    return env


# The hang limit a run derives from its clean check: a test of a mutated tree that takes HANG_FACTOR times the
# slowest clean test, plus HANG_MARGIN seconds (a process's start and its first compiles, the contention of the
# mutants running beside it), has not returned in a time no user of the kernel would wait: a hang, so a kill by
# that test. (A deadlocked kernel never returns; without the limit such a mutant ran to --timeout as an error.)
HANG_FACTOR = 10
HANG_MARGIN = 30.0


def hang_limit_after(slowest_seconds: float) -> float:
    """The per-test limit after a clean run whose slowest test took ``slowest_seconds``."""
    return HANG_FACTOR * float(slowest_seconds) + HANG_MARGIN


def hang_limit(clean: "PytestRun") -> float | None:
    """The per-test limit of a run whose clean check is ``clean`` (None when it timed no test)."""
    return None if clean.slowest is None else hang_limit_after(clean.slowest[1])


def _hung_test(outcomes: Path) -> str | None:
    """The node id of the test a watchdog ended in this run, from its ``<outcomes>.hang-<pid>`` file."""
    for path in sorted(outcomes.parent.glob(outcomes.name + HANG_SUFFIX + "*")):
        lines = path.read_text(errors="replace").splitlines()
        if len(lines) > 1 and any(line.startswith("Timeout (") for line in lines[1:]):
            return lines[0]
    return None


ZYGOTE_SCRIPT = Path(__file__).with_name("zygote.py")
ZYGOTE_ENV = "MLXGATE_MUTANTS_ZYGOTE"  # "0": plain processes even where a zygote fits


def zygote_fits(device: str | None) -> bool:
    """Whether inner runs may fork from a warm zygote (``mutants/zygote.py``): Linux and the CPU device only."""
    return sys.platform.startswith("linux") and device == "cpu" and os.environ.get(ZYGOTE_ENV, "1") != "0"


class Zygote:
    """One warm interpreter (``mutants/zygote.py``) that runs one inner pytest at a time, forked from it."""

    def __init__(self, python: str, env: dict[str, str]):
        self.process = subprocess.Popen([python, str(ZYGOTE_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, text=True, start_new_session=True)
        self.broken = False

    def run(self, cwd: Path, args: Sequence[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int | None, bool]:
        """(exit code or None, timed out) of ``pytest args`` in ``cwd``; its output is in ``log``.

        Any failure of the exchange leaves the zygote ``broken`` (its child killed): the pool replaces it."""
        request = {"cwd": str(cwd), "args": list(args), "env": env, "log": str(log)}
        run = None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            run = _ForkedRun(self._reply("pid"))
            LIVE.add(run)
            timer = threading.Timer(timeout, run.kill)
            timer.start()
            try:
                code = self._reply("exit")
            finally:
                timer.cancel()
            return (None if run.killed else code), run.killed
        except BaseException:
            self.broken = True
            if run is not None:
                run.kill()
            self.close()
            raise
        finally:
            if run is not None:
                LIVE.discard(run)

    def _reply(self, key: str) -> int:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the mutants zygote exited (status {self.process.poll()})")
        return int(json.loads(line)[key])

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


@dataclass(eq=False)
class _ForkedRun:
    """A zygote's child: ``pid`` leads its own process group."""

    pid: int
    killed: bool = False

    def kill(self) -> None:
        self.killed = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class ZygotePool:
    """Zygotes for ``workers`` concurrent runs; each run borrows one (``with pool.borrow() as zygote``), and a
    broken one is replaced when it comes back."""

    def __init__(self, python: str, env: dict[str, str], workers: int):
        self.python, self.env = python, env
        self.free: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
        for _ in range(max(1, workers)):
            self.free.put(Zygote(python, env))

    @contextlib.contextmanager
    def borrow(self):
        zygote = self.free.get()
        try:
            yield zygote
        finally:
            self.free.put(Zygote(self.python, self.env) if zygote.broken else zygote)

    def close(self) -> None:
        while not self.free.empty():
            self.free.get().close()


def run_pytest(tree: Path, tests: Sequence[str], *, python: str = sys.executable, device: str | None = None,
               profile: str = "ci", timeout: float = DEFAULT_TIMEOUT, stop_first: bool = True, workers: int = 0,
               root: Path = REPO_ROOT, zygotes: ZygotePool | None = None,
               test_limit: float | None = None) -> PytestRun:
    """``python -m pytest tests`` with cwd ``tree`` (see the module docstring for the environment); forked from a
    warm zygote of ``zygotes`` when given (an xdist run, ``workers`` > 1, always starts a plain process).
    ``test_limit``: seconds a test may take before the watchdog ends its process as hung (``PytestRun.hung``)."""
    outcomes = tree / ".mutant-outcomes.json"
    args = [*tests, "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider", "-p", "mutants.pytest_plugin"]
    if stop_first:
        args.append("-x")
    if workers > 1:
        args += ["-n", str(workers)]
    if device:
        args += ["--device", device]
    env = _child_env(tree, outcomes, profile, root, test_limit)
    start = time.perf_counter()
    if zygotes is not None and workers <= 1:
        log = tree / ".mutant-output.txt"
        with zygotes.borrow() as zygote:
            _, timed_out = zygote.run(tree, args, env, log, timeout)
        output = log.read_bytes() if log.exists() else b""
    else:
        output, timed_out = _run_process([python, "-m", "pytest", *args], tree, env, timeout)
    seconds = time.perf_counter() - start
    text = output.decode(errors="replace")
    hung = _hung_test(outcomes)
    if timed_out or not outcomes.exists():
        return PytestRun(None, 0, 0, 0, [], seconds, text, timed_out, hung)
    data = json.loads(outcomes.read_text())
    slowest = tuple(data["slowest"]) if data.get("slowest") else None
    return PytestRun(data["exitstatus"], data["passed"], data["failed"], data["skipped"], data["failed_ids"],
                     seconds, text, False, hung, slowest)


def _run_process(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[bytes, bool]:
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    LIVE.add(process)
    timed_out = False
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)  # the group this call started: pytest and any xdist workers
        output, _ = process.communicate()
    finally:
        LIVE.discard(process)
    return output, timed_out


LIVE: set = set()  # inner pytest processes running now (started with setsid: a signal to our group does not reach them)


def stop_live_runs() -> None:
    """Kill every running inner pytest's process group (the runner was told to stop: SIGTERM / SIGINT). Each
    waiting call then returns, and its temporary copy is removed as its ``with`` block unwinds."""
    for process in list(LIVE):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _summary_line(output: str, nodeid: str | None) -> str:
    """pytest's short summary line of the failed test ("FAILED id - why"), shortened."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")) and nodeid and nodeid in line:
            return line if len(line) <= 400 else line[:400] + "..."
    return ""


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_TAIL else "..." + text[-OUTPUT_TAIL:]


# --- results -------------------------------------------------------------------------


@dataclass
class MutantResult:
    mutant: Mutant
    status: str  # one of STATUSES
    tests: list[str]  # the node ids run (arms expanded)
    killed_by: str | None = None
    seconds: float = 0.0
    diff: str = ""
    detail: str = ""

    @property
    def killed(self) -> bool:
        return self.status == "killed"


@dataclass
class CleanCheck:
    """The union of the killing tests on the unmutated tree."""

    tests: list[str]
    run: PytestRun | None = None

    @property
    def passed(self) -> bool:
        r = self.run
        return r is not None and r.exitstatus == 0 and r.failed == 0 and r.passed > 0


@dataclass
class Report:
    results: list[MutantResult]
    clean: CleanCheck | None
    seconds: float
    device: str
    arms: list[str]
    profile: str
    workers: int
    left_out: list[Mutant] = field(default_factory=list)  # their code runs on none of this run's arms

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def score(self) -> float:
        return self.count("killed") / len(self.results) if self.results else 1.0

    @property
    def ok(self) -> bool:
        """Every mutant killed (and so the clean check passed for all of them)."""
        return bool(self.results) and all(r.killed for r in self.results)


def mutant_record(result: MutantResult, report_context: dict) -> dict:
    """The ``mutant`` record (reports/SCHEMA.md) of one result; a mutant with ``record_fields`` (a generated one:
    ``mutants.generated``) adds those."""
    m = result.mutant
    return {"kind": "mutant", "time": time.time(), "name": m.name, "killed": result.killed,
            "killed_by": result.killed_by, "seconds": round(result.seconds, 3), "diff": result.diff,
            "status": result.status, "idea": m.idea, "target": m.target, "files": list(m.files),
            "in_kernel_body": m.in_kernel_body, "tests": result.tests, "detail": result.detail, **report_context,
            **getattr(m, "record_fields", {})}


# --- the catalog run -------------------------------------------------------------------


def selects(selector: str, test_id: str) -> bool:
    """Whether pytest run with ``selector`` (a file, a test function or one parametrized id) runs ``test_id``: a
    killer named by its function selects every parametrized case of it, which pytest reports by its full id."""
    return test_id == selector or test_id.startswith((selector + "[", selector + "::"))


def rotation(mutants: Sequence[Mutant], share: int, key: int | None = None) -> list[Mutant]:
    """Every ``share``-th mutant, starting at ``key % share`` (default key: today's UTC date ordinal)."""
    if share < 1:
        raise ValueError(f"share must be >= 1, got {share}")
    key = datetime.now(timezone.utc).date().toordinal() if key is None else key
    return [m for i, m in enumerate(mutants) if i % share == key % share]


def _arms(device: str | None, arm: str | None) -> tuple[str, list[str]]:
    from impl import arms as registry  # imports MLX: only when a run starts

    device = device or registry.default_device_name()
    if device == "gpu" and not registry.gpu_available():
        raise ValueError("device 'gpu' was asked for, but MLX has no GPU backend here (no Metal, no CUDA)")
    # Compiled arms first: on a GPU the product's arm gets the first chance to kill (-x stops there).
    available = sorted(registry.available_arms(device), key=lambda name: name == "graph")
    if arm is None:
        return device, available
    statuses = registry.discover_arms(device)
    if arm not in statuses:
        raise ValueError(f"arm must be one of {tuple(statuses)}, got {arm!r}")
    if not statuses[arm].available:
        raise ValueError(f"arm={arm!r} cannot run here: {statuses[arm].reason}")
    return device, [arm]


def _classify(run: PytestRun) -> tuple[str, str | None, str]:
    """(status, killed_by, detail) of a mutant's pytest run."""
    if run.hung is not None:  # the watchdog ended a test (under xdist its crashed worker is also a failure)
        return "killed", run.hung, f"hung: {run.hung} did not return within the test limit\n{_tail(run.output)}"
    if run.timed_out:
        return "error", None, f"timed out after {run.seconds:.0f} s\n{_tail(run.output)}"
    if run.exitstatus is None:
        return "error", None, f"pytest wrote no outcome (crashed?)\n{_tail(run.output)}"
    if run.failed:
        return "killed", run.first_failed, _summary_line(run.output, run.first_failed)
    if run.exitstatus == 0 and run.passed:
        return "survived", None, f"{run.passed} killing test(s) passed on the mutant\n{_tail(run.output)}"
    if run.exitstatus in (0, 5):
        return "error", None, f"no killing test ran ({run.skipped} skipped; exit {run.exitstatus})\n{_tail(run.output)}"
    return "error", None, f"pytest exit {run.exitstatus} without a failing test\n{_tail(run.output)}"


def run_catalog(mutants: Sequence[Mutant] = CATALOG, *, root: Path = REPO_ROOT, python: str = sys.executable,
                device: str | None = None, arm: str | None = None, profile: str = "ci", workers: int = 2,
                timeout: float = DEFAULT_TIMEOUT, clean_check: bool = True, record: bool = True,
                results_path: Path | None = None, log: Callable[[str], None] = print,
                record_context: dict | None = None, inner_workers: int = 0,
                test_limit: float | None = None) -> Report:
    """Run ``mutants`` (see the module docstring); records one ``mutant`` record each when ``record``.

    ``arm`` restricts the run to one arm and to the mutants in a kernel body
    (the cache and mask mutants have no arm). ``workers`` mutants run at a time;
    ``inner_workers`` > 1 runs each mutant's tests under pytest-xdist with that
    many processes (a plain process, no zygote): a mutant that outlives the fast
    killers runs a whole test set, which on the H200 takes minutes in one process.
    ``record_context`` adds its fields to every record (``mutants.generated``: the run's id).
    ``test_limit``: seconds a test of a mutated tree may take before it counts as hung, a kill by that test
    (None: ``hang_limit`` of the clean check, or no limit without one).
    """
    start = time.perf_counter()
    root = Path(root)
    requested_device = device  # passed on only when given: the inner runs' default is the same
    device, arms = _arms(device, arm)
    if arm is not None:
        mutants = [m for m in mutants if m.in_kernel_body]
    left_out = [m for m in mutants if not m.runs_on(arms)]
    if left_out:
        log(f"mutants: left out {len(left_out)}, whose code runs only on arms this run lacks ({', '.join(arms)}): "
            + ", ".join(f"{m.name} ({'/'.join(m.arms)})" for m in left_out))
        mutants = [m for m in mutants if m.runs_on(arms)]
    files = tree_files(root)
    results: list[MutantResult] = []
    runnable: list[MutantResult] = []
    for m in mutants:  # stale mutants are found before anything runs
        result = MutantResult(m, "error", expand_tests(m.tests, [a for a in arms if m.runs_on((a,))]))
        try:
            result.diff = mutant_diff(m, root)
        except StaleMutant as exc:
            result.status, result.detail = "stale", str(exc)
        results.append(result)
        if result.status != "stale":
            runnable.append(result)

    if not isinstance(inner_workers, int) or isinstance(inner_workers, bool) or inner_workers < 0:
        raise ValueError(f"inner_workers must be an int >= 0, got {inner_workers!r}")
    if test_limit is not None and (isinstance(test_limit, bool) or not isinstance(test_limit, (int, float))
                                   or not test_limit > 0):
        raise ValueError(f"test_limit must be a number of seconds > 0, got {test_limit!r}")
    zygotes: ZygotePool | None = None
    if zygote_fits(device) and runnable and inner_workers <= 1:
        base_env = {k: v for k, v in _child_env(root, Path(os.devnull), profile, root).items()
                    if k not in ("MLXGATE_RESULTS", OUTCOMES_ENV)}
        zygotes = ZygotePool(python, base_env, workers)
    try:
        return _run_all(results, runnable, left_out, files, zygotes, root=root, python=python, device=device,
                        requested_device=requested_device, arms=arms, profile=profile, workers=workers,
                        timeout=timeout, clean_check=clean_check, record=record, results_path=results_path, log=log,
                        start=start, record_context=record_context or {}, inner_workers=inner_workers,
                        test_limit=test_limit)
    finally:
        if zygotes is not None:
            zygotes.close()


def _clean_run(tests: list[str], files: list[str], zygotes: ZygotePool | None, workers: int, root: Path,
               **options) -> PytestRun:
    """The union of the killing tests on unmutated copies: one pytest -n ``workers``, or with zygotes one forked
    run per share of the test files, ``workers`` at a time, each in its own copy (what xdist would do, without its
    workers' imports)."""
    by_file: dict[str, list[str]] = {}
    for test in tests:
        by_file.setdefault(test.split("::", 1)[0], []).append(test)
    shares: list[list[str]] = [[] for _ in range(min(max(1, workers), len(by_file)) if zygotes else 1)]
    for group in sorted(by_file.values(), key=len, reverse=True):
        min(shares, key=len).extend(group)

    def one(share: list[str]) -> PytestRun:
        with tempfile.TemporaryDirectory(prefix="mlxgate-clean-") as tmp:
            copy_tree(Path(tmp), files, root)
            return run_pytest(Path(tmp), share, stop_first=False, workers=0 if zygotes else workers, root=root,
                              zygotes=zygotes, **options)

    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        runs = list(pool.map(one, shares))
    if len(runs) == 1:
        return runs[0]
    statuses = [r.exitstatus for r in runs]
    status = None if None in statuses else max(statuses, key=lambda code: (code not in (0, 5), code))
    return PytestRun(status, sum(r.passed for r in runs), sum(r.failed for r in runs), sum(r.skipped for r in runs),
                     [i for r in runs for i in r.failed_ids], max(r.seconds for r in runs),
                     "\n".join(r.output for r in runs), any(r.timed_out for r in runs),
                     next((r.hung for r in runs if r.hung), None),
                     max((r.slowest for r in runs if r.slowest), key=lambda s: s[1], default=None))


def _run_all(results, runnable, left_out, files, zygotes, *, root, python, device, requested_device, arms, profile,
             workers, timeout, clean_check, record, results_path, log, start, record_context,
             inner_workers=0, test_limit=None) -> Report:
    clean = None
    if clean_check and runnable:
        clean = CleanCheck(expand_tests((t for r in runnable for t in r.tests), ()))
        log(f"mutants: clean check: {len(clean.tests)} killing tests on the unmutated tree ...")
        clean.run = _clean_run(clean.tests, files, zygotes, workers, root, python=python, device=requested_device,
                               profile=profile, timeout=timeout * 2)
        r = clean.run
        log(f"mutants: clean check {'passed' if clean.passed else 'FAILED'} in {r.seconds:.1f} s "
            f"({r.passed} passed, {r.failed} failed, {r.skipped} skipped)")
        if not clean.passed:
            broken = set(r.failed_ids)
            for result in runnable:
                failing = sorted(i for i in broken if any(selects(t, i) for t in result.tests))
                if not broken or failing:
                    result.status = "error"
                    result.detail = ("its killing tests fail on the unmutated tree: "
                                     + (", ".join(failing) if broken else
                                        f"pytest exit {r.exitstatus}\n{_tail(r.output)}"))
            runnable = [res for res in runnable if not res.detail]
        if test_limit is None and clean.passed:
            test_limit = hang_limit(r)
            if test_limit is not None:
                log(f"mutants: a test not returning within {test_limit:.0f} s is hung (a kill): {HANG_FACTOR} x the "
                    f"slowest clean test ({r.slowest[0]}, {r.slowest[1]:.1f} s) + {HANG_MARGIN:.0f} s")

    context = {"device": device, "arms": arms, "profile": profile, **record_context}
    lock = threading.Lock()
    if record:
        from reports.recorder import append_record

        for m in left_out:
            skipped = MutantResult(m, "left_out", [], detail=f"its code runs only on the {'/'.join(m.arms)} arm; "
                                                            f"this run's arms: {', '.join(arms)}")
            append_record(mutant_record(skipped, context), results_path)

    def finish(result: MutantResult) -> None:
        with lock:
            if record:
                from reports.recorder import append_record

                append_record(mutant_record(result, context), results_path)
            where = f" by {result.killed_by}" if result.killed_by else ""
            log(f"mutants: {result.status.upper():8} {result.mutant.name} ({result.seconds:.1f} s){where}")

    def attempt(result: MutantResult) -> None:
        try:
            with tempfile.TemporaryDirectory(prefix=f"mlxgate-mutant-{result.mutant.name}-") as tmp:
                tree = Path(tmp)
                copy_tree(tree, files, root)
                apply_mutant(result.mutant, tree, root)
                run = run_pytest(tree, result.tests, python=python, device=requested_device, profile=profile,
                                 timeout=timeout, root=root, zygotes=zygotes, workers=inner_workers,
                                 test_limit=test_limit)
            result.seconds = run.seconds
            result.status, result.killed_by, result.detail = _classify(run)
        except StaleMutant as exc:  # the file changed under the run (others edit this checkout too)
            result.status, result.detail = "stale", str(exc)
        except Exception as exc:  # noqa: BLE001 - a harness failure is this mutant's error, not the run's end
            result.status, result.detail = "error", f"{type(exc).__name__}: {exc}"
        finish(result)

    for result in results:
        if result.status == "stale" or result.detail:
            finish(result)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(attempt, runnable))
    return Report(results, clean, time.perf_counter() - start, device, arms, profile, workers, left_out)
