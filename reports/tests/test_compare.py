"""Run-to-run comparison: new failures, moved measurements, perf regressions; exit status and section."""

from __future__ import annotations

import json
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from reports import summary
from reports.compare import compare, covers
from reports.recorder import append_record
from reports.results import build_results, dump_results
from reports.tests import fixtures
from reports.tests.helpers import section, table_rows, text_of

ROOT = Path(__file__).resolve().parents[2]
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


def test_a_moved_measurement_is_reported_without_failing(tmp_path, capsys):
    old = old_results(tmp_path, [fixtures.environment(), rope_gate(0), rope_gate(1, case="case2")])
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(2), rope_gate(1, case="case2")])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 0
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    commit = comparison["old"]["commit"]
    assert len(commit) > 12 and f"compared with {commit[:12]} (" in capsys.readouterr().out  # the short commit
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


# --- checks the new run lost ------------------------------------------------------

PROPERTY_ID = "properties/test_rope_props.py::test_rope_property[graph]"


def drawn_gate(case, measured=0, threshold=2, gate="max_ulp"):
    """A gate of a Hypothesis test: its case holds drawn values."""
    return fixtures.gate_record("rope", "graph", "float16", (2, 8, 128), gate, measured, threshold, case=case,
                                test_id=PROPERTY_ID)


def selection(args=(".",), deselected=()):
    return {"schema": 1, "kind": "selection", "args": list(args), "keyword": None, "markexpr": None,
            "selected": 1, "deselected": list(deselected), "time": 1.7e9}


def test_a_gone_gate_fails_the_comparison_unless_allowed(tmp_path, capsys):
    old = old_results(tmp_path, [fixtures.environment(), rope_gate(1), rope_gate(0, case="case2")])
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(1)])
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 1
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    (gone,) = comparison["gone"]
    assert (gone["kind"], gone["test_id"], gone["case"], gone["drawn"]) == ("gate", TEST_ID, "case2", False)
    assert comparison["reasons"] == [f"1 gate(s) gone: {TEST_ID} max_ulp rope float16 case2"]
    html = (out / "index.html").read_text()
    assert text_of(html, "comparison-verdict") == "FAIL"
    assert [row["cells"][6] for row in table_rows(html, "gone")] == ["case2"]
    printed = capsys.readouterr().out
    assert f"GONE gate {TEST_ID} max_ulp rope float16 case2" in printed
    assert "0 new failure(s), 1 gone, 0 loosened, 0 fixed" in printed

    assert summary.main([str(out), "--pytest-status", "0", "--compare", old, "--allow-removed"]) == 0
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    assert comparison["allow_removed"] and len(comparison["gone"]) == 1 and not comparison["failed"]
    assert "(allowed: --allow-removed)" in capsys.readouterr().out


def test_allow_removed_needs_compare(tmp_path, capsys):
    out = run_dir(tmp_path, "new", [fixtures.environment(), rope_gate(1)])
    with pytest.raises(SystemExit) as exit_info:
        summary.main([str(out), "--allow-removed"])
    assert exit_info.value.code == 2 and "--allow-removed needs --compare" in capsys.readouterr().err


def test_a_gone_test_fails_the_comparison():
    gone_id = "parity/test_rope.py::test_rope_nan[graph]"
    old = [fixtures.environment(), fixtures.outcome_record(TEST_ID), fixtures.outcome_record(gone_id, "skipped")]
    new = [fixtures.environment(), fixtures.outcome_record(TEST_ID)]
    c = compare(old, new)
    assert c["gone"] == [{"kind": "test", "test_id": gone_id}]
    assert c["failed"] and c["reasons"] == [f"1 test(s) gone: {gone_id}"]
    assert not compare(old, new, allow_removed=True)["failed"]


def test_gates_of_an_arm_that_did_not_run_now_are_not_comparable():
    cuda_id = "parity/test_rope.py::test_rope_matches_oracle[cuda-float16]"
    cuda = fixtures.gate_record("rope", "cuda", "float16", (2, 8, 128), "max_ulp", 1, 2, case="case1",
                                test_id=cuda_id)
    old = [fixtures.environment(arms_available=("graph", "cuda")), rope_gate(1), cuda]
    new = [fixtures.environment(arms_available=("graph",)), rope_gate(1)]
    c = compare(old, new)
    assert c["gone"] == [] and not c["failed"]
    assert [(n["test_id"], n["why"]) for n in c["not_comparable"]] == [(cuda_id, "arm cuda did not run")]
    # The same record with the arm running now is a lost check.
    c = compare(old, [fixtures.environment(arms_available=("graph", "cuda")), rope_gate(1)])
    assert [g["test_id"] for g in c["gone"]] == [cuda_id] and c["failed"]


