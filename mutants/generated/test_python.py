"""Generated Python mutants (``mutants/generated/python.py``): cosmic-ray's mutants of the graph arms, the KV state,
the masks, the gates and the verdicts, run by ``mutants.runner``.

Static, on this tree: every target file yields mutants, each mutant's substitution applies exactly once and gives
exactly the module cosmic-ray wrote, ids are unique and survive an unrelated edit, the equivalents (by rule and by
id) are skipped and current, cosmic-ray's syntax-error mutations are never generated, every target's tests exist,
and the sample is deterministic per seed and stratified per file. The command: ``--list``, its usage errors, and a
run on a stand-in repository (generation, the clean check, the runner, the records, the score table). Then the CI
sample: ``test_a_sample_of_the_python_mutants`` runs a seeded sample of this tree's mutants as the command does
(``MLXGATE_GENERATED_PYTHON``: ``N`` mutants, default ``CI_SAMPLE``, seed today's UTC date; or ``N:SEED``; or
``off``) and records them in the run's results file, so the report's generated-mutants section scores them.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mutants.generated import __main__ as cli
from mutants.generated import python as gen
from mutants.generated.python_equivalents import EQUIVALENTS, RULES, rule_of
from mutants.generated.score import score_rows
from mutants.runner import REPO_ROOT, mutated_files
from reports.recorder import read_records

SAMPLE_ENV = "MLXGATE_GENERATED_PYTHON"
CI_SAMPLE = 10  # mutants per make test run: a survivor runs its target's whole test set (docs/generated-mutants.md)
CI_SECONDS = 120  # the sample's measured cost on 2 cores, for the slow mark (conftest.py schedules by it)
CI_TIMEOUT = 300  # s per mutant run: twice the longest target test set (150 s), so a survivor is not a timeout


@functools.cache
def every_site() -> tuple[gen.PySite, ...]:
    """This tree's sites, equivalents included (enumerated once per process, when a test first needs them)."""
    return tuple(gen.sites())


# --- the generator, on this tree ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(gen.TARGETS))
def test_every_target_file_yields_mutants(target):
    live = [s for s in every_site() if s.file == target and s.equivalent is None]
    assert live, f"{target}: cosmic-ray's operators make no mutant there"


def test_every_operator_family_is_generated():
    families = Counter(gen.family(s.operator) for s in every_site() if s.equivalent is None)
    assert set(families) == set(gen.FAMILIES.values()), families
    assert {name for name, _ in gen.operators()} >= {s.operator for s in every_site()}
    binary = [name for name, _ in gen.operators(["binary"])]
    assert binary and all(name.startswith("core/ReplaceBinaryOperator_") for name in binary)
    assert [name for name, _ in gen.operators(["core/ReplaceAndWithOr"])] == ["core/ReplaceAndWithOr"]
    with pytest.raises(ValueError, match="unknown operator"):
        gen.operators(["relational"])  # a body operator, not one of cosmic-ray's


def test_ids_and_names_are_unique_and_well_formed():
    ids = [s.id for s in every_site()]
    assert len(set(ids)) == len(ids)
    assert len({s.name for s in every_site()}) == len(every_site())
    for s in every_site():
        assert re.fullmatch(r"[\w/.]+\.py:[0-9a-f]{8}:core/\w+:\d+", s.id), s.id
        assert s.name.isidentifier() and s.name.startswith("py_"), s.name


def some_of(target: str, extra: int = 6) -> list:
    """Of a target's live sites: the first of each operator family and ``extra`` more (a fixed, seeded choice)."""
    import random

    live = [s for s in every_site() if s.file == target and s.equivalent is None]
    firsts = {}
    for s in live:
        firsts.setdefault(gen.family(s.operator), s)
    rest = [s for s in live if s not in firsts.values()]
    chosen = set(firsts.values()) | set(random.Random(0).sample(rest, min(extra, len(rest))))
    return [s for s in live if s in chosen]


