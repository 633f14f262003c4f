"""The report renders from fixture result sets and shows what each set holds."""

from __future__ import annotations

import functools
import json
import re
from html import unescape

import pytest

from reports import render
from reports.recorder import append_record
from reports.results import RESULTS_SCHEMA, build_results, dump_results, load_results
from reports.tests import fixtures
from reports.tests.helpers import gate_data, section, table_rows, text_of

SCENARIOS = ("all_pass", "mixed_failures", "skipped_arms", "with_findings", "with_perf_and_mutants")


@functools.cache
def rendered(name: str) -> str:
    """A scenario's report, rendered once per process (plots make rendering the slow part)."""
    return render.render(build_results(getattr(fixtures, name)(), pytest_status=0))


class _Rendered:
    def __getitem__(self, name: str) -> str:
        return rendered(name)


@pytest.fixture
def reports() -> _Rendered:
    """``reports[name]``: rendered on first use, so xdist workers render only what their tests read."""
    return _Rendered()


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_report_is_one_self_contained_page(reports, name):
    html = reports[name]
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html), "external resource reference"
    assert "<link" not in html and "@import" not in html and not re.search(r"url\(\s*['\"]?https?:", html)
    assert html.count("<script>") == 1  # the inline sort/filter script, nothing else
    assert html.count("<script") == 2 - ("No gate records" in html)  # and the gate table's JSON data


def test_all_pass_report(reports):
    html = reports["all_pass"]
    assert text_of(html, "verdict-word") == "PASS"
    assert "60/60" in text_of(html, "verdict")
    rows = gate_data(html)
    assert len(rows) == 60 and all(r["passed"] == 1 for r in rows)
    assert 'id="failed-gates"' not in html and 'id="reasons"' not in html
    assert "Perf: not part of this run" in section(html, "perf")
    assert "Mutants: not part of this run" in section(html, "mutants")
    assert "No findings recorded" in section(html, "findings")


def test_mixed_failures_report_lists_failed_rows_first(reports):
    html = reports["mixed_failures"]
    assert text_of(html, "verdict-word") == "FAIL"
    assert "2 gate record(s) failed" in text_of(html, "reasons")
    verdicts = [r["passed"] for r in gate_data(html)]
    assert len(verdicts) == 62 and verdicts[:2] == [0, 0] and set(verdicts[2:]) == {1}  # failed first
    failed = table_rows(html, "failed-gates")
    assert len(failed) == 2 and all(r["class"] == "fail" for r in failed)
    by_case = {r["cells"][4]: r["cells"] for r in failed}
    long_context = by_case["long-context"]
    assert long_context[6:9] == ["9", "2", "-7 (350% over)"]  # measured, threshold, margin
    assert "worst element index (0, 1, 2)" in long_context[10]  # the failing row carries its evidence
    assert by_case["nan-input"][6] == "inf"  # the recorder's "inf" string is shown as a measurement
    failed_tests = section(html, "tests")
    assert "parity/test_sdpa_decode.py::test_sdpa_decode_long[graph]" in failed_tests
    assert "GateFailure: max_ulp gate failed" in failed_tests


def test_skipped_arms_and_reasons_are_shown(reports):
    html = reports["skipped_arms"]
    skipped = text_of(html, "arms-skipped")
    assert skipped == "cuda: no CUDA device (MLX's CUDA backend is not available); metal: no Metal device"
    reasons = {r["cells"][0]: r["cells"][1] for r in table_rows(html, "skip-reasons")}
    assert reasons["arm metal: no Metal device"].startswith("2 test(s)")
    assert reasons["arm cuda: no CUDA device (MLX's CUDA backend is not available)"].startswith("2 test(s)")


def test_findings_show_title_and_evidence(reports):
    findings = section(reports["with_findings"], "findings")
    assert "mx.argmax returns the first index on ties on the CPU backend" in findings
    assert "established by 1 test(s)" in findings
    assert '<th>mx.argmax</th><td class="id">1</td>' in findings  # evidence, field by field
    assert '<th>input</th><td class="id">[1.0, 3.0, 3.0]</td>' in findings


