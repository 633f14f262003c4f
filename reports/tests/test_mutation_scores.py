"""The generated mutants' scores: results.json's ``mutation_scores`` and the report's table and survivors.

Records as ``python -m mutants.generated`` writes them (a ``mutation_run`` record, then ``mutant`` records with
``generated``, ``id``, ``operator``, ``file``, ``line``, ``target``, ``run``), and as a Python mutation tool
would (``generated: "python"``, a module's path as the target). The catalog's mutant records keep their own
totals and table, untouched by generated ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mutants.generated.score import run_record, wilson
from reports import render
from reports.results import build_results, check_record
from reports.tests import fixtures
from reports.tests.helpers import section, table_rows


def generated(id_, target, status, run, generated="body", file="impl/paged_attention/partial.metal", line=23):
    return {"schema": 1, "kind": "mutant", "name": "gen_" + id_.split(":")[1] + "_" + id_.rsplit(":", 1)[1],
            "status": status, "killed": status == "killed", "killed_by": "parity/x.py::t[cuda]" if status == "killed"
            else None, "seconds": 1.5, "idea": f"relational: `a < b` -> `a <= b` ({id_})", "target": target,
            "files": [file], "in_kernel_body": generated == "body", "tests": ["parity/x.py::t[cuda]"], "detail": "",
            "diff": f"--- a/{file}\n+++ b/{file}\n@@ -23 +23 @@\n-  a < b;\n+  a <= b; // {id_}\n",
            "device": "gpu", "arms": ["cuda"], "profile": "dev", "time": 1.7e9, "generated": generated,
            "id": id_, "operator": "relational", "file": file, "line": line, "run": run}


def body_run() -> list[dict]:
    """A sampled body run: paged_attention 9 of 240 (7 killed, 1 survivor, 1 error), argmax 4 of 4 (all killed)."""
    header = run_record("20261202T000000Z-aaaa", "body", "mlxgate-bodies",
                        {"paged_attention": {"population": 240, "sampled": 9, "equivalent": 6},
                         "normalized_argmax": {"population": 4, "sampled": 4, "equivalent": 0}},
                        seed=7, sample=13, device="gpu", arms=["cuda"], profile="dev")
    run = header["run"]
    records = [{"schema": 1, **header}]
    records += [generated(f"impl/paged_attention/partial.metal:0000000{i}:relational:0", "paged_attention",
                          "killed", run) for i in range(7)]
    records += [generated("impl/paged_attention/partial.metal:deadbeef:relational:1", "paged_attention", "survived",
                          run, line=105),
                generated("impl/paged_attention/partial.metal:feedface:barrier:0", "paged_attention", "error", run)]
    records += [generated(f"impl/normalized_argmax.metal:1111111{i}:guard:0", "normalized_argmax", "killed", run,
                          file="impl/normalized_argmax.metal") for i in range(4)]
    return records


def python_run() -> list[dict]:
    """A Python tool's run without a run record: the population is unknown, so the score gets an interval."""
    return [generated(f"impl/kv/pool.py:{i:08x}:operator:0", "impl/kv/pool.py", status, "mutmut-1", "python",
                      file="impl/kv/pool.py", line=10 + i)
            for i, status in enumerate(["killed", "killed", "survived"])]


def catalog() -> list[dict]:
    return [fixtures.mutant_record("swap max for min in the online softmax", True),
            fixtures.left_out_mutant_record("sum the fused lse's lanes upward")]