def test_tests_the_new_run_did_not_select_are_not_comparable():
    other = "parity/test_sdpa.py::test_sdpa[graph]"
    old = [fixtures.environment(), rope_gate(1), fixtures.outcome_record(TEST_ID), fixtures.outcome_record(other),
           fixtures.gate_record("sdpa", "graph", "float16", (2, 8, 128), "max_ulp", 1, 2, test_id=other)]
    for chosen in (selection(args=["parity/test_rope.py"]), selection(deselected=[other]),
                   selection(args=[TEST_ID])):
        new = [fixtures.environment(), rope_gate(1), fixtures.outcome_record(TEST_ID), chosen]
        c = compare(old, new)
        assert c["gone"] == [] and not c["failed"], chosen
        assert sorted((n["kind"], n["why"]) for n in c["not_comparable"]) == [("gate", "test not selected"),
                                                                               ("test", "test not selected")]
    # Selected (its file is under the paths given, nothing deselected it) yet absent: gone.
    new = [fixtures.environment(), rope_gate(1), fixtures.outcome_record(TEST_ID), selection(args=["parity"])]
    c = compare(old, new)
    assert sorted((g["kind"], g["test_id"]) for g in c["gone"]) == [("gate", other), ("test", other)]
    assert c["reasons"] == [f"1 gate(s) gone: {other} max_ulp sdpa float16", f"1 test(s) gone: {other}"]


@pytest.mark.parametrize("arg, nodeid, covered", [
    (".", "parity/test_x.py::test_y", True),
    ("parity", "parity/test_x.py::test_y", True),
    ("parity/", "parity/test_x.py::test_y", True),
    ("par", "parity/test_x.py::test_y", False),
    ("parity/test_x.py", "parity/test_x.py::test_y[graph]", True),
    ("parity/test_x.py::test_y", "parity/test_x.py::test_y[graph]", True),
    ("parity/test_x.py::test_y", "parity/test_x.py::test_yz", False),
    ("parity/test_x.py::TestA", "parity/test_x.py::TestA::test_b", True),
])
def test_selection_arguments_cover_node_ids(arg, nodeid, covered):
    assert covers(arg, nodeid) is covered


def test_a_test_skipped_now_loses_its_gates_unless_the_device_changed():
    skipped = fixtures.outcome_record(TEST_ID, "skipped", skip_reason="no GPU: needs MLX's GPU backend")
    old = [fixtures.environment(device="gpu", mlx_backend="metal"), rope_gate(1)]
    c = compare(old, [fixtures.environment(), skipped])
    assert c["gone"] == [] and not c["failed"]
    assert c["not_comparable"][0]["why"] == "skipped on cpu/cpu: no GPU: needs MLX's GPU backend"
    c = compare([fixtures.environment(), rope_gate(1)], [fixtures.environment(), skipped])
    assert [g["case"] for g in c["gone"]] == ["case1"] and c["failed"]


def test_a_module_skipped_at_collection_skips_its_tests():
    """pytest.skip(allow_module_level=True) leaves one record, the module's: its tests are skipped, not gone."""
    module_skip = {**fixtures.outcome_record("parity/test_rope.py", "skipped", skip_reason="no Metal device"),
                   "when": "collect"}
    old = [fixtures.environment(device="gpu", mlx_backend="metal"), fixtures.outcome_record(TEST_ID), rope_gate(1)]
    c = compare(old, [fixtures.environment(), module_skip])
    assert c["gone"] == [] and not c["failed"]
    assert c["not_comparable"][0]["why"] == "skipped on cpu/cpu: no Metal device"
    # On the same device the gates are lost all the same (the tests are not: they reported, skipped).
    c = compare([fixtures.environment(), fixtures.outcome_record(TEST_ID), rope_gate(1)],
                [fixtures.environment(), module_skip])
    assert [(g["kind"], g["case"]) for g in c["gone"]] == [("gate", "case1")] and c["failed"]
    # A module skipped before and running now lost nothing.
    c = compare([fixtures.environment(), module_skip], [fixtures.environment(), fixtures.outcome_record(TEST_ID)])
    assert c["gone"] == [] and not c["failed"]


def test_a_hypothesis_test_is_gone_only_when_it_records_no_gate():
    """Its cases are drawn anew each run: a key of one run need not recur, the test must."""
    prop = fixtures.property_record(PROPERTY_ID)
    old = [fixtures.environment(), prop, drawn_gate("n=3"), drawn_gate("n=5")]
    c = compare(old, [fixtures.environment(), prop, drawn_gate("n=7")])
    assert c["gone"] == [] and not c["failed"] and c["removed"] == 2
    c = compare(old, [fixtures.environment(), prop, rope_gate(1)])
    (gone,) = c["gone"]
    assert (gone["test_id"], gone["gate"], gone["case"], gone["drawn"]) == (PROPERTY_ID, None, None, True)
    assert c["reasons"] == [f"1 gate(s) gone: {PROPERTY_ID}"]


# --- thresholds the new run widened ---------------------------------------------------


def with_tests(*gates, env=None):
    """A run as `make gate` records it: the environment, the gates, and the plugin's test records."""
    ids = dict.fromkeys(g["test_id"] for g in gates)
    return [env or fixtures.environment(), *gates, *(fixtures.outcome_record(i) for i in ids)]