PERF_COLUMNS = ("benchmark", "kernel", "arm", "shape", "median (ms)", "IQR (ms)", "GB/s", "% copy BW",
                "kernel time (ms)", "kernel GB/s", "baseline (ms)", "change", "judged", "p-value", "effect", "timed",
                "regressed")


def perf_cells(html: str) -> list[dict[str, str]]:
    """The perf table's rows as {column header: cell text}, the headers read from the page."""
    table = section(html, "perf")
    headers = [unescape(re.sub(r"<[^>]+>", "", h)) for h in re.findall(r"<th\b[^>]*>(.*?)</th>", table)]
    assert tuple(headers) == PERF_COLUMNS, headers
    return [dict(zip(headers, row["cells"])) for row in table_rows(html, "perf-table")]


def test_perf_mutants_and_property_failures(reports):
    html = reports["with_perf_and_mutants"]
    assert text_of(html, "verdict-word") == "FAIL"  # paged_prefill_b1 regressed
    perf = perf_cells(html)
    assert perf[0]["benchmark"] == "paged_prefill_b1" and perf[0]["regressed"] == "REGRESSED"
    assert perf[0]["change"] == "+50.0%" and perf[0]["judged"] == "call"  # 15 ms against a 10 ms baseline
    assert perf[1]["timed"] == "eval, 8 calls per round, 8 input sets"  # how it was timed
    assert perf[0]["timed"] == ""  # a record that does not say
    assert perf[0]["kernel time (ms)"] == "not measured" and perf[0]["kernel GB/s"] == ""  # written before kernel time
    assert "<svg" in section(html, "perf")
    assert "1/2 killed (50.0%)" in section(html, "mutants")  # the left-out one is not in the score
    assert "1 left out: their code runs only on an arm this machine lacks" in section(html, "mutants")
    mutants = table_rows(html, "mutant-table")
    assert [m["cells"][1] for m in mutants] == ["SURVIVED", "killed", "left out"]
    assert mutants[2]["cells"][2] == "its code runs only on the cuda arm; this run's arms: graph"
    props = unescape(section(html, "properties"))
    assert table_rows(html, "property-table")[0]["cells"][:2] == ["failed", "properties/test_quant.py::test_dequant_bound"]
    assert "test_roundtrip(\n    n=17,\n)" in props  # the minimal falsifying example
    assert "@reproduce_failure('6.170.17', b'AXicY2BgYGQAAAAZAAY=')" in props
    assert "--mlxgate-reproduce=6.170.17:AXicY2BgYGQAAAAZAAY=" in props
    assert "--hypothesis-seed=12345" in props


def test_one_inline_svg_plot_per_kernel(reports):
    plots = section(reports["mixed_failures"], "plots")
    assert plots.count("<svg") == len(fixtures.KERNELS)
    for kernel in fixtures.KERNELS:
        assert f'data-kernel="{kernel}"' in plots
    assert "<?xml" not in plots and "<!DOCTYPE svg" not in plots


def test_gate_data_cannot_close_its_script_element():
    records = [fixtures.environment(),
               fixtures.gate_record("rope", "graph", "float32", (2,), "max_ulp", 1, 4,
                                    case="</script><script>alert(1)</script>")]
    html = render.render(build_results(records))
    assert "</script><script>alert(1)" not in html
    assert gate_data(html)[0]["case"] == "</script><script>alert(1)</script>"


def test_text_from_records_is_escaped():
    records = [fixtures.environment(),
               fixtures.gate_record("rope", "graph", "float32", (2,), "max_ulp", 9, 4,
                                    test_id="parity/test_x.py::test_y[<script>alert(1)</script>]")]
    html = render.render(build_results(records))
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_render_is_a_pure_function_of_results_json(tmp_path, reports):
    results = build_results(fixtures.mixed_failures(), pytest_status=0)
    path = tmp_path / "results.json"
    dump_results(results, path)
    assert render.render(load_results(path)) == reports["mixed_failures"]


def test_render_command_line(tmp_path):
    path = tmp_path / "results.json"
    dump_results(build_results([r for r in fixtures.skipped_arms() if r["kind"] != "gate"]), path)  # no plots: fast
    assert render.main([str(path), "-o", str(tmp_path / "report.html")]) == 0
    assert text_of((tmp_path / "report.html").read_text(), "verdict-word") == "PASS"