@pytest.mark.parametrize("target", sorted(gen.TARGETS))
def test_each_substitution_applies_once_and_gives_cosmic_rays_module(target):
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    source = Path(REPO_ROOT, target).read_text()
    live = some_of(target)
    mutants = gen.build(live)
    assert [m.id for m in mutants] == [s.id for s in live]
    for site, m in zip(live, mutants, strict=True):
        (sub,) = m.substitutions
        assert sub.path == target and sub.part == gen.TARGETS[target].part and source.count(sub.old) == 1
        expected = mutate_code(source, cosmic_ray.plugins.get_operator(site.operator)(), site.occurrence)
        assert source.replace(sub.old, sub.new) == expected, m.id
        assert mutated_files(m)[target] == (source, expected)  # the runner applies it (StaleMutant otherwise)
        first = source[:source.index(sub.old)].count("\n") + 1  # the old text's lines hold the mutated line
        assert m.line == site.line and first <= site.line <= first + sub.old.count("\n")
        assert m.target == target and m.tests == gen.TARGETS[target].tests and m.arms == ()
        assert m.record_fields == {"generated": "python", "id": site.id, "operator": site.operator, "file": target,
                                   "line": site.line}


def test_a_sample_of_every_target_builds():
    chosen, strata = gen.draw(every_site(), 2 * len(gen.TARGETS), 3)
    mutants = gen.build(chosen)
    assert {m.target for m in mutants} == set(gen.TARGETS)
    assert sum(s["sampled"] for s in strata.values()) == len(mutants)
    for m in mutants:
        assert mutated_files(m)


def test_ids_survive_an_unrelated_edit(tmp_path):
    target = "impl/masks.py"
    source = Path(REPO_ROOT, target).read_text()
    lines = source.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith("def "))
    edited = "".join(lines[:first]) + "def _unrelated(a, b):\n    return a + b * 2 > 1\n\n\n" + "".join(lines[first:])
    Path(tmp_path, target).parent.mkdir(parents=True)
    Path(tmp_path, target).write_text(edited)
    before = {s.id: s for s in every_site() if s.file == target}
    after = {s.id: s for s in gen.sites(tmp_path, targets=[target])}
    assert set(before) <= set(after)  # every mutant keeps its id; the new function's are new ids
    assert all(after[i].line == before[i].line + 4 for i in before)
    new = set(after) - set(before)
    assert new and all(after[i].line in (first + 1, first + 2) for i in new)