def ratio_gate(measured, baseline_error, factor=2.0, floor=1e-3, case="case1", test_id=TEST_ID):
    record = fixtures.gate_record("rope", "graph", "float16", (2, 8, 128), "error_ratio", measured,
                                  factor * baseline_error + floor, case=case, test_id=test_id)
    return {**record, "baseline_error": baseline_error, "factor": factor, "floor": floor}


def test_a_loosened_threshold_fails_the_comparison(tmp_path):
    old = old_results(tmp_path, with_tests(rope_gate(1, threshold=2)))
    out = run_dir(tmp_path, "new", with_tests(rope_gate(1, threshold=4)))
    assert summary.main([str(out), "--pytest-status", "0", "--compare", old]) == 1
    comparison = json.loads((out / "results.json").read_text())["comparison"]
    (loose,) = comparison["loosened"]
    assert (loose["case"], loose["shape"], loose["field"], loose["old"], loose["new"]) == (
        "case1", "[2, 8, 128]", "threshold", 2, 4)
    assert comparison["reasons"] == [f"1 threshold(s) loosened: {TEST_ID} max_ulp threshold 2 -> 4"]
    (row,) = table_rows((out / "index.html").read_text(), "loosened")
    assert row["cells"][7:] == ["threshold", "2", "4"]
    # Tightened is no defect.
    assert compare(with_tests(rope_gate(1, threshold=4)), with_tests(rope_gate(1, threshold=2)))["loosened"] == []


def test_thresholds_of_fixed_tests_are_compared_per_shape():
    """A derivation may scale with the shape: each shape's threshold is compared with the same shape's."""
    small = fixtures.gate_record("rope", "graph", "float16", (1, 8, 64), "max_ulp", 1, 2, case="case1",
                                 test_id=TEST_ID)
    large = fixtures.gate_record("rope", "graph", "float16", (16, 64, 512), "max_ulp", 1, 8, case="case1",
                                 test_id=TEST_ID)
    assert compare(with_tests(small, large), with_tests(small, large))["loosened"] == []
    c = compare(with_tests(small, large), with_tests({**small, "threshold": 3}, large))
    assert [(e["shape"], e["old"], e["new"]) for e in c["loosened"]] == [("[1, 8, 64]", 2, 3)]


def test_error_ratio_compares_its_factor_and_floor_not_its_measured_bound():
    """Its threshold is factor x the naive baseline's measured error + floor: only the settings are chosen."""
    old = with_tests(ratio_gate(0.01, baseline_error=0.01))
    assert compare(old, with_tests(ratio_gate(0.01, baseline_error=0.05)))["loosened"] == []
    c = compare(old, with_tests(ratio_gate(0.01, baseline_error=0.01, factor=3.0, floor=2e-3)))
    assert [(e["field"], e["old"], e["new"]) for e in c["loosened"]] == [("factor", 2.0, 3.0), ("floor", 1e-3, 2e-3)]
    assert c["failed"]


def test_drawn_thresholds_are_not_compared_but_the_error_ratio_factor_is():
    """A Hypothesis test's threshold may follow its drawn inputs; FlashAttention's factor is a constant of the rule."""
    prop = fixtures.property_record(PROPERTY_ID)
    old = with_tests(drawn_gate("n=3", threshold=2), ratio_gate(0.01, 0.01, case="n=3", test_id=PROPERTY_ID)) + [prop]
    new = with_tests(drawn_gate("n=3", threshold=6), ratio_gate(0.01, 0.01, floor=0.5, case="n=9",
                                                                  test_id=PROPERTY_ID)) + [prop]
    assert compare(old, new)["loosened"] == []
    new = with_tests(ratio_gate(0.01, 0.01, factor=4.0, case="n=9", test_id=PROPERTY_ID)) + [prop]
    (loose,) = compare(old, new)["loosened"]
    assert (loose["test_id"], loose["case"], loose["shape"], loose["field"]) == (PROPERTY_ID, None, None, "factor")


def test_thresholds_are_not_compared_across_devices_or_without_test_records():
    old = with_tests(rope_gate(1, threshold=2))
    c = compare(old, with_tests(rope_gate(1, threshold=4), env=fixtures.environment(device="gpu",
                                                                                   mlx_backend="metal")))
    assert c["loosened"] == [] and "differ in device or backend (cpu/cpu before, gpu/metal now)" in c[
        "thresholds_skipped"]
    c = compare(old, [fixtures.environment(), rope_gate(1, threshold=4)])
    assert c["loosened"] == [] and "no test records" in c["thresholds_skipped"]
    assert compare(old, with_tests(rope_gate(1, threshold=4)))["thresholds_skipped"] is None


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_gate_passes_allow_removed_with_compare_only():
    def summary_command(*variables):
        done = subprocess.run(["make", "-n", "gate", *variables], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        text = done.stdout.replace("\\\n", " ")
        return next(line for line in text.splitlines() if "-m reports.summary" in line)

    assert "--allow-removed" in summary_command("COMPARE=old/results.json", "COMPARE_ALLOW_REMOVED=1")
    assert "--allow-removed" not in summary_command("COMPARE=old/results.json")
    assert "--allow-removed" not in summary_command("COMPARE_ALLOW_REMOVED=1")  # (it needs --compare)