def test_results_json_scores_each_target_and_keeps_the_catalog_totals_apart():
    results = build_results([fixtures.environment()] + catalog() + body_run() + python_run())
    assert results["totals"]["mutants"] == {"total": 1, "killed": 1, "survived": 0, "stale": 0, "error": 0,
                                            "score": 1.0, "left_out": 1}
    rows = {(r["generated"], r["target"]): r for r in results["mutation_scores"]}
    paged = rows[("body", "paged_attention")]
    assert (paged["killed"], paged["survived"], paged["ran"], paged["error"]) == (7, 1, 8, 1)
    assert paged["score"] == 7 / 8 and paged["sampled"] is True and paged["interval"] == list(wilson(7, 8))
    assert (paged["sample"], paged["population"], paged["equivalent"]) == (9, 240, 6)
    assert [s["id"] for s in paged["survivors"]] == ["impl/paged_attention/partial.metal:deadbeef:relational:1"]
    argmax = rows[("body", "normalized_argmax")]
    assert argmax["score"] == 1.0 and argmax["sampled"] is False and argmax["interval"] is None
    pooled = rows[("body", "(all)")]
    assert (pooled["killed"], pooled["ran"], pooled["sample"], pooled["population"]) == (11, 12, 13, 244)
    pool = rows[("python", "impl/kv/pool.py")]
    assert pool["score"] == 2 / 3 and pool["population"] is None and pool["interval"] == list(wilson(2, 3))
    assert pool["run"] == "mutmut-1" and pool["tool"] is None


def test_generated_records_without_a_run_record_are_scored():
    """A Python tool's records alone (no ``mutation_run`` record): still a section, its population unknown."""
    (row,) = build_results([fixtures.environment()] + python_run())["mutation_scores"]
    assert (row["target"], row["killed"], row["ran"], row["population"]) == ("impl/kv/pool.py", 2, 3, None)


def test_without_generated_records_the_section_is_null():
    results = build_results([fixtures.environment()] + catalog())
    assert results["mutation_scores"] is None
    html = render.render(results)
    assert "Generated mutants: not part of this run." in section(html, "mutation-scores")


def test_the_report_shows_the_score_table_and_every_survivor_with_its_diff():
    html = render.render(build_results([fixtures.environment()] + catalog() + body_run() + python_run()))
    columns = ("target", "kind", "killed / ran", "score", "95% interval", "sample of population", "apart", "run")
    rows = [dict(zip(columns, r["cells"])) for r in table_rows(html, "mutation-score-table")]
    by_target = {r["target"]: r for r in rows}
    assert set(by_target) == {"paged_attention", "normalized_argmax", "(all)", "impl/kv/pool.py"}
    paged = by_target["paged_attention"]
    assert paged["kind"] == "body" and by_target["impl/kv/pool.py"]["kind"] == "python"
    low, high = wilson(7, 8)
    assert paged["killed / ran"] == "7/8" and paged["score"] == "87.5%"
    assert paged["95% interval"] == f"{100 * low:.1f}% – {100 * high:.1f}%"
    assert paged["sample of population"] == "9 of 240 (6 equivalent skipped)" and paged["apart"] == "1 error"
    assert by_target["normalized_argmax"]["95% interval"] == "exact: every mutant ran"
    assert by_target["impl/kv/pool.py"]["sample of population"] == "?"
    scores = section(html, "mutation-scores")
    assert "paged_attention: 1 survivor" in scores and "impl/kv/pool.py: 1 survivor" in scores
    assert "impl/paged_attention/partial.metal:deadbeef:relational:1" in scores
    assert "+  a &lt;= b; // impl/paged_attention/partial.metal:deadbeef:relational:1" in scores
    assert "impl/paged_attention/partial.metal:105" in scores
    assert 'href="#mutation-scores"' in html


