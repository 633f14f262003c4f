"""Run-to-run comparison: new failures, moved measurements, perf regressions; exit status and section."""

from __future__ import annotations

import json
from html import unescape

import pytest

from reports import summary
from reports.compare import compare
from reports.recorder import append_record
from reports.results import build_results, dump_results
from reports.tests import fixtures
from reports.tests.helpers import section, table_rows, text_of

TEST_ID = "parity/test_rope.py::test_rope_matches_oracle[graph-float16]"


def rope_gate(measured, threshold=2, case="case1", dtype="float16"):
    return fixtures.gate_record("rope", "graph", dtype, (2, 8, 128), "max_ulp", measured, threshold, case=case,
                                test_id=TEST_ID)


def run_dir(tmp_path, name, records):
    """An OUT directory as `make gate` leaves it before the summary: results.jsonl only."""
    out = tmp_path / name
    out.mkdir()
    for r in records:
        append_record(r, out / "results.jsonl")
    return out


def old_results(tmp_path, records) -> str:
    path = tmp_path / "old-results.json"
    dump_results(build_results(records, pytest_status=0), path)
    return str(path)


def test_a_gate_that_newly_fails_fails_the_comparison(tmp_path, capsys):
    old = old_results(tmp_path, [fixtures.environment(), rope_gate(1), rope_gate(0, case="case2")])
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(3), rope_gate(0, case="case2")])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 1
    results = json.loads((out / "results.json").read_text())
    comparison = results["comparison"]
    assert comparison["failed"] and [f["case"] for f in comparison["new_failures"]] == ["case1"]
    assert comparison["new_failures"][0]["was"] == "passed"
    html = (out / "index.html").read_text()
    assert text_of(html, "comparison-verdict") == "FAIL"
    rows = table_rows(html, "new-failures")
    assert len(rows) == 1 and rows[0]["cells"][1] == TEST_ID and rows[0]["cells"][7:10] == ["3", "2", "passed"]
    assert "NEW FAILURE gate " + TEST_ID in capsys.readouterr().out


def test_a_moved_measurement_is_reported_without_failing(tmp_path):
    old = old_results(tmp_path, [fixtures.environment(), rope_gate(0), rope_gate(1, case="case2")])
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(2), rope_gate(1, case="case2")])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 0
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    assert not comparison["failed"] and comparison["new_failures"] == []
    (moved,) = comparison["moved"]  # case2 did not move
    assert (moved["case"], moved["old_measured"], moved["new_measured"], moved["delta"]) == ("case1", 0, 2, 2)
    assert moved["delta_of_threshold"] == 1.0  # a move of the whole 2-ULP budget
    html = (out / "index.html").read_text()
    assert text_of(html, "comparison-verdict") == "PASS"
    assert table_rows(html, "moved")[0]["cells"][6:10] == ["0", "2", "2", "1"]


def test_a_perf_regression_fails_the_comparison(tmp_path):
    old = old_results(tmp_path, [fixtures.environment(), fixtures.perf_record("paged_prefill_b1", 0.010, 0.010, False)])
    out = run_dir(tmp_path, "new", [fixtures.environment(),
                                    fixtures.perf_record("paged_prefill_b1", 0.015, 0.010, True, p_value=0.001)])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 1
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    assert comparison["perf_regressions"] == 1 and "regressed: paged_prefill_b1" in comparison["reasons"][0]
    assert comparison["perf"][0]["change"] == pytest.approx(0.5)
    html = (out / "index.html").read_text()
    (row,) = table_rows(html, "perf-changes")
    assert row["cells"][0] == "paged_prefill_b1" and row["cells"][6] == "+50.0%" and row["cells"][-1] == "REGRESSED"
    assert "benchmark(s) regressed" in unescape(section(html, "comparison"))


def test_fixed_and_added_gates_and_newly_failing_tests():
    old = [fixtures.environment(), rope_gate(5), fixtures.outcome_record("properties/test_q.py::test_p")]
    new = [fixtures.environment(), rope_gate(1), rope_gate(9, case="brand-new"),
           fixtures.outcome_record("properties/test_q.py::test_p", "failed", message="boom")]
    c = compare(old, new)
    assert [f["test_id"] for f in c["fixed"]] == [TEST_ID]
    kinds = sorted((f["kind"], f.get("case"), f["was"]) for f in c["new_failures"])
    assert kinds == [("gate", "brand-new", "absent"), ("test", None, "passed")]
    assert (c["matched"], c["added"], c["removed"]) == (1, 1, 0)
    assert c["failed"] and len(c["reasons"]) == 2


def test_worst_record_per_key_is_compared():
    """Hypothesis runs one gate many times per test: the key's worst measurement is what moves."""
    old = [rope_gate(0), rope_gate(1), rope_gate(2)]
    new = [rope_gate(0), rope_gate(1)]
    (moved,) = compare(old, new)["moved"]
    assert (moved["old_measured"], moved["new_measured"]) == (2, 1)


def test_identical_runs_compare_clean(tmp_path):
    records = fixtures.mixed_failures()
    c = compare(records, records)
    assert not c["failed"] and c["moved"] == [] and c["new_failures"] == [] and c["matched"] > 0


def test_compare_accepts_schema_one_results(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": 1, "records": [fixtures.environment(), rope_gate(1)]}))
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(1)])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", str(old), "--no-html"]) == 0
    assert not (out / "index.html").exists()


def test_summary_exit_status(tmp_path, capsys):
    passing = run_dir(tmp_path, "pass", [fixtures.environment(), rope_gate(1)])
    assert summary.main([str(passing), "--pytest-status", "0", "--no-html"]) == 0
    assert summary.main([str(passing), "--pytest-status", "1", "--no-html"]) == 1
    failing = run_dir(tmp_path, "fail", [fixtures.environment(), rope_gate(7)])
    assert summary.main([str(failing), "--pytest-status", "0", "--no-html"]) == 1
    assert "verdict: FAIL" in capsys.readouterr().out
    assert summary.main([str(tmp_path / "missing-run")]) == 2
    assert summary.main([str(passing), "--compare", str(tmp_path / "none.json")]) == 2


def test_compare_refuses_non_lists():
    with pytest.raises(TypeError, match="lists of records"):
        compare({"records": []}, [])
