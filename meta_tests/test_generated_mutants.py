"""Generated mutants (``mutants/generated/``): the generator, the equivalents, the sample, the score, the command.

Generator (static, on this tree): every kernel body file yields mutants (but those ``NO_SITES`` names, which have
nothing to mutate), every operator class the generator claims is generated, each mutant's substitution applies
exactly once and changes one line, ids are unique and survive an unrelated edit, comments and preprocessor lines
are never mutated, each mutant's arms are the compiled arms that run its text, and the equivalents list names
only mutants the generator makes, which it then skips. Sampling and the score are checked on made-up inputs
(Wilson's interval against published values). The command: ``--list`` on this tree, a CPU run (every body mutant
left out, honestly recorded), and a run on a stand-in repository whose "compiled arm" is a test parameter, so the
whole path (collection, resolution, the runner, the records, the score table) runs on a CPU.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from mutants.generated import __main__ as cli
from mutants.generated import bodies
from mutants.generated.bodies import (NO_SITES, OPERATORS, TARGET_TESTS, TARGETS, all_mutants, arm_of, body_files,
                                      family_names, file_mutants, generate, mask, resolve_tests, sites)
from mutants.generated.equivalents import EQUIVALENTS
from mutants.generated.sampling import allocate, stratified_sample
from mutants.generated.score import format_table, run_record, score_rows, wilson
from mutants.runner import REPO_ROOT, mutant_diff, mutated_files
from reports.recorder import read_records

EVERY = all_mutants()
GENERATED = generate()


# --- the generator, on this tree ---------------------------------------------------------


def test_every_body_file_yields_mutants_but_those_with_nothing_to_mutate():
    files = body_files()
    assert set(files.values()) == set(TARGETS) and len(files) >= 15
    per_file = Counter(m.file for m in EVERY)
    without = sorted(f for f in files if not per_file[f])
    assert without == sorted(NO_SITES), f"body files without mutants: {without}; NO_SITES names {sorted(NO_SITES)}"
    for path in NO_SITES:  # (no stale entry: each still exists, and nothing in it is code the operators change)
        assert path in files


def test_the_body_files_are_the_kernels_text_files():
    """The generator's files are the .metal / .h files the kernel modules read (meta_tests/test_mutants.py's)."""
    from meta_tests.test_mutants import KERNELS, loaded_texts

    assert set(body_files()) == {path for kernel in KERNELS for path in loaded_texts(kernel)}


def test_every_operator_class_is_generated_for_every_target():
    assert set(m.operator for m in GENERATED) == set(OPERATORS)
    for target in TARGETS:
        operators = {m.operator for m in GENERATED if m.target == target}
        assert {"relational", "minmax", "guard", "infinity", "barrier"} <= operators, (target, operators)


@pytest.mark.parametrize("target", TARGETS)
def test_each_substitution_applies_exactly_once_and_changes_one_line(target):
    mutated = {}
    for m in (m for m in EVERY if m.target == target):
        (sub,) = m.substitutions
        assert sub.part == "body" and sub.path == m.file and m.in_kernel_body
        ((path, (before, after)),) = mutated_files(m).items()  # StaleMutant unless the old text occurs once
        assert path == m.file and before != after
        changed = [line for line in mutant_diff(m).splitlines() if line.startswith("-") and not line.startswith("---")]
        assert len(changed) == 1 and changed[0][1:] == before.splitlines()[m.line - 1], m.id
        assert (path, after) not in mutated, f"{m.id} makes the same file as {mutated.get((path, after))}"
        mutated[(path, after)] = m.id


def test_ids_and_names_are_unique_and_well_formed():
    assert len({m.id for m in EVERY}) == len({m.name for m in EVERY}) == len(EVERY)
    for m in EVERY:
        path, digest, operator, k = m.id.rsplit(":", 3)
        assert path == m.file and re.fullmatch(r"[0-9a-f]{8}", digest) and operator == m.operator and k.isdigit()
        assert m.name.isidentifier() and m.tests == TARGET_TESTS[m.target]
        assert m.record_fields == {"generated": "body", "id": m.id, "operator": m.operator, "file": m.file,
                                   "line": m.line}


def test_ids_survive_an_unrelated_edit():
    """Lines added above a mutant and an edit of another line keep its id; an edit of its own line retires it."""
    path = "impl/kvq4_decode.metal"
    text = (REPO_ROOT / path).read_text()
    names = family_names([mask(text)[0]])
    before = {m.id: m.line for m in file_mutants(path, text, "kvq4_decode", names)}
    edited = ("  // a comment added at the top\n\n" + text).replace("vword >> (4u * i)", "vword >> (4u * i + 0u)")
    after = {m.id: m.line for m in file_mutants(path, edited, "kvq4_decode", names)}
    retired = {i for i in before if before[i] == 37}  # the vr line itself was edited
    assert any(":fma:" in i for i in retired) and not retired & set(after)
    assert {i: before[i] + 2 for i in before if i not in retired} == {i: after[i] for i in before if i not in retired}


def test_comments_strings_and_preprocessor_lines_are_never_mutated():
    text = ("  // a < b ? c : d, min(x, y), -INFINITY, threadgroup_barrier(mem_flags::mem_threadgroup);\n"
            "  /* i < n; continue; return; */\n"
            "#define LIMIT(a, b) ((a) < (b) ? (a) : (b))\n"
            "#if N > 0\n"
            "  static_assert(LPR == 32 || LPR == 16, \"x < y\");\n"
            "#endif\n"
            "  const uint k = a < b ? 1u : 2u;  // the only code with operators\n")
    found = sites(text)
    assert {(s.operator, text[s.start:s.end]) for s in found} == {
        ("relational", "<"), ("guard", "a < b ? 1u : 2u")}, found
    assert all(s.start >= text.index("  const uint k") for s in found)


def test_the_operators_on_a_small_body():
    text = ("  const uint i = thread_position_in_grid.x, n = uint(geometry[1]);\n"
            "  threadgroup float tops[8];\n"
            "  float m = -INFINITY, l = 0.0f;\n"
            "  for (uint j = 0; j < n; ++j) {\n"
            "    if (j >= i) continue;\n"
            "    m = metal::max(m, x[j]);\n"
            "    l = fma(l, w, x[j]);\n"
            "  }\n"
            "  tops[i] = simd_shuffle_xor(m, 4u);\n"
            "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
            "  if (i == 0) out[0] = l > 0.0f ? m : 0.0f;\n")
    changes = {(s.operator, text[s.start:s.end], s.new) for s in sites(text)}
    assert changes >= {
        ("relational", "<", "<="), ("relational", "<", ">"), ("relational", ">=", ">"), ("relational", "==", "!="),
        ("relational", ">", ">="), ("relational", ">", "<"),
        ("bound", "n", "n - 1"), ("bound", "i", "i - 1"),  # j < n: n - 1 (j <= n is the relational's); j >= i: i - 1
        ("index", "j", "j + 1"), ("index", "i", "i + 1"),  # x[j] (a buffer), tops[i] (threadgroup memory)
        ("minmax", "max", "min"),
        ("guard", "continue;", "{}"), ("guard", "l > 0.0f ? m : 0.0f", "m"), ("guard", "l > 0.0f ? m : 0.0f", "0.0f"),
        ("infinity", "-INFINITY", "0.0f"), ("infinity", "0.0f", "-INFINITY"),
        ("fma", "l, w, x[j]", "l, x[j], w"),
        ("barrier", "threadgroup_barrier(mem_flags::mem_threadgroup);", ""),
        ("shuffle", "4u", "4u / 2"), ("shuffle", "4u", "4u * 2"),
    }, changes
    # never: a bound of a float comparison (l > 0.0f), a comparison made always true (j >= 0), a register index
    assert not any(op == "bound" and old == "0.0f" for op, old, _ in changes)
    assert not any(op == "index" and old in ("0",) for op, old, _ in changes)


def test_arms_are_the_compiled_arms_that_run_the_text():
    by_file = {}
    for m in EVERY:
        by_file.setdefault(m.file, set()).add(m.arms)
    assert by_file["impl/normalized_argmax_fused_scan.metal"] == {("cuda",)}
    assert by_file["impl/multi_query/ring_stager_loop.metal"] == {("cuda",)}
    assert by_file["impl/multi_query/stager_loop.metal"] == {("cuda",)}
    # #if !defined(__CUDACC__): Metal's constant-space overloads; #if defined(__CUDACC__): CUDA's helpers
    assert {m.arms for m in EVERY if m.file == "impl/normalized_argmax.h" and m.line > 40} == {("metal",)}
    lines = Path("impl/multi_query/multi_query.h").read_text().splitlines()
    blocks = [(i + 1, i + 1 + lines[i:].index("#endif")) for i, line in enumerate(lines)
              if line == "#if defined(__CUDACC__)"]  # 1-based lines of each CUDA-only block's #if and #endif
    assert blocks and {m.arms for m in EVERY if m.file == "impl/multi_query/multi_query.h"
                       and any(start < m.line < end for start, end in blocks)} == {("cuda",)}
    two_stage = [m for m in EVERY if m.file == "impl/multi_query/partial.metal" and "ROLE_BARRIER" in m.idea]
    assert two_stage and all(m.arms == ("cuda",) for m in two_stage)
    assert by_file["impl/paged_attention/partial.metal"] == {("cuda", "metal")}


def test_compiled_by_says_what_the_kernel_specs_compile():
    """A file ``COMPILED_BY`` limits is held only by specs of those arms; every other file by a spec of both."""
    from meta_tests.test_mutants import kernel_specs

    specs = [s for kernel in ("impl/paged_attention", "impl/normalized_argmax", "impl/kvq4_decode", "impl/multi_query")
             for s in kernel_specs(kernel)]
    for path in body_files():
        # (not a template's $field line, nor one starting with a marker its kernel fills: STAGER_LOOP, SCAN)
        lines = [line.strip() for line in (REPO_ROOT / path).read_text().splitlines()
                 if len(line.strip()) > 12 and "$" not in line and not re.match(r"\s*[A-Z_]{4,}\b", line)]
        holding = [s for s in specs if all(line in s.source or line in s.header for line in lines)]
        assert holding, f"{path}: no kernel spec holds its text"
        arms = sorted({a for s in holding for a in s.arms})
        assert tuple(arms) == tuple(sorted(bodies.COMPILED_BY.get(path, bodies.GENERATED_ARMS))), path


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("target", TARGETS)
def test_each_target_names_test_files_and_functions_that_exist(target):
    for selector in TARGET_TESTS[target]:
        path = REPO_ROOT / selector.split("::")[0]
        assert path.is_file(), f"{target}: {path} does not exist"
        if "::" in selector:
            assert selector.split("::")[1] in defined_names(path), f"{target}: {selector} is not defined"


def test_equivalents_are_current_and_skipped():
    ids = {m.id for m in EVERY}
    stale = sorted(set(EQUIVALENTS) - ids)
    assert not stale, f"equivalents the generator no longer makes (their line changed: argue again): {stale}"
    assert all(len(why) > 40 for why in EQUIVALENTS.values())
    assert not {m.id for m in GENERATED} & set(EQUIVALENTS)
    assert len(GENERATED) == len(EVERY) - len(EQUIVALENTS)
    assert generate(equivalents={}) == EVERY


def test_the_docs_table_is_what_the_generator_enumerates():
    """docs/generated-mutants.md's per-target, per-operator table, its totals and its arms sentence are this tree's
    counts: a body edit that adds or retires mutants fails here until the table is written again (from ``generate``)."""
    text = (REPO_ROOT / "docs" / "generated-mutants.md").read_text()
    head = re.search(r"On this tree: (\d+) mutants, (\d+) of them equivalent, so (\d+) run:", text)
    assert head, "docs/generated-mutants.md lost its 'On this tree: ...' sentence"
    assert tuple(map(int, head.groups())) == (len(EVERY), len(EQUIVALENTS), len(GENERATED))
    header = "| target | " + " | ".join(OPERATORS) + " | total |"
    assert header in text, f"the table's header is not {header!r}"
    counts = Counter((m.target, m.operator) for m in GENERATED)
    for target in TARGETS:
        row = [counts[(target, op)] for op in OPERATORS]
        line = f"| `{target}` | " + " | ".join(map(str, row)) + f" | {sum(row)} |"
        assert line in text, f"{target}: the table should read {line!r}"
    total = [sum(counts[(t, op)] for t in TARGETS) for op in OPERATORS]
    assert "| all | " + " | ".join(map(str, total)) + f" | {len(GENERATED)} |" in text
    arms = Counter(tuple(sorted(m.arms)) for m in GENERATED)
    assert (f"{arms[('cuda', 'metal')]} run on both compiled arms, {arms[('cuda',)]} on cuda alone, "
            f"{arms[('metal',)]} on metal alone.") in text


def test_tests_resolve_to_the_runs_compiled_arm():
    m = next(m for m in GENERATED if m.target == "kvq4_decode" and m.arms == ("cuda", "metal"))
    cuda_only = bodies.replace(m, arms=("cuda",))
    collected = ["parity/test_kvq4_decode.py::test_kvq4_decode[graph-seed-x]",
                 "parity/test_kvq4_decode.py::test_kvq4_decode[cuda-seed-x]",
                 "parity/test_kvq4_decode.py::test_kvq4_decode[metal-seed-x]",
                 "parity/test_kvq4_decode.py::test_host_only",
                 "properties/test_kvq4_decode_props.py::test_matches_float64_oracle[cuda-seed]",
                 "parity/test_small_inputs.py::test_kvq4_decode_one_token[cuda-bfloat16]",
                 "parity/test_small_inputs.py::test_multi_query_smallest_call[cuda-bfloat16]"]
    resolved, also = resolve_tests([m, cuda_only], ["cuda", "graph"], collected=collected)
    assert resolved.tests == also.tests == (
        "parity/test_kvq4_decode.py::test_kvq4_decode[cuda-seed-x]",
        "properties/test_kvq4_decode_props.py::test_matches_float64_oracle[cuda-seed]",
        "parity/test_small_inputs.py::test_kvq4_decode_one_token[cuda-bfloat16]")
    assert resolved.id == m.id and resolved.substitutions == m.substitutions
    # a metal run: the metal cases; a CUDA-only mutant keeps its tests there (the run leaves it out)
    on_metal, left = resolve_tests([m, cuda_only], ["metal", "graph"], collected=collected)
    assert on_metal.tests == ("parity/test_kvq4_decode.py::test_kvq4_decode[metal-seed-x]",) and left == cuda_only
    # a run without a compiled arm changes nothing: every body mutant is left out
    assert resolve_tests([m], ["graph"], collected=collected) == [m]
    with pytest.raises(ValueError, match="no test of kvq4_decode runs on cuda"):
        resolve_tests([m], ["cuda"], collected=collected[:1])
    assert arm_of("a.py::t[cuda]") == arm_of("a.py::t[seed-cuda-x]") == "cuda" and arm_of("a.py::t") is None


# --- sampling --------------------------------------------------------------------------


def test_allocation_is_proportional_with_one_per_target():
    assert allocate({"a": 500, "b": 300, "c": 190, "d": 10}, 100) == {"a": 50, "b": 30, "c": 19, "d": 1}
    assert allocate({"a": 500, "b": 300, "c": 199, "d": 1}, 10) == {"a": 5, "b": 3, "c": 1, "d": 1}
    assert allocate({"a": 5, "b": 3}, 100) == {"a": 5, "b": 3}
    assert allocate({"a": 5, "b": 0, "c": 3}, 1) == {"a": 1, "b": 0, "c": 0}
    for n in range(0, 60):
        shares = allocate({"a": 30, "b": 20, "c": 7}, n)
        assert sum(shares.values()) == min(n, 57) and all(0 <= shares[t] <= p for t, p in
                                                          {"a": 30, "b": 20, "c": 7}.items())
    with pytest.raises(ValueError):
        allocate({"a": 1}, -1)


def test_the_sample_is_deterministic_stratified_and_stable():
    sample, strata = stratified_sample(GENERATED, 40, seed=3)
    again, _ = stratified_sample(list(reversed(GENERATED)), 40, seed=3)
    assert [m.id for m in sample] == [m.id for m in reversed(again)] and len(sample) == 40
    assert {t: s["sampled"] for t, s in strata.items()} == dict(Counter(m.target for m in sample))
    assert {t: s["population"] for t, s in strata.items()} == dict(Counter(m.target for m in GENERATED))
    other, _ = stratified_sample(GENERATED, 40, seed=4)
    assert {m.id for m in other} != {m.id for m in sample}
    # one mutant more in a target (an added line) moves at most one other out of that target's sample
    extra = [m for m in GENERATED if m.target == "kvq4_decode"][0]
    grown, _ = stratified_sample(GENERATED + [bodies.replace(extra, id="impl/kvq4_decode.metal:ffffffff:fma:0")],
                                 40, seed=3)
    assert len({m.id for m in sample} - {m.id for m in grown}) <= 1


# --- the score ---------------------------------------------------------------------------


def test_wilson_interval():
    low, high = wilson(8, 10)  # Wilson 1927 / Newcombe 1998: 8/10 -> 0.490 .. 0.943
    assert round(low, 3) == 0.490 and round(high, 3) == 0.943
    assert wilson(10, 10)[1] == 1.0 and round(wilson(10, 10)[0], 4) == 0.7225
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 0) is None
    low, high = wilson(81, 263)  # Newcombe's example 81/263: 0.2553 .. 0.3662
    assert round(low, 4) == 0.2553 and round(high, 4) == 0.3662
    with pytest.raises(ValueError):
        wilson(3, 2)


def generated_record(id_, target, status, run="r1", generated="body", **extra) -> dict:
    return {"kind": "mutant", "name": id_.replace(":", "_").replace("/", "_").replace(".", "_"), "status": status,
            "killed": status == "killed", "generated": generated, "id": id_, "operator": "relational",
            "file": "impl/x.metal", "line": 3, "target": target, "run": run, "diff": f"-a\n+b {id_}\n",
            "idea": "relational: a", **extra}


def test_score_rows_count_kills_over_the_non_equivalent_that_ran():
    header = run_record("r1", "body", "mlxgate-bodies", {"paged": {"population": 100, "sampled": 10, "equivalent": 3},
                                                         "argmax": {"population": 4, "sampled": 4}},
                        seed=1, sample=14, device="gpu", arms=["cuda"], profile="dev")
    records = [header] + [generated_record(f"p:{i}", "paged", "killed") for i in range(7)] + [
        generated_record("p:7", "paged", "survived"), generated_record("p:8", "paged", "error"),
        generated_record("p:9", "paged", "left_out"), generated_record("p:8", "paged", "killed", time=2.0)] + [
        generated_record(f"a:{i}", "argmax", "killed") for i in range(3)] + [generated_record("a:3", "argmax", "stale"),
                                                                            {"kind": "mutant", "name": "catalog_one",
                                                                             "status": "survived", "killed": False}]
    rows = {r["target"]: r for r in score_rows(records)}
    paged, argmax, pooled = rows["paged"], rows["argmax"], rows["(all)"]
    # p:8 recorded twice (a rerun): the last record counts
    assert (paged["killed"], paged["survived"], paged["ran"], paged["error"], paged["left_out"]) == (8, 1, 9, 0, 1)
    assert paged["score"] == 8 / 9 and paged["sampled"] is True and paged["interval"] == list(wilson(8, 9))
    assert (paged["sample"], paged["population"], paged["equivalent"]) == (10, 100, 3)
    assert [s["id"] for s in paged["survivors"]] == ["p:7"] and "+b p:7" in paged["survivors"][0]["diff"]
    assert argmax["score"] == 1.0 and argmax["sampled"] is False and argmax["interval"] is None
    assert argmax["stale"] == 1
    assert (pooled["killed"], pooled["ran"], pooled["population"], pooled["sample"]) == (11, 12, 104, 14)
    assert pooled["survivors"] == [] and "catalog_one" not in json.dumps(rows)
    table = format_table(score_rows(records))
    assert "paged" in table and "8/9" in table and "88.9%" in table and "exact: every mutant ran" in table


def test_a_run_without_its_run_record_still_gets_an_interval():
    rows = score_rows([generated_record("x:0", "impl/kv/pool.py", "killed", run="py", generated="python"),
                       generated_record("x:1", "impl/kv/pool.py", "survived", run="py", generated="python")])
    (row,) = rows
    assert row["generated"] == "python" and row["population"] is None and row["sampled"] is None
    assert row["interval"] == list(wilson(1, 2)) and row["score"] == 0.5


# --- the command ------------------------------------------------------------------------------


def test_list_prints_every_mutant_with_its_diff(capsys):
    assert cli.main(["--bodies", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n  @@ ") == len(GENERATED)
    assert f"{len(GENERATED)} mutants; per target: " in out
    for m in GENERATED[::50]:
        assert f"{m.id}  [{'/'.join(m.arms)}] line {m.line}\n  {m.idea}\n" in out
    assert not any(i in out for i in EQUIVALENTS)


def test_list_of_a_sample(capsys):
    assert cli.main(["--bodies", "--list", "--sample", "8", "--seed", "2", "--operators", "relational", "fma"]) == 0
    out = capsys.readouterr().out
    assert "8 mutants; per target: " in out
    assert re.search(r"per operator: relational \d+(, fma \d+)?$", out.strip())
    assert len(re.findall(r"^impl/\S+:[0-9a-f]{8}:(relational|fma):\d+  \[", out, re.M)) == 8


def test_files_and_ids_choose_the_mutants(capsys):
    """--files keeps one body file's mutants (a sample is then of them); --ids runs exactly the ids given, in their
    order, and scores them as chosen (no interval); an unknown or equivalent id, --ids with --sample, or --files
    with --python-mutants is refused by name."""
    merge = "impl/paged_attention/merge.metal"
    assert cli.main(["--bodies", "--list", "--files", merge]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^(impl/\S+:[0-9a-f]{8}:\w+:\d+)  \[", out, re.M)
    assert listed and all(i.startswith(merge + ":") for i in listed)
    assert len(listed) == sum(m.file == merge and m.id not in EQUIVALENTS for m in GENERATED)
    chosen = [listed[3], listed[0]]
    mutants, strata = cli.selection(cli.parse_args(["--bodies", "--ids", *chosen]))
    assert [m.id for m in mutants] == chosen
    assert strata == {"paged_attention": {"population": sum(m.target == "paged_attention" and m.id not in EQUIVALENTS
                                                            for m in GENERATED),
                                          "sampled": 2, "equivalent": 0, "chosen": True}}
    header = run_record("r", "body", "mlxgate-bodies", strata, seed=None, sample=None, device="gpu", arms=["cuda"],
                        profile="dev")
    (row,) = score_rows([header, generated_record(chosen[0], "paged_attention", "killed", run="r"),
                         generated_record(chosen[1], "paged_attention", "survived", run="r")])
    assert row["chosen"] is True and row["interval"] is None and row["score"] == 0.5
    assert "chosen ids: no interval" in format_table([row])
    for argv, name in ((["--ids", "nope:0"], "no such mutant: nope:0"),
                       (["--ids", next(iter(EQUIVALENTS))], "argued equivalent"),
                       (["--files", "impl/none.metal"], "--files: no mutants in impl/none.metal")):
        with pytest.raises(ValueError, match=name):
            cli.selection(cli.parse_args(["--bodies", *argv]))
    for argv, name in ((["--bodies", "--ids", listed[0], "--sample", "2"], "--ids and --sample"),
                       (["--python-mutants", "--files", merge], "--files is for --bodies"),
                       (["--python-mutants", "--ids", "impl/kv/pool.py:0"], "--ids is for --bodies")):
        with pytest.raises(SystemExit):
            cli.parse_args(argv)
        assert name in capsys.readouterr().err


def test_a_cpu_run_leaves_every_body_mutant_out(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "_arms", lambda device, arm: ("cpu", ["graph"]))
    results = tmp_path / "results.jsonl"
    assert cli.main(["--bodies", "--sample", "6", "--seed", "1", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "0 to run, 6 left out" in out
    records = list(read_records(results))
    header, mutants = records[0], records[1:]
    assert header["kind"] == "mutation_run" and header["sample"] == 6 and header["seed"] == 1
    assert sum(s["sampled"] for s in header["strata"].values()) == 6 and header["tool"] == "mlxgate-bodies"
    assert sum(s["equivalent"] for s in header["strata"].values()) == len(EQUIVALENTS)
    assert len(mutants) == 6 and all(r["status"] == "left_out" and r["run"] == header["run"] for r in mutants)
    assert all(r["generated"] == "body" and r["id"] and r["operator"] and r["line"] for r in mutants)


# --- a run, on a stand-in repository -----------------------------------------------------

STANDIN_BODY = ("\n  const uint i = thread_position_in_grid.x, n = x_shape[0];\n"
                "  if (i < n) out[i] = metal::max(x[i], 1.0f);\n")
STANDIN_TEST = ("import pytest\nfrom pathlib import Path\n\n\n"
                "@pytest.mark.parametrize('arm', ['graph', 'cuda'])\n"
                "def test_guard(arm):\n    assert 'if (i < n)' in Path('impl/kvq4_decode.metal').read_text()\n\n\n"
                "def test_host_only():\n    pass\n")
STANDIN_CONFTEST = ("from hypothesis import settings\n\nsettings.register_profile('ci', max_examples=10)\n\n\n"
                    "def pytest_addoption(parser):\n    parser.addoption('--device', default=None)\n")


@pytest.fixture
def standin(tmp_path) -> Path:
    """A repository with one "kernel body" (impl/kvq4_decode.metal) whose tests pass unless its guard changes."""
    root = tmp_path / "repo"
    for folder in ("mutants", "impl", "parity", "properties"):
        (root / folder).mkdir(parents=True)
    (root / "impl" / "kvq4_decode.metal").write_text(STANDIN_BODY)
    (root / "parity" / "test_kvq4_decode.py").write_text(STANDIN_TEST)
    (root / "properties" / "test_kvq4_decode_props.py").write_text(STANDIN_TEST.replace("test_guard", "test_prop"))
    (root / "parity" / "test_small_inputs.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('arm', ['cuda'])\ndef test_kvq4_decode_one_token(arm):\n"
        "    pass\n")
    (root / "conftest.py").write_text(STANDIN_CONFTEST)
    (root / "mutants" / "__init__.py").write_text("")
    shutil.copy(REPO_ROOT / "mutants" / "pytest_plugin.py", root / "mutants" / "pytest_plugin.py")
    return root


def test_a_run_kills_scores_and_records_the_generated_mutants(standin, tmp_path, monkeypatch, capsys):
    """The stand-in's "cuda" arm is a test parameter: the command collects the body's tests, keeps the cuda ones,
    runs each mutant through mutants.runner, records it with its generated fields and prints the score."""
    import mutants.runner as runner

    monkeypatch.setattr(cli, "_arms", lambda device, arm: ("cpu", ["cuda", "graph"]))
    monkeypatch.setattr(runner, "_arms", lambda device, arm: ("cpu", ["cuda", "graph"]))
    expected = {m.operator: m for m in all_mutants(standin)}
    assert set(expected) == {"relational", "bound", "index", "minmax"}
    results = tmp_path / "results.jsonl"
    status = cli.main(["--bodies", "--workers", "1", "--results", str(results)], root=standin)
    out = capsys.readouterr().out
    assert status == 0
    records = list(read_records(results))
    header = records[0]
    mutants = [r for r in records if r["kind"] == "mutant"]
    assert header["kind"] == "mutation_run" and header["sample"] is None and header["seed"] is None
    assert header["strata"] == {"kvq4_decode": {"population": len(all_mutants(standin)), "sampled":
                                                len(all_mutants(standin)), "equivalent": 0}}
    by_operator = {}
    for r in mutants:
        assert r["run"] == header["run"] and r["generated"] == "body" and r["file"] == "impl/kvq4_decode.metal"
        assert r["tests"] == ["parity/test_kvq4_decode.py::test_guard[cuda]",
                              "properties/test_kvq4_decode_props.py::test_prop[cuda]",
                              "parity/test_small_inputs.py::test_kvq4_decode_one_token[cuda]"]
        by_operator.setdefault(r["operator"], set()).add(r["status"])
    assert by_operator == {"relational": {"killed"}, "bound": {"killed"}, "index": {"survived"},
                           "minmax": {"survived"}}
    killed = sum(r["status"] == "killed" for r in mutants)
    assert f"{killed}/{len(mutants)}" in out and "exact: every mutant ran" in out
    assert "SURVIVED impl/kvq4_decode.metal:" in out and "+  if (i < n) out[i] = metal::min(x[i], 1.0f);" in out
    (row,) = score_rows(records)
    assert row["score"] == killed / len(mutants) and row["interval"] is None and len(row["survivors"]) == 3
    assert (standin / "impl" / "kvq4_decode.metal").read_text() == STANDIN_BODY