def test_the_printed_summary_scores_each_target():
    """``python -m reports.summary`` prints a line per generated target: killed / ran, score, interval, sample,
    what was counted apart and how many survived (their diffs are the report's)."""
    import io

    from reports.summary import print_summary

    results = build_results([fixtures.environment()] + catalog() + body_run() + python_run())
    stream = io.StringIO()
    print_summary(results, Path("out"), None, stream=stream)
    lines = [line.strip() for line in stream.getvalue().splitlines() if line.strip().startswith("generated ")]
    low, high = wilson(7, 8)
    assert (f"generated body mutants paged_attention: 7/8 killed (87.5%, 95% {100 * low:.1f}% – {100 * high:.1f}%; "
            "9 of 240 (6 equivalent skipped)), 1 error; 1 survivor(s), diffs in the report") in lines
    assert ("generated body mutants normalized_argmax: 4/4 killed (100.0%, 95% exact: every mutant ran; 4 of 4)"
            in lines)
    assert any(line.startswith("generated python mutants impl/kv/pool.py: 2/3 killed") for line in lines)
    stream = io.StringIO()
    print_summary(build_results([fixtures.environment()] + catalog()), Path("out"), None, stream=stream)
    assert "generated " not in stream.getvalue()


def test_the_printed_summary_counts_errors_as_failures_and_names_left_out_mutants():
    import io

    from reports.summary import print_summary

    tests = [fixtures.outcome_record(f"parity/test_x.py::t{i}", outcome) for i, outcome in
             enumerate(("passed", "failed", "error", "error", "skipped"))]
    results = build_results([fixtures.environment()] + tests + catalog())
    stream = io.StringIO()
    print_summary(results, Path("out"), None, stream=stream)
    text = stream.getvalue()
    assert "tests: 1 passed, 3 failed, 1 skipped" in text
    assert "mutants: 1/1 killed (1 left out: their arm is not here)" in text  # a left-out mutant ran nothing


def test_the_summary_command_describes_itself(capsys):
    from reports import summary

    with pytest.raises(SystemExit):
        summary.main(["--help"])
    assert " ".join(summary.__doc__.splitlines()[0].split()) in " ".join(capsys.readouterr().out.split())


def test_a_run_of_chosen_ids_shows_its_score_without_an_interval():
    """``--ids``: a set chosen for being undetermined is not a random sample; the report says so, no interval."""
    header = run_record("20261202T010000Z-bbbb", "body", "mlxgate-bodies",
                        {"paged_attention": {"population": 359, "sampled": 2, "equivalent": 0, "chosen": True}},
                        seed=None, sample=None, device="gpu", arms=["cuda"], profile="dev")
    records = [{"schema": 1, **header}] + [
        generated(f"impl/paged_attention/partial_matrix.metal:0000000{i}:infinity:1", "paged_attention", "killed",
                  header["run"], file="impl/paged_attention/partial_matrix.metal") for i in range(2)]
    results = build_results([fixtures.environment()] + records)
    (row,) = results["mutation_scores"]
    assert row["chosen"] is True and row["interval"] is None and row["score"] == 1.0
    html = render.render(results)
    columns = ("target", "kind", "killed / ran", "score", "95% interval", "sample of population", "apart", "run")
    (cells,) = [dict(zip(columns, r["cells"])) for r in table_rows(html, "mutation-score-table")]
    assert cells["95% interval"] == "chosen ids: no interval" and cells["sample of population"] == "2 of 359"


def test_catalog_mutants_render_as_before_beside_generated_ones():
    alone = render.render(build_results([fixtures.environment()] + catalog()))
    beside = render.render(build_results([fixtures.environment()] + catalog() + body_run()))
    assert table_rows(alone, "mutant-table") == table_rows(beside, "mutant-table")
    assert section(alone, "mutants") == section(beside, "mutants")
    assert "gen_" not in section(beside, "mutants")


@pytest.mark.parametrize("record, message", [
    ({"kind": "mutant", "name": "m", "killed": False, "generated": "c++"}, "generated must be one of"),
    ({"kind": "mutation_run", "strata": {}}, "mutation_run record needs its run"),
    ({"kind": "mutation_run", "run": "r", "strata": []}, "mutation_run record needs its run"),
])
def test_malformed_generated_records_are_refused(record, message):
    with pytest.raises(ValueError, match=message):
        check_record(record, "results.jsonl:3")
