"""What the summary and the renderer do with records they cannot count: refuse them, naming the file and line,
and leave no report of an earlier run beside the new results."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports import plots, render, summary
from reports.recorder import append_record, read_records
from reports.results import build_results, load_results, upgrade
from reports.tests import fixtures


def write(out, records) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def failing_gate(**changes) -> dict:
    return {**fixtures.gate_record("rope", "graph", "float32", (4,), "max_ulp", 5, 2), **changes}


BAD_LINES = [
    ("no kind", {"schema": 1, "test_id": "x"}, "kind must be one of"),
    ("not an object", [1, 2], "not a record"),
    ("unknown kind", {**failing_gate(), "kind": "Gate"}, "kind must be one of"),
    ("no gate name", {k: v for k, v in failing_gate().items() if k != "gate"}, "must name its gate"),
    ("passed as a string", failing_gate(passed="false"), "'passed' must be true or false"),
    ("regressed as a number", {"schema": 1, "kind": "perf", "regressed": 1}, "'regressed' must be true or false"),
    # fields the summary and the report take apart: they failed there with AttributeError / TypeError, exit 1 (FAIL)
    ("git as a string", fixtures.environment(git="abc"), "environment record field 'git' must be an object"),
    ("git commit as a number", fixtures.environment(git={"commit": 5}), "field 'git.commit' must be a string"),
    ("arms as a list", fixtures.environment(arms=["graph"]), "environment record field 'arms' must be an object"),
    ("arms as a string", fixtures.environment(arms="graph"), "environment record field 'arms' must be an object"),
    ("an arm as a string", fixtures.environment(arms={"graph": "yes"}), "field 'arms.graph' must be an object"),
    ("available as a string", fixtures.environment(arms={"graph": {"available": "false"}}),
     "field 'arms.graph.available' must be true or false"),
    ("differs as a string", fixtures.environment(dependencies={"lock": "l", "differs": "x"}),
     "field 'dependencies.differs' must be a list"),
    ("selection args as a number", {"schema": 1, "kind": "selection", "args": 1.5},
     "selection record field 'args' must be a list or null, got 1.5"),
    ("selection args of numbers", {"schema": 1, "kind": "selection", "args": [1.5]},
     "selection record field 'args' must be a list of strings"),
    ("perf shape as a number", {"schema": 1, "kind": "perf", "shape": 1.5},
     "perf record field 'shape' must be a list or null, got 1.5"),
    ("perf kernel_names as a number", {"schema": 1, "kind": "perf", "kernel_names": 1.5},
     "perf record field 'kernel_names' must be a list or null"),
    ("perf kernel_names not pairs", {"schema": 1, "kind": "perf", "kernel_names": [["k", 1, 2]]},
     "perf record field 'kernel_names' must be a list of [name, count] pairs"),
    ("test_id as a list", failing_gate(test_id=["a"]), "gate record field 'test_id' must be a string or null"),
    ("kernel as a list", failing_gate(kernel=["k"]), "gate record field 'kernel' must be a string or null"),
    ("nodeid as a list", fixtures.outcome_record("a::b") | {"nodeid": ["a"]}, "field 'nodeid' must be a string"),
    ("outcome as a list", fixtures.outcome_record("a::b") | {"outcome": ["failed"]}, "field 'outcome' must be a str"),
    # SCHEMA.md: every record has "schema": 1; a record of another version would be read as this one's layout
    ("schema 99", failing_gate(schema=99), "record schema 99 is not 1"),
    ("schema true", failing_gate(schema=True), "record schema True is not 1"),
]


@pytest.mark.parametrize("record, words", [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_a_record_that_cannot_be_counted_is_refused_by_file_and_line(tmp_path, capsys, record, words):
    out = tmp_path / "out"
    write(out, [fixtures.environment(), record])
    (out / "index.html").write_text("<title>mlxgate PASS</title>")  # an earlier run's report
    assert summary.main([str(out), "--pytest-status", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'results.jsonl'}:2:" in err and words in err
    assert not (out / "index.html").exists(), "an earlier run's report must not stand beside this run's results"


def test_an_empty_results_file_is_no_run(tmp_path, capsys):
    out = tmp_path / "out"
    write(out, [])
    assert summary.main([str(out), "--pytest-status", "0"]) == 2
    assert "no records" in capsys.readouterr().err


def test_names_with_dollars_are_drawn_as_written(tmp_path):
    out = tmp_path / "out"
    gate = failing_gate(arm="cuda$\\frac{$", kernel="k$1$")
    perf = {"schema": 1, "kind": "perf", "benchmark": "decode $\\frac{$", "arm": "x", "shape": [1], "median_s": 1e-3,
            "gbps": 1.0, "pct_copy_bw": 10.0, "regressed": False}
    write(out, [fixtures.environment(), gate, perf])
    assert summary.main([str(out), "--pytest-status", "0"]) == 1  # the gate fails: FAIL, and a report
    html = (out / "index.html").read_text()
    assert "cuda$\\frac{$" in html and "decode $\\frac{$" in html
    assert plots.drawn("a$b") == "a\\$b"


def test_odd_but_legal_values_render(tmp_path):
    records = [fixtures.environment(),
               failing_gate(worst={"index": 3, "actual": 1.0, "expected": 0.0}),
               failing_gate(measured=1.0, threshold=5e-324),  # the ratio overflows a float
               {"schema": 1, "kind": "property", "nodeid": "p::t", "outcome": "passed", "examples": "nan"}]
    results = build_results(records, pytest_status=0)
    assert results["totals"]["properties"]["examples"] == 0
    html = render.render(results)
    assert "index 3: got" in html


def test_a_numpy_nan_is_recorded_as_the_recorders_string(tmp_path):
    path = tmp_path / "r.jsonl"
    append_record({"kind": "gate", "gate": "max_ulp", "passed": False, "measured": np.float64("nan"),
                   "threshold": np.float32("inf")}, path)
    (record,) = read_records(path)
    assert (record["measured"], record["threshold"]) == ("nan", "inf")


def test_stale_and_error_mutants_are_not_survivors():
    def mutant(name, status):
        return {"schema": 1, "kind": "mutant", "name": name, "status": status, "killed": status == "killed",
                "killed_by": None, "detail": f"why {name}", "seconds": 1.0, "diff": ""}

    records = [fixtures.environment(), mutant("a", "killed"), mutant("b", "stale"), mutant("c", "error"),
               mutant("d", "survived")]
    totals = build_results(records)["totals"]["mutants"]
    assert (totals["killed"], totals["survived"], totals["stale"], totals["error"]) == (1, 1, 1, 1)
    html = render.render(build_results(records))
    for text in ("STALE", "ERROR", "SURVIVED", "why b", "why c"):
        assert text in html


def test_a_results_document_is_rederived_from_its_records():
    claimed = {"schema": 2, "verdict": "PASS", "reasons": [], "records": [fixtures.environment(), failing_gate()]}
    assert upgrade(claimed)["verdict"] == "FAIL"
    with pytest.raises(ValueError, match="records"):
        upgrade({"schema": 2, "records": [1]})


def test_files_that_cannot_be_read_or_written_are_named(tmp_path, capsys):
    with pytest.raises(ValueError, match="cannot read it"):
        load_results(tmp_path)  # a folder
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_results(tmp_path / "bad.json")
    out = tmp_path / "out"
    write(out, [fixtures.environment(), *fixtures.gates(3)])
    assert summary.main([str(out), "--pytest-status", "0", "--no-html"]) == 0
    assert render.main([str(out / "results.json"), "-o", str(tmp_path / "no" / "such" / "x.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_failed_gate_of_an_xfailed_test_is_expected():
    gate = failing_gate(test_id="parity/test_x.py::test_known_gap")
    xfailed = {"schema": 1, "kind": "test", "nodeid": "parity/test_x.py::test_known_gap", "outcome": "xfailed"}
    assert build_results([fixtures.environment(), gate, xfailed], pytest_status=0)["verdict"] == "PASS"
    assert build_results([fixtures.environment(), gate], pytest_status=0)["verdict"] == "FAIL"


@pytest.mark.parametrize("when", ["setup", "teardown"])
def test_an_errored_test_fails_the_verdict_without_a_pytest_status(when):
    """A test whose fixture raised (outcome "error", at setup or teardown) failed as surely as one whose body did:
    ``python -m reports.summary`` run without --pytest-status has only the records to go on, so the error must
    fail the verdict by itself."""
    errored = {"schema": 1, "kind": "test", "nodeid": "parity/test_x.py::test_y", "module": "parity/test_x.py",
               "outcome": "error", "when": when, "duration": 0.1, "skip_reason": None, "message": "RuntimeError"}
    results = build_results([fixtures.environment(), errored])
    assert (results["verdict"], results["reasons"]) == ("FAIL", ["1 test(s) failed"])


def test_a_record_number_is_a_real_field_and_never_a_bool():
    """``results.number``: the recorder writes nan / inf as strings; a bool (a verdict, not a measurement), None
    and text that is no number read as no number."""
    import math

    from reports.results import number

    assert number(True) is None and number(False) is None and number(None) is None and number("x") is None
    assert number(3) == 3.0 and number(0.5) == 0.5 and number("inf") == math.inf and math.isnan(number("nan"))


def test_a_record_without_a_schema_is_read_as_version_1():
    # Records built in memory (perf.harness.perf_record, impl/test_canary.py) get their schema only from
    # append_record, so a missing one is version 1; only a different version is refused (BAD_LINES).
    assert build_results([{"kind": "environment", "arms": {}}])["verdict"] == "PASS"


def test_a_non_finite_median_compares_and_renders(tmp_path, capsys):
    # The recorder writes an infinite median as "inf"; read back from the earlier results.json, the comparison's
    # change is the string "inf" too, which the report's change filter multiplied as a number.
    def perf(median):
        return {"schema": 1, "kind": "perf", "benchmark": "b", "kernel": "k", "arm": "graph", "shape": [1],
                "median_s": median, "regressed": False}

    old, new = tmp_path / "old", tmp_path / "new"
    write(old, [fixtures.environment(), perf(1e-3)])
    write(new, [fixtures.environment(), perf("inf")])
    assert summary.main([str(old), "--pytest-status", "0"]) == 0
    assert summary.main([str(new), "--pytest-status", "0", "--compare", str(old / "results.json")]) == 0
    assert "perf b: +inf%" in capsys.readouterr().out
    assert json.loads((new / "results.json").read_text())["comparison"]["perf"][0]["change"] == "inf"
    # rendered again from the file, where the change is the string
    assert render.main([str(new / "results.json"), "-o", str(tmp_path / "again.html")]) == 0
    assert ">+inf%<" in (tmp_path / "again.html").read_text()
    assert render._environment().filters["pct"]("nan") == "nan%"


def test_a_lone_surrogate_is_written_escaped(tmp_path):
    # "\udc80" is valid JSON but has no UTF-8 encoding: the write failed and left an empty .index.html.tmp.
    out = tmp_path / "out"
    write(out, [fixtures.environment(), failing_gate(detail="bad \udc80 byte")])
    assert summary.main([str(out), "--pytest-status", "0"]) == 1  # the gate fails: FAIL, with its report
    assert "bad \\udc80 byte" in (out / "index.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "results.json", "results.jsonl"]


def test_a_failed_report_write_leaves_the_old_report_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write(out, [fixtures.environment(), *fixtures.gates(3)])
    assert summary.main([str(out), "--pytest-status", "0", "--no-html"]) == 0
    html = tmp_path / "index.html"
    html.write_text("old report")

    def interrupted(src, dst):
        raise KeyboardInterrupt("interrupted before the move")

    monkeypatch.setattr(render.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        render.render_file(out / "results.json", html)
    assert html.read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "out"]


def test_an_unexpected_failure_leaves_no_earlier_report(tmp_path, monkeypatch):
    # A bug in rendering (not bad input) is still a traceback, but the earlier run's report must not stay.
    out = tmp_path / "out"
    write(out, [fixtures.environment(), *fixtures.gates(3)])
    (out / "index.html").write_text("<title>mlxgate PASS</title>")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(render, "render_file", broken)
    with pytest.raises(RuntimeError):
        summary.main([str(out), "--pytest-status", "0"])
    assert not (out / "index.html").exists()


def test_a_byte_that_is_not_utf8_is_named_by_its_line(tmp_path):
    # Decoded in blocks, the error named the line the reader had reached, not the one holding the byte.
    path = tmp_path / "results.jsonl"
    good = json.dumps(fixtures.environment()) + "\n"
    path.write_bytes(good.encode() * 200 + b'{"kind": "test", "nodeid": "\xff"}\n' + good.encode() * 200)
    with pytest.raises(ValueError, match=rf"{path}:201: not UTF-8"):
        list(read_records(path))


def test_the_renderer_names_a_wrong_typed_field_of_a_results_document(tmp_path, capsys):
    # python -m reports.render catches ValueError only: the field checks must reach it as one, naming the record.
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema": 2, "records": [fixtures.environment(arms={"graph": "yes"})]}))
    assert render.main([str(path), "-o", str(tmp_path / "index.html")]) == 2
    assert "records[0]: environment record field 'arms.graph' must be an object" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