def test_schema_one_results_are_upgraded(tmp_path):
    """results.json of the first summary (schema 1: no verdict) still loads and renders."""
    records = [fixtures.environment(), fixtures.outcome_record("parity/test_x.py::test_y", "failed", message="boom")]
    old = {"schema": 1, "environment": records[0], "totals": {"gates": 0, "passed": 0, "failed": 0, "findings": 0},
           "by_kernel_gate": [], "records": records}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(old))
    results = load_results(path)
    assert results["schema"] == RESULTS_SCHEMA and results["verdict"] == "FAIL"
    assert results["reasons"] == ["1 test(s) failed"]
    assert text_of(render.render(results), "verdict-word") == "FAIL"


def test_results_document_fields():
    results = build_results(fixtures.with_perf_and_mutants(), pytest_status=1)
    assert results["schema"] == RESULTS_SCHEMA and results["verdict"] == "FAIL"
    assert results["reasons"][0] == "pytest exited with status 1"
    t = results["totals"]
    assert t["gates"] == {"total": 20, "passed": 20, "failed": 0, "superseded": 0}
    assert t["perf"] == {"total": 2, "regressed": 1}
    assert t["mutants"] == {"total": 2, "killed": 1, "survived": 1, "stale": 0, "error": 0, "score": 0.5,
                            "left_out": 1}
    assert t["properties"]["failed"] == 1
    assert build_results(fixtures.all_pass())["totals"]["mutants"] is None  # absent, not zero


def test_the_results_schema_is_the_one_documented():
    """results.json's ``schema`` is the version reports/SCHEMA.md documents (a reader keys on it)."""
    from pathlib import Path

    documented = re.findall(r'^## results\.json \(`"schema": (\d+)`\)', (Path(__file__).parents[1] / "SCHEMA.md")
                            .read_text(), re.M)
    assert documented == [str(RESULTS_SCHEMA)] and build_results(fixtures.all_pass())["schema"] == 2


def test_property_totals_count_each_outcome_and_the_examples():
    """totals.properties: passed and failed counted by outcome (an error fails), examples summed (a non-finite
    count written as a string counts nothing)."""
    def prop(name, outcome, examples):
        return {"schema": 1, "kind": "property", "nodeid": f"properties/test_x.py::{name}", "outcome": outcome,
                "examples": examples}

    records = [fixtures.environment(), prop("a", "passed", 100), prop("b", "passed", 40), prop("c", "failed", 7),
               prop("d", "error", "inf"), prop("e", "flaky", 3)]
    assert build_results(records)["totals"]["properties"] == {"total": 5, "failed": 2, "passed": 2, "examples": 150}


def test_records_from_the_recorder_round_trip(tmp_path):
    """nan/inf measurements go through the recorder as strings and render as numbers."""
    path = tmp_path / "results.jsonl"
    append_record(fixtures.gate_record("rope", "graph", "float32", (3,), "nmse", float("nan"), 1e-6,
                                       passed=False), path)
    from reports.recorder import read_records

    html = render.render(build_results(list(read_records(path))))
    assert table_rows(html, "failed-gates")[0]["cells"][6] == "nan"
    assert gate_data(html)[0]["measured"] == "nan"


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(TypeError, match="results must be a results document"):
        render.render("results.json")
    with pytest.raises(ValueError, match="records"):
        render.render({"schema": 2})
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a results document"):
        load_results(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="no such results file"):
        load_results(tmp_path / "missing.json")
    assert render.main([str(tmp_path / "missing.json")]) == 2
    with pytest.raises(ValueError, match=r"records\[0\]"):
        build_results([{"no": "kind"}])


def test_realistic_full_suite_report_is_under_5_mb():
    html = render.render(build_results(fixtures.full_suite(5000), pytest_status=1))
    size = len(html.encode("utf-8"))
    assert size < 5 * 2**20, f"{size / 2**20:.2f} MiB"
    assert len(gate_data(html)) == 5000
    assert section(html, "plots").count("<svg") == len(fixtures.KERNELS)