def test_the_scope_keeps_to_the_named_functions():
    target = "impl/normalized_argmax.py"
    tree = ast.parse(Path(REPO_ROOT, target).read_text())
    spans = {n.name: (n.lineno - len(n.decorator_list), n.end_lineno) for n in tree.body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    scope = gen.TARGETS[target].scope
    for s in (s for s in every_site() if s.file == target):
        owner = [name for name, (a, b) in spans.items() if a <= s.line <= b]
        assert owner and owner[0] in scope, (s.id, owner)
    assert {"row_launch", "fused_launch", "_kernel_argmax"}.isdisjoint(scope)


def test_syntax_errors_cosmic_ray_would_write_are_not_generated(tmp_path):
    source = ("from __future__ import annotations\n\n\ndef f(a, *, b: int | None = None, **kw) -> int | None:\n"
              "    c = {**kw, 'x': a * -b}\n    return -(-a // 2) if not c else 2 ** -a\n")
    Path(tmp_path, "impl").mkdir()
    Path(tmp_path, "impl/masks.py").write_text(source)
    every = gen.sites(tmp_path, targets=["impl/masks.py"])
    live = [s for s in every if s.equivalent is None]
    for m in gen.build(live, tmp_path):  # each compiles (build raises on a syntax error)
        compile(Path(tmp_path, "impl/masks.py").read_text().replace(m.substitutions[0].old,
                                                                     m.substitutions[0].new), "m", "exec")
    assert not any(s.line == 4 and s.equivalent is None for s in every)  # the bare *, **kw, the annotations
    assert {s.operator for s in every if s.line == 4 and s.equivalent} >= {"core/ReplaceBinaryOperator_BitOr_Add"}
    assert not any(s.operator.startswith("core/ReplaceBinaryOperator_Pow_") and s.line == 5 for s in every)
    assert any(s.operator == "core/ReplaceUnaryOperator_USub_Not" and s.line == 6 for s in live)  # -(-a // 2)
    assert not any(s.operator.endswith("_Not") and s.line == 5 for s in every)  # a * not b


# --- equivalents --------------------------------------------------------------------------------------------


def test_annotations_are_equivalent_by_rule_and_skipped():
    marked = [s for s in every_site() if s.equivalent and s.equivalent.startswith("annotation:")]
    assert marked and all(s.equivalent == f"annotation: {RULES['annotation']}" for s in marked)
    source = "from __future__ import annotations\n\n\ndef f(x: int | None) -> int | None:\n    return x | 1\n"
    import parso
    from cosmic_ray.ast import ast_nodes

    bars = [n for n in ast_nodes(parso.parse(source)) if n.type == "operator" and n.value == "|"]
    assert [rule_of(n, source) for n in bars] == ["annotation", "annotation", None]
    assert [rule_of(n, source.replace("from __future__ import annotations\n", "")) for n in bars[:1]] == [None]
    built = {m.id for m in gen.sample(None, 0, targets=["impl/kv/errors.py"])[0]}
    assert built and not built & {s.id for s in marked}


def test_equivalents_by_id_are_current_and_skipped():
    produced = {s.id for s in every_site()}
    stale = sorted(set(EQUIVALENTS) - produced)
    assert not stale, f"equivalents the generator no longer makes (their line changed: argue again or drop): {stale}"
    assert all(isinstance(why, str) and len(why) > 20 for why in EQUIVALENTS.values())
    some = next(s for s in every_site() if s.file == "impl/kv/errors.py" and s.equivalent is None)
    every = gen.sites(targets=["impl/kv/errors.py"], equivalents={some.id: "an argument"})
    assert next(s for s in every if s.id == some.id).equivalent == "an argument"
    mutants, strata = gen.sample(None, 0, targets=["impl/kv/errors.py"], equivalents={some.id: "an argument"})
    assert some.id not in {m.id for m in mutants}
    assert strata["impl/kv/errors.py"]["equivalent"] == sum(1 for s in every if s.equivalent)


# --- the targets' tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(gen.TARGETS))
def test_each_target_names_test_files_and_functions_that_exist(target):
    assert Path(REPO_ROOT, target).is_file()
    for test in gen.TARGETS[target].tests:
        path, _, function = test.partition("::")
        assert Path(REPO_ROOT, path).is_file() and Path(path).name.startswith("test_"), test
        if function:
            assert re.search(rf"^def {re.escape(function)}\(", Path(REPO_ROOT, path).read_text(), re.M), test


# --- sampling --------------------------------------------------------------------------------------------------


def test_the_sample_is_deterministic_per_seed_and_stratified():
    one, strata = gen.draw(every_site(), 40, 7)
    again, strata_again = gen.draw(list(reversed(every_site())), 40, 7)  # the order sites come in does not matter
    other, _ = gen.draw(every_site(), 40, 8)
    assert {s.id for s in one} == {s.id for s in again} and strata == strata_again
    assert {s.id for s in one} != {s.id for s in other}
    assert len(one) == 40 and sum(s["sampled"] for s in strata.values()) == 40
    assert all(s.equivalent is None for s in one)
    per_target = Counter(s.file for s in one)
    assert set(per_target) == set(gen.TARGETS)  # each target at least one when the sample allows
    live = Counter(s.file for s in every_site() if s.equivalent is None)
    for target, row in strata.items():
        assert row["population"] == live[target] and row["sampled"] == per_target[target]
        assert row["equivalent"] == sum(1 for s in every_site() if s.file == target and s.equivalent)
    biggest = max(live, key=live.get)
    assert per_target[biggest] == max(per_target.values())  # proportional


def test_every_mutant_when_no_sample_is_asked_for():
    mutants, strata = gen.sample(None, 0, targets=["impl/kv/quantization.py"])
    assert len(mutants) == strata["impl/kv/quantization.py"]["population"] \
        == strata["impl/kv/quantization.py"]["sampled"] > 0


# --- a run, on a stand-in repository ---------------------------------------------------------------------------


@pytest.fixture()
def standin(tmp_path, monkeypatch):
    """A repository of one target (impl/masks.py) whose test kills most arithmetic mutants and misses the rest; a
    changed ``LIMIT`` breaks the test module's import."""
    root = tmp_path / "repo"
    (root / "impl").mkdir(parents=True)
    (root / "impl/masks.py").write_text(
        "from __future__ import annotations\n\n\ndef window_end(offset: int, n: int | None) -> int:\n"
        "    return offset + (n or 0)\n\n\ndef unused(a):\n    return a * 3\n\n\nLIMIT = 4\n")
    (root / "test_masks.py").write_text(
        "from impl.masks import LIMIT, window_end\n\nif LIMIT != 4:\n    raise ImportError('LIMIT changed')\n\n\n"
        "def test_window_end():\n    assert window_end(3, 2) == 5\n")
    (root / "conftest.py").write_text(
        "from hypothesis import settings\n\nsettings.register_profile('ci', max_examples=10)\n\n\n"
        "def pytest_addoption(parser):\n    parser.addoption('--device', default=None)\n")
    (root / "impl/__init__.py").write_text("")
    (root / "mutants").mkdir()
    (root / "mutants/__init__.py").write_text("")
    shutil.copy(REPO_ROOT / "mutants/pytest_plugin.py", root / "mutants/pytest_plugin.py")
    monkeypatch.setitem(gen.TARGETS, "impl/masks.py", gen.Target(("test_masks.py",)))
    return root


def test_a_run_kills_records_and_scores_the_python_mutants(standin, tmp_path, capsys):
    """The command's whole path on the stand-in: generation, the clean check, the runner, the records, the table."""
    expected, strata = gen.sample(None, 0, standin, targets=["impl/masks.py"])
    assert strata["impl/masks.py"]["equivalent"] > 0  # the annotation's | mutants
    results = tmp_path / "results.jsonl"
    status = cli.main(["--python-mutants", "--targets", "impl/masks.py", "--device", "cpu", "--timeout", "60",
                       "--results", str(results)], root=standin)
    out = capsys.readouterr().out
    assert status == 0, out
    header, *records = read_records(results)
    assert header["kind"] == "mutation_run" and header["generated"] == "python" and header["tool"] == gen.TOOL
    assert header["sample"] is None and header["seed"] is None and header["strata"] == strata
    assert records and {r["id"] for r in records} == {m.id for m in expected}
    assert all(r["kind"] == "mutant" and r["generated"] == "python" and r["run"] == header["run"]
               and r["target"] == r["file"] == "impl/masks.py" and r["in_kernel_body"] is False for r in records)
    statuses = Counter(r["status"] for r in records)
    assert statuses["killed"] > 0 and statuses["survived"] > 0 and sum(statuses.values()) == statuses["killed"] \
        + statuses["survived"], statuses
    survivors = {r["line"] for r in records if r["status"] == "survived"}
    assert 9 in survivors  # unused(): no test runs it
    limit = [r for r in records if r["line"] == 12]  # LIMIT = 4: the test module no longer imports, a kill
    assert limit and all(r["status"] == "killed" and r["killed_by"] == "test_masks.py" for r in limit), limit
    (row,) = score_rows([header, *records])
    assert row["killed"] == statuses["killed"] and row["sampled"] is False and row["interval"] is None
    assert f"{statuses['killed']}/{len(records)}" in out and "exact: every mutant ran" in out
    assert "SURVIVED impl/masks.py:" in out and "+    return a / 3" in out
    assert (standin / "impl/masks.py").read_text().endswith("return a * 3\n\n\nLIMIT = 4\n")


def test_list_and_usage_errors(capsys):
    assert cli.main(["--python-mutants", "--list", "--targets", "impl/kv/quantization.py", "--operators",
                     "comparison", "number"]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^(impl/kv/quantization\.py:[0-9a-f]{8}:core/\w+:\d+)  line \d+$", out, re.M)
    live = [s for s in every_site() if s.file == "impl/kv/quantization.py" and s.equivalent is None
            and gen.family(s.operator) in ("comparison", "number")]
    assert listed == [s.id for s in live] and out.count("\n  @@ ") == len(live)
    assert re.search(rf"{len(live)} mutants; per target: impl/kv/quantization.py {len(live)}/{len(live)} \(\d+ "
                     r"equivalent skipped\); per operator family: comparison \d+, number \d+$", out.strip())
    assert cli.main(["--python-mutants", "--list", "--sample", "5", "--seed", "4"]) == 0
    assert "5 mutants; per target: " in capsys.readouterr().out
    for bad in (["--targets", "impl/nowhere.py"], ["--operators", "relational"], ["--arm", "cuda"],
                ["--workers", "0"], ["--sample", "0"]):
        with pytest.raises(SystemExit) as exit_:
            cli.parse_args(["--python-mutants", *bad])
        assert exit_.value.code == 2, bad
    assert "--arm is for --bodies" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse_args(["--python-mutants", "--bodies"])  # one generator per run


# --- the CI sample ---------------------------------------------------------------------------------------------


def ci_selection(value: str) -> tuple[int, int] | None:
    """(sample size, seed) of ``MLXGATE_GENERATED_PYTHON`` (``N``, ``N:SEED``, ``off``); the default seed is today's
    UTC date ordinal, so CI meets another sample each day, the same one all day."""
    if value == "off":
        return None
    size, _, seed = value.partition(":")
    if not size.isdigit() or int(size) < 1 or (seed and not seed.lstrip("-").isdigit()):
        raise ValueError(f"{SAMPLE_ENV} must be N, N:SEED or off, got {value!r}")
    return int(size), int(seed) if seed else datetime.now(timezone.utc).date().toordinal()


def test_ci_selection_values():
    assert ci_selection("off") is None
    assert ci_selection("5:3") == (5, 3)
    assert ci_selection("5")[0] == 5
    with pytest.raises(ValueError, match=SAMPLE_ENV):
        ci_selection("all")


@pytest.mark.slow(seconds=CI_SECONDS)
def test_a_sample_of_the_python_mutants(request):
    """A seeded sample of this tree's Python mutants, run as ``python -m mutants.generated --python-mutants`` runs
    them and recorded in this run's results file (the report scores them); survivors are the run's finding, in the
    records and the report with their diffs, not a failure. No clean check: the same ``make test`` runs every test
    they use on the unmutated tree."""
    choice = ci_selection(os.environ.get(SAMPLE_ENV, str(CI_SAMPLE)))
    if choice is None:
        pytest.skip(f"{SAMPLE_ENV}=off: no generated Python mutants in this pytest run")
    size, seed = choice
    argv = ["--python-mutants", "--sample", str(size), "--seed", str(seed), "--workers", "2", "--no-clean-check",
            "--timeout", str(CI_TIMEOUT)]
    if request.config.mlxgate_device:
        argv += ["--device", request.config.mlxgate_device]
    args = cli.parse_args(argv)
    mutants, strata = cli.selection(args)
    lines: list[str] = []
    status, records = cli.execute(args, mutants, strata, log=lines.append)
    assert status == 0, "\n".join(lines)
    results = [r for r in records if r["kind"] == "mutant"]
    assert len(results) == len(mutants) == size
    stale = [r["id"] for r in results if r["status"] == "stale"]
    assert not stale, f"generated mutants that did not apply (the tree changed during the run?): {stale}"
    print("\n".join(lines))
