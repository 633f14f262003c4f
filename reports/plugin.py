"""pytest plugin for ``make gate`` (``-p reports.plugin``): test and property records, progress, replay.

Records (appended through ``reports.recorder``, whose single-write appends are
safe from pytest-xdist workers):

* kind ``test``: one per test, written by the process that sees every report
  (the xdist controller, or the only process): node id, module, outcome
  (passed / failed / error / skipped / xfailed / xpassed), duration, the skip
  reason, and for failures the phase and the tail of pytest's report.
* kind ``property``: one per test that ran Hypothesis, written by the process
  that ran it (the statistics live there): examples run, invalid, failing,
  shrinks, seconds, why Hypothesis stopped, per-phase counts; and for a
  failure the minimal falsifying example(s), the ``@reproduce_failure`` blob,
  the seed, and copy-paste replay commands.
* kind ``selection``: one per run, written where the tests are collected (the
  only process, or xdist's first worker): the paths and node ids the run was
  given, ``-k``/``-m``, and the node ids deselected (``-k``, ``-m``, shards,
  ``--deselect``), so a comparison can tell a test this run did not select from
  a test that is gone.

Statistics come from Hypothesis's own statistics collector (the data behind
``item.hypothesis_statistics`` / ``--hypothesis-show-statistics``): this
plugin's ``pytest_runtest_call`` wrapper runs inside Hypothesis's and chains
its callback, so that output keeps working. The failing example, blob and seed
come from the notes Hypothesis attaches to the exception it raises.

Progress: while tests run, one line per finished test module with its
passed / failed / skipped counts (under xdist, printed by the controller).

Replay: ``--mlxgate-reproduce VERSION:BLOB`` applies Hypothesis's public
``reproduce_failure(VERSION, BLOB)`` decorator to the selected tests, so the
blob of a failure replays from the command line without editing the test.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from reports.recorder import append_record

STATS_KEY = pytest.StashKey[list]()
FAILURE_KEY = pytest.StashKey[dict]()
XFAILED_KEY = pytest.StashKey[bool]()  # the call failed as its xfail mark expected
MESSAGE_CHARS = 4000  # the tail of a failure's report kept in the record: the assertion is at the end
GENERATION_PHASES = ("explicit", "reuse", "generate", "target")
BLOB_RE = re.compile(r"@reproduce_failure\(\s*'([^']+)'\s*,\s*b'([^']+)'\s*\)")
SEED_RE = re.compile(r"@seed\((\d+)\)")
EXAMPLE_PREFIXES = ("Failing test case: ", "Falsifying example: ", "Falsifying explicit example: ")
PYTHON = ".venv/bin/python"


def pytest_addoption(parser):
    parser.getgroup("mlxgate-report").addoption(
        "--mlxgate-reproduce", metavar="VERSION:BLOB", default=None,
        help="replay a Hypothesis failure: apply @reproduce_failure(VERSION, BLOB) to the selected tests")


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _reproduce_argument(config) -> tuple[str, bytes] | None:
    value = config.getoption("--mlxgate-reproduce")
    if not value:
        return None
    version, sep, blob = value.partition(":")
    if not sep or not version or not blob:
        raise pytest.UsageError(f"--mlxgate-reproduce wants VERSION:BLOB, got {value!r}")
    return version, blob.encode()


# --- the process that runs a test: Hypothesis statistics and failures ---------


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    from hypothesis import is_hypothesis_test, reproduce_failure
    from hypothesis.statistics import collector

    replay = _reproduce_argument(item.config)
    if replay and hasattr(item, "obj"):
        test = getattr(item.obj, "__func__", item.obj)
        if not is_hypothesis_test(test):
            raise pytest.UsageError(f"--mlxgate-reproduce: {item.nodeid} is not a Hypothesis test")
        # A stateful test replays through its state machine class (Hypothesis copies the blob from there).
        reproduce_failure(*replay)(getattr(test, "_hypothesis_state_machine_class", test))

    outer = collector.value  # Hypothesis's pytest plugin sets its own collector around us
    stats: list[dict] = []
    item.stash[STATS_KEY] = stats

    def note(statistics: dict) -> None:
        stats.append(statistics)
        if outer is not None:
            outer(statistics)

    with collector.with_value(note):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # An expected failure (xfail) reaches here already turned into a skip: its falsifying example is kept all the same.
    xfailed = report.when == "call" and report.skipped and hasattr(report, "wasxfail")
    if report.when == "call" and (report.failed or xfailed) and call.excinfo is not None:
        item.stash[FAILURE_KEY] = hypothesis_failure(item, call.excinfo.value)
        item.stash[XFAILED_KEY] = xfailed
    if report.when == "teardown":
        stats = item.stash.get(STATS_KEY, None)
        failure = item.stash.get(FAILURE_KEY, None)
        if stats or (failure and failure.get("blob")):
            append_record(property_record(item, stats or [], failure, _final_outcome(item)))


def _final_outcome(item) -> str:
    if item.stash.get(FAILURE_KEY, None) is None:
        return "passed"
    return "xfailed" if item.stash.get(XFAILED_KEY, False) else "failed"


def _notes(exc: BaseException) -> list[str]:
    notes = list(getattr(exc, "__notes__", []) or [])
    for inner in getattr(exc, "exceptions", ()) or ():  # several distinct failures: an ExceptionGroup
        notes.extend(_notes(inner))
    return notes


def _is_hint(note: str) -> bool:
    return "@reproduce_failure" in note or "@seed(" in note or note.lstrip().startswith("You can reproduce")


def hypothesis_failure(item, exc: BaseException) -> dict[str, Any]:
    """What Hypothesis said about a failing test: examples, blob, seed (empty when not a property)."""
    notes = _notes(exc)
    text = "\n".join(notes + [str(getattr(item, "hypothesis_report_information", "") or "")])
    # Each failing example starts with a prefixed note; the notes after it (a state
    # machine's steps, an explanation) belong to it, up to the replay hints.
    examples: list[str] = []
    for note in notes:
        prefix = next((p for p in EXAMPLE_PREFIXES if note.startswith(p)), None)
        if prefix is not None:
            examples.append(note[len(prefix):].strip())
        elif examples and note.strip() and not _is_hint(note):
            examples[-1] += "\n" + note.strip()
    blob = BLOB_RE.search(text)
    seed = SEED_RE.search(text)
    seed_value = int(seed.group(1)) if seed else getattr(getattr(item, "obj", None),
                                                          "_hypothesis_internal_use_generated_seed", None)
    failure = {
        "error": f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS],
        "examples": examples,
        "hypothesis_version": blob.group(1) if blob else None,
        "blob": blob.group(2) if blob else None,
        "seed": seed_value,
    }
    failure["commands"] = replay_commands(item, failure)
    return failure


def replay_commands(item, failure: dict) -> list[str]:
    from hypothesis import settings

    node = shlex.quote(item.nodeid)
    device = getattr(item.config, "mlxgate_device", None)
    device_opt = f" --device {device}" if device else ""
    commands = []
    if failure.get("blob"):
        commands.append(f"{PYTHON} -m pytest {node}{device_opt} -p reports.plugin "
                        f"--mlxgate-reproduce={failure['hypothesis_version']}:{failure['blob']}")
    if failure.get("seed") is not None:
        profile = getattr(settings, "_current_profile", None)
        env = f"MLXGATE_PROFILE={profile} " if profile else ""
        commands.append(f"{env}{PYTHON} -m pytest {node}{device_opt} --hypothesis-seed={failure['seed']}")
    return commands


def phase_counts(stats: list[dict]) -> dict[str, dict]:
    """Per phase: test cases by status and seconds, summed over every Hypothesis run in the test."""
    phases: dict[str, dict] = {}
    for run in stats:
        for key, data in run.items():
            if not key.endswith("-phase") or not isinstance(data, dict):
                continue
            phase = phases.setdefault(key[: -len("-phase")], {"cases": 0, "valid": 0, "invalid": 0,
                                                              "failing": 0, "seconds": 0.0})
            statuses = Counter(case.get("status") for case in data.get("test-cases", []))
            phase["cases"] += sum(statuses.values())
            phase["valid"] += statuses.get("valid", 0)
            phase["invalid"] += statuses.get("invalid", 0) + statuses.get("overrun", 0)
            phase["failing"] += statuses.get("interesting", 0)
            phase["seconds"] += float(data.get("duration-seconds", 0.0) or 0.0)
    return phases


def property_record(item, stats: list[dict], failure: dict | None, outcome: str) -> dict[str, Any]:
    phases = phase_counts(stats)
    generation = [phases[p] for p in GENERATION_PHASES if p in phases]
    return {
        "kind": "property",
        "nodeid": item.nodeid,
        "module": item.nodeid.split("::", 1)[0],
        "outcome": outcome,
        "examples": sum(p["valid"] + p["failing"] for p in generation),
        "invalid": sum(p["invalid"] for p in generation),
        "failing": sum(p["failing"] for p in generation),
        "shrinks": phases.get("shrink", {}).get("cases", 0),
        "seconds": sum(p["seconds"] for p in phases.values()),
        "runs": len(stats),
        "stopped_because": "; ".join(sorted({str(s.get("stopped-because")) for s in stats
                                             if s.get("stopped-because")})) or None,
        "phases": phases,
        "failure": failure if failure and (failure.get("blob") or stats) else None,
        "time": time.time(),
    }


# --- the process that collects: what the run selected ---------------------------


def relative_argument(config, arg: str) -> str:
    """A command-line path or node id as the rootdir-relative form node ids use ("." for the rootdir itself)."""
    path, sep, rest = str(arg).partition("::")
    absolute = os.path.normpath(os.path.join(config.invocation_params.dir, path))
    try:
        path = Path(os.path.relpath(absolute, config.rootpath)).as_posix()
    except ValueError:  # another drive (Windows)
        path = Path(absolute).as_posix()
    if path.startswith("../"):
        path = Path(absolute).as_posix()
    return path + sep + rest


class Selection:
    """Registered where tests are collected; writes the ``selection`` record once collection is done."""

    def __init__(self):
        self.deselected: list[str] = []

    def pytest_deselected(self, items):
        self.deselected.extend(item.nodeid for item in items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        config = session.config
        append_record({"kind": "selection", "args": [relative_argument(config, a) for a in config.args],
                       "keyword": config.getoption("keyword") or None,
                       "markexpr": config.getoption("markexpr") or None,
                       "selected": len(session.items), "deselected": self.deselected, "time": time.time()})


# --- the process that sees every report: test records and progress ------------


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def skip_reason(report) -> str | None:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return reason.removeprefix("Skipped: ") or None


class Progress:
    """Registered in the process that sees every report (xdist controller, or the only one).

    Folds each test's setup/call/teardown reports into one ``test`` record and
    prints a line per test module once all its collected tests have reported.
    """

    PHASES = ("setup", "call", "teardown")

    def __init__(self, config):
        self.config = config
        self.expected: Counter = Counter()
        self.done: dict[str, Counter] = defaultdict(Counter)
        self.seconds: Counter = Counter()
        self.printed: set[str] = set()
        self.pending: dict[str, dict] = {}
        self.ready: list[str] = []

    def expect(self, nodeids) -> None:
        if not self.expected:  # every xdist worker collects the same items
            self.expected = Counter(module_of(n) for n in nodeids)

    def pytest_collection_finish(self, session):
        self.expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.expect(ids)

    def pytest_runtest_logreport(self, report):
        state = self.pending.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0, "when": None,
                                                        "skip_reason": None, "message": None})
        state["duration"] += float(getattr(report, "duration", 0.0) or 0.0)
        if report.when in ("setup", "call") and hasattr(report, "wasxfail"):  # (setup: an xfail whose fixture failed)
            state["outcome"] = "xfailed" if report.skipped else "xpassed"
        elif report.skipped and state["outcome"] == "passed":
            state.update(outcome="skipped", skip_reason=skip_reason(report), when=report.when)
        elif report.failed and state["outcome"] not in ("failed", "error"):
            # A failure outside the test body (fixture, teardown, a crashed xdist worker) is an error.
            state.update(outcome="failed" if report.when == "call" else "error", when=report.when,
                         message=(report.longreprtext or "")[-MESSAGE_CHARS:])
        if report.when not in ("setup", "call"):  # teardown, or xdist's "???" for a crashed worker
            self.finish(report.nodeid, self.pending.pop(report.nodeid))

    def pytest_collectreport(self, report):
        """A module skipped at collection (``pytest.skip(..., allow_module_level=True)``) has no test to report:
        it gets one ``test`` record of its own, its node id the module's, ``when`` "collect". (Under xdist the
        controller hears a skipped collection once, however many workers collected it.)"""
        if report.skipped:
            self.finish(report.nodeid, {"outcome": "skipped", "duration": 0.0, "when": "collect",
                                        "skip_reason": skip_reason(report), "message": None})

    def finish(self, nodeid: str, state: dict) -> None:
        module = module_of(nodeid)
        append_record({"kind": "test", "nodeid": nodeid, "module": module, "time": time.time(), **state})
        self.done[module][state["outcome"]] += 1
        self.seconds[module] += state["duration"]
        if self.expected and sum(self.done[module].values()) >= self.expected.get(module, 0):
            self.ready.append(module)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid, location):
        # After the terminal reporter has finished the test's line (its progress column).
        while self.ready:
            self.print_module(self.ready.pop(0))

    def print_module(self, module: str, note: str = "") -> None:
        if module in self.printed:
            return
        self.printed.add(module)
        counts = self.done[module]
        failed = counts["failed"] + counts["error"]
        parts = [f"{counts['passed']} passed", f"{failed} failed", f"{counts['skipped']} skipped"]
        parts += [f"{counts[k]} {k}" for k in ("xfailed", "xpassed") if counts[k]]
        line = f"mlxgate: {module}  {', '.join(parts)}  ({self.seconds[module]:.1f} s){note}"
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            print(line)
            return
        terminal.ensure_newline()  # ends the "module.py ..." line pytest itself tracks
        if getattr(terminal, "_width_of_current_line", 0):  # progress dots it does not track (xdist, -q)
            terminal.write("\n")
        terminal.write_line(line, red=bool(failed), green=not failed)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        for nodeid, state in list(self.pending.items()):  # interrupted mid-test
            self.finish(nodeid, state)
        self.pending.clear()
        for module in self.ready + sorted(set(self.done) - self.printed - set(self.ready)):
            self.print_module(module, note="  (incomplete)" if self.expected else "")


def collects_for_the_run(config) -> bool:
    """Whether this process's collection is the run's: the only process, or xdist's first worker (every worker
    collects the same tests; the controller collects none, so never reaches pytest_collection_finish)."""
    return not is_worker(config) or config.workerinput.get("workerid") == "gw0"


def pytest_configure(config):
    _reproduce_argument(config)  # fail early on a malformed value
    if collects_for_the_run(config):
        config.pluginmanager.register(Selection(), "mlxgate-selection")
    if not is_worker(config):
        config.pluginmanager.register(Progress(config), "mlxgate-progress")