@pytest.mark.parametrize("record, text", [
    ({"batch": 8, "protocol": "eval", "inputs": "distinct", "input_sets": 3}, "eval, 8 calls per round, 3 input sets"),
    ({"batch": 8, "protocol": "pipelined", "inputs": "shared"}, "pipelined, 8 calls per round, one input set"),
    ({"batch": 1, "protocol": "pipelined", "inputs": "shared", "input_sets": 1}, "pipelined, 1 call per round"),
    ({"batch": 8, "protocol": "eval"}, "eval, 8 calls per round"),  # written before perf recorded its inputs
    ({}, ""),
])
def test_perf_timing_says_how_a_record_was_timed(record, text):
    assert render.timing_text(record) == text


def test_element_ids_are_unique_and_every_reference_resolves(reports):
    """matplotlib numbers ids per figure (figure_1, axes_1, clip paths): inlined side by side they must not clash."""
    for name, figures in (("mixed_failures", len(fixtures.KERNELS)), ("with_perf_and_mutants", 2)):
        page = re.sub(r"<script\b.*?</script>", "", reports[name], flags=re.S)  # (the script builds links itself)
        assert page.count("<svg") == figures
        ids = re.findall(r'(?<=\s)id="([^"]+)"', page)
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        assert repeated == [], repeated[:10]
        clip_paths = re.findall(r"url\(#([^)]+)\)", page)
        references = clip_paths + re.findall(r'(?:xlink:)?href="#([^"]+)"', page)
        assert clip_paths and sorted(set(references) - set(ids)) == []


def test_superseded_shrink_failures_are_counted_apart():
    test_id = "properties/test_rope_props.py::test_rope_property[graph]"

    def step(measured, example):
        return {**fixtures.gate_record("rope", "graph", "float16", (2, 8, 128), "max_ulp", measured, 2,
                                       case=f"n={measured}", test_id=test_id), "example": example}

    records = [fixtures.environment(), step(9, "search"), step(5, "search"), step(1, "search"), step(3, "final"),
               *fixtures.gates(4, kernels=("rope",))]
    results = build_results(records, pytest_status=1)
    assert results["totals"]["gates"] == {"total": 6, "passed": 5, "failed": 1, "superseded": 2}
    html = render.render(results)
    assert text_of(html, "gate-counts") == ("5/6gates passed, 1 failed (and 2 failing records of examples "
                                            "Hypothesis tried before the minimal one, not counted)")
    assert len([r for r in gate_data(html) if not r["passed"]]) == 3  # the table keeps every record
    assert [row["cells"][4] for row in table_rows(html, "failed-gates")] == ["n=3"]  # the minimal example


@pytest.mark.parametrize("deps,shown", [
    ({"lock": "locks/linux-x86_64.txt", "differs": []}, "locks/linux-x86_64.txt, exactly (the tested versions)"),
    ({"lock": "locks/linux-x86_64.txt", "differs": ["ml-dtypes 0.7.0 -> 0.7.1", "numpy 2.4.6 -> 2.5.0"]},
     "2 differ from locks/linux-x86_64.txt (locked -> installed): ml-dtypes 0.7.0 -> 0.7.1; numpy 2.4.6 -> 2.5.0"),
    (None, "no lock for this platform (locks/)"),
])
def test_environment_says_which_lock_the_run_used(deps, shown):
    # a DEPS=newest run names what changed beside its verdict; a locked run says it ran the tested versions
    rows = dict(render.environment_rows(fixtures.environment(dependencies=deps), {}))
    assert rows["dependencies"] == shown


def test_the_environment_record_names_this_checkouts_lock():
    from reports.environment import dependency_state

    state = dependency_state()
    if state is None:
        pytest.skip("locks/ has no lock for this platform")
    assert state["lock"].startswith("locks/") and isinstance(state["differs"], list)


@pytest.mark.parametrize("checks,arms,shown", [
    ([(146, 0)], ("graph",), "front-end check (clang against the Metal stand-in): 146 units type-checked, all clean; "
                             "no Metal device ran the gates"),
    ([(146, 3)], ("graph",), "146 units type-checked, 3 with errors"),
    ([], ("graph", "metal"), "front-end check: not run; a Metal device ran the metal-arm gates"),
])
def test_the_report_says_what_checked_the_metal_arm(checks, arms, shown):
    """The Linux front-end check's units and failures (its equal gate over one flag per unit), and whether a
    Metal device ran the gates: both in the environment table, from the records alone."""
    records = [fixtures.environment(arms_available=arms)]
    for units, failing in checks:
        records.append(fixtures.gate_record("metal_frontend", "graph", "bool", [units], "equal", failing, 0,
                                            test_id="impl/kernels/test_metal_frontend.py::test_every_metal_unit_type_checks"))
    html = render.render(build_results(records))
    row = html[html.index('id="metal-arm"'):].split("</td>", 1)[0]
    assert shown in row


def test_perf_shows_kernel_time_beside_call_time():
    # A case judged on its kernel figure (regressed: 0.09 ms against 0.06), one whose kernel time was measured and
    # its call figure judged, and one where kernel time could not be measured: "not measured", the reason in its
    # tooltip.
    judged = fixtures.perf_record("paged_decode", 1.0e-4, 6.0e-5, True, figure="kernel", kernel_status="measured",
                                  kernel_median_s=9.0e-5, kernel_gbps=745.6, kernels_per_call=2, kernel_calls=20,
                                  kernel_names=[["paged_partial", 1], ["paged_merge", 1]],
                                  kernel_timer="cupti/torch.profiler 2.11.0+cu130")
    called = fixtures.perf_record("dense_decode", 1.0e-4, 1.0e-4, False, figure="call", kernel_status="measured",
                                  kernel_median_s=5.0e-5, kernel_gbps=1342.2, kernels_per_call=1, kernel_calls=20,
                                  kernel_names=[["sdpa_vector", 1]], kernel_timer="cupti/torch.profiler 2.11.0+cu130")
    why = "MLX's GPU backend here is 'cpu', not 'cuda'"
    cpu = fixtures.perf_record("paged_prefill", 2.0e-3, None, False, kernel_status="unavailable", kernel_reason=why)
    html = render.render(build_results([fixtures.environment(), judged, called, cpu]))
    rows = {row["benchmark"]: row for row in perf_cells(html)}
    assert rows["paged_decode"]["kernel time (ms)"] == "0.09" and rows["paged_decode"]["kernel GB/s"] == "745.6"
    assert rows["paged_decode"]["change"] == "+50.0%"  # the judged figure, kernel time: 0.09 against 0.06 ms
    assert rows["paged_decode"]["judged"] == "kernel" and rows["paged_decode"]["regressed"] == "REGRESSED"
    assert rows["paged_decode"]["median (ms)"] == "0.1"  # call time stays in its own column
    assert rows["dense_decode"]["change"] == "+0.0%" and rows["dense_decode"]["judged"] == "call"
    assert rows["dense_decode"]["kernel time (ms)"] == "0.05"
    assert rows["paged_prefill"]["kernel time (ms)"] == "not measured" and rows["paged_prefill"]["judged"] == ""
    perf = unescape(section(html, "perf"))
    assert f'title="unavailable: {why}"' in perf
    assert "2 kernels per call, 20 calls, cupti/torch.profiler 2.11.0+cu130: paged_partial x1; paged_merge x1" in perf


@pytest.mark.parametrize("record, cell, title", [
    ({"kernel_status": "off"}, "not measured", "not asked for"),
    ({"kernel_status": "error", "kernel_reason": "KernelTimeError: c: call 2 of 20 launched 3 kernels, call 1 2"},
     "not measured", "failed: KernelTimeError: c: call 2 of 20 launched 3 kernels, call 1 2"),
    ({}, "not measured", "not recorded"),  # a writer that does not measure kernel time
    ({"kernel_median_s": 6.8e-5, "kernels_per_call": 1, "kernel_calls": 20, "kernel_timer": "t"}, "0.068",
     "1 kernels per call, 20 calls, t"),
])
def test_kernel_time_cell_says_what_was_measured_or_why_not(record, cell, title):
    assert render.kernel_text(record) == (cell, title)
