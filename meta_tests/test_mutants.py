"""The mutant catalog and its runner (``mutants/``): the catalog is sound, the mechanism has teeth.

Catalog (static, no pytest run): at least 25 mutants over every kernel and the
cache state; every substitution applies exactly once to today's tree; a kernel
mutant changes a compiled body AND the graph arm that mirrors it; every gate
and property module (``parity/test_*.py``, ``properties/test_*.py``) is named
as a killer by some mutant, so a new module without teeth fails here; every
killing test names a function that exists.

Mechanism (real runs, on a tiny stand-in repository so they are fast and
hermetic, and once on this tree): a harmless mutant survives and fails the
run, its diff printed; a stale substitution is an error and runs nothing; a
killing test that fails on the clean tree makes the mutant an error, not a
kill; a run where no killing test ran is an error; a run leaves the repository
exactly as it was (``git status``, file bytes) and the real results file
untouched except for the records it appends.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import __main__ as cli
from mutants.catalog import CATALOG, GAPS, Mutant, Substitution, by_name
from mutants.runner import (REPO_ROOT, StaleMutant, expand_tests, mutant_diff, mutated_files, rotation, run_catalog,
                            selects, tree_files)
from reports.recorder import read_records

# The kernels, laid out as impl/kernels/compile.py says: a module impl/<name>.py with its bodies, pieces and
# header beside it (impl/<name>.metal, impl/<name>_<piece>.metal, impl/<name>.h), or a package impl/<name>/.
KERNELS = ("impl/paged_attention", "impl/normalized_argmax", "impl/kvq4_decode", "impl/multi_query")
KERNEL_TEXT = (".metal", ".h")  # a kernel's body, piece and header files: what metal and cuda compile
CACHE_AND_MASK_MODULES = ("impl/masks.py", "impl/kv/pool.py", "impl/kv/paged.py", "impl/kv/rows.py",
                          "impl/kv/view.py", "impl/kv/dense.py")


def module_of(test: str) -> str:
    return test.split("::")[0]


# --- the catalog ------------------------------------------------------------------


def kernel_of(path: str) -> str | None:
    """The kernel (``KERNELS``) whose files hold ``path``, or None."""
    for kernel in KERNELS:
        folder, name = kernel.rsplit("/", 1)
        if re.fullmatch(rf"{re.escape(folder)}/{re.escape(name)}(/[^/]+|\.py|\.h|(_\w+)?\.metal)", path):
            return kernel
    return None


def kernels_changed(mutant: Mutant) -> set[str]:
    return {kernel_of(path) for path in mutant.files} - {None}


def test_catalog_has_at_least_25_mutants_over_every_kernel_and_the_cache():
    assert len(CATALOG) >= 25
    touched = {kernel_of(path) or path for m in CATALOG for path in m.files}
    missing = [path for path in KERNELS + CACHE_AND_MASK_MODULES if path not in touched]
    assert not missing, f"no mutant changes {missing}"
    for kernel in KERNELS:  # several ideas per kernel, not one token mutant each
        assert sum(kernel in kernels_changed(m) for m in CATALOG) >= 4, kernel


def test_kernel_of_names_each_kernels_files():
    assert kernel_of("impl/paged_attention/partial.metal") == kernel_of("impl/paged_attention/graph.py") == (
        "impl/paged_attention")
    assert kernel_of("impl/normalized_argmax.py") == kernel_of("impl/normalized_argmax_fused_scan.metal") == (
        kernel_of("impl/normalized_argmax.h")) == "impl/normalized_argmax"
    assert kernel_of("impl/kvq4_decode.metal") == "impl/kvq4_decode"
    assert kernel_of("impl/masks.py") is kernel_of("impl/paged_attention_x.py") is kernel_of("impl/kv/pool.py") is None


@pytest.mark.parametrize("mutant", CATALOG + GAPS, ids=lambda m: m.name)
def test_every_substitution_applies_exactly_once(mutant):
    texts = mutated_files(mutant)  # StaleMutant otherwise
    assert all(before != after for before, after in texts.values())
    assert mutant_diff(mutant).count("\n-") >= 1


def kernel_specs(kernel: str) -> list:
    """Every KernelSpec the kernel's module (a package: its modules) defines."""
    import importlib
    import pkgutil

    from impl.kernels import KernelSpec

    module = importlib.import_module(kernel.replace("/", "."))
    modules = [module] + [importlib.import_module(m.name) for m in
                          pkgutil.walk_packages(getattr(module, "__path__", []), f"{module.__name__}.")]
    specs = list({id(v): v for m in modules for v in vars(m).values() if isinstance(v, KernelSpec)}.values())
    assert specs, f"{kernel} defines no KernelSpec"
    return specs


def kernel_sources(kernel: str) -> list[str]:
    """Every KernelSpec body and header the kernel defines (what metal and cuda compile)."""
    return [text for spec in kernel_specs(kernel) for text in (spec.source, spec.header)]


def loaded_texts(kernel: str) -> set[str]:
    """The body, piece and header files the kernel's Python reads (``kernel_text(__file__, name)``)."""
    loaded = set()
    for module in REPO_ROOT.glob("impl/**/*.py"):
        if kernel_of(module.relative_to(REPO_ROOT).as_posix()) == kernel:
            for name in re.findall(r'kernel_text\(__file__, "([^"]+)"\)', module.read_text()):
                loaded.add((module.parent / name).relative_to(REPO_ROOT).as_posix())
    return loaded


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_text_file_is_read_by_its_kernel(kernel):
    """A body mutant changes a file the specs are built from: each kernel's .metal / .h files are the ones its
    Python reads, none left over (a stale copy would take mutants the kernels never see)."""
    files = {p.relative_to(REPO_ROOT).as_posix() for p in REPO_ROOT.glob("impl/**/*")
             if p.suffix in KERNEL_TEXT and kernel_of(p.relative_to(REPO_ROOT).as_posix()) == kernel}
    assert files and files == loaded_texts(kernel)


def host_only(mutant: Mutant) -> bool:
    """A mutant of a kernel module's host code (call caching, launch plumbing), not of the kernel."""
    return all(sub.part == "code" for sub in mutant.substitutions)


def check_file_kind(mutant: Mutant, sub: Substitution) -> None:
    """A body substitution changes a .metal / .h file its kernel reads; a graph or code one, the kernel's Python."""
    kernel = kernel_of(sub.path)
    if sub.part == "body":
        assert sub.path in loaded_texts(kernel), (
            f"{mutant.name}: body substitution in {sub.path}, which is no body, piece or header {kernel} reads")
    else:
        assert sub.path.endswith(".py"), f"{mutant.name}: {sub.part} substitution in {sub.path}: a kernel text file"


@pytest.mark.parametrize("mutant", [m for m in CATALOG + GAPS if kernels_changed(m) and host_only(m)],
                         ids=lambda m: m.name)
def test_host_mutants_of_kernel_modules_stay_out_of_the_bodies(mutant):
    """A kernel module's host-code mutant needs no graph mirror, but then it must not touch a body."""
    for sub in (s for s in mutant.substitutions if kernel_of(s.path)):
        check_file_kind(mutant, sub)
        assert not any(sub.old in text for text in kernel_sources(kernel_of(sub.path))), (
            f"{mutant.name}: {sub.old!r} is in a kernel body: label it body and give it a graph mirror")


@pytest.mark.parametrize("mutant", [m for m in CATALOG + GAPS if kernels_changed(m)
                                    and not host_only(m) and not m.arms], ids=lambda m: m.name)
def test_kernel_mutants_change_the_body_and_its_graph_mirror(mutant):
    """One idea, every implementation: a body substitution (metal and cuda compile it) and a graph one."""
    parts = {s.part for s in mutant.substitutions}
    assert parts == {"body", "graph"}, f"{mutant.name}: parts {parts}; a kernel mutant needs body and graph"
    for sub in mutant.substitutions:
        check_file_kind(mutant, sub)
        in_body = any(sub.old in text for text in kernel_sources(kernel_of(sub.path)))
        assert in_body == (sub.part == "body"), (
            f"{mutant.name}: {sub.old!r} is labelled {sub.part} but {'is' if in_body else 'is not'} in a kernel body")
    assert mutant.in_kernel_body
    assert all("{arm}" in test for test in mutant.tests), f"{mutant.name}: kernel killers run on every arm"


@pytest.mark.parametrize("mutant", [m for m in CATALOG + GAPS if m.arms], ids=lambda m: m.name)
def test_arm_limited_mutants_change_only_what_their_arms_compile(mutant):
    """A mutant without a graph mirror names its arms, and each of its substitutions is in kernel bodies that only
    those arms compile (``KernelSpec.arms``): a text shared with a body other arms compile needs the graph mirror."""
    assert {s.part for s in mutant.substitutions} == {"body"}, f"{mutant.name}: an arm-limited mutant is body only"
    for sub in mutant.substitutions:
        check_file_kind(mutant, sub)
        specs = kernel_specs(kernel_of(sub.path))
        holding = [spec for spec in specs if sub.old in spec.source or sub.old in spec.header]
        assert holding, f"{mutant.name}: {sub.old!r} is in no kernel body"
        wider = [spec.name for spec in holding if not set(spec.arms) <= set(mutant.arms)]
        assert not wider, f"{mutant.name}: {sub.old!r} is also in {wider}, which arms beyond {mutant.arms} compile"
    assert all("{arm}" in test for test in mutant.tests), f"{mutant.name}: its killers run on its arms"


def test_catalog_arms_are_the_registry_arms():
    from impl.arms import ARMS as REGISTRY_ARMS
    from mutants.catalog import ARMS

    assert ARMS == REGISTRY_ARMS


# Modules that test the platform, not the product: no product mutant can be named as their kill, with the reason.
PLATFORM_PROBES = {
    "parity/test_metal_probes.py": "probes of Metal itself (fragment layout, simdgroup_load origin, pipeline thread "
                                   "limit, conversion rounding, math mode) that the bodies rely on; the product code "
                                   "they check (sg_fragment_row / col, simdgroup_load_x4 in multi_query.h) is in a "
                                   "header the cuda arm compiles too, whose mutants test_simdgroup_matrix_semantics "
                                   "kills",
}


def test_every_gate_and_property_module_is_named_as_a_killer():
    """A gate or property module added later without a mutant it kills fails here (platform probes excepted,
    each with its reason: ``PLATFORM_PROBES``)."""
    modules = sorted(p.relative_to(REPO_ROOT).as_posix()
                     for folder in ("parity", "properties") for p in (REPO_ROOT / folder).glob("test_*.py"))
    named = {module_of(test) for m in CATALOG for test in m.tests}
    assert set(PLATFORM_PROBES) <= set(modules), "a platform probe module moved: update PLATFORM_PROBES"
    missing = [m for m in modules if m not in named and m not in PLATFORM_PROBES]
    assert not missing, f"no mutant in mutants/catalog.py names a test of {missing} as its killer"


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("mutant", CATALOG + GAPS, ids=lambda m: m.name)
def test_killing_tests_exist(mutant):
    for test in mutant.tests:
        path = REPO_ROOT / module_of(test)
        assert path.is_file(), f"{mutant.name}: {path} does not exist"
        name = test.split("::")[1].split("[")[0]
        assert name in defined_names(path), f"{mutant.name}: {module_of(test)} defines no {name}"


def test_expand_tests_and_rotation():
    assert expand_tests(["a.py::t[{arm}-x]", "b.py::u", "a.py::t[{arm}-x]"], ["graph", "cuda"]) == [
        "a.py::t[graph-x]", "a.py::t[cuda-x]", "b.py::u"]
    shares = [rotation(CATALOG, 4, key) for key in range(4)]
    assert sorted(m.name for share in shares for m in share) == sorted(m.name for m in CATALOG)
    assert rotation(CATALOG, 4, 1) == rotation(CATALOG, 4, 5)
    with pytest.raises(ValueError, match="share"):
        rotation(CATALOG, 0)
    with pytest.raises(ValueError, match="no mutant named nope"):
        by_name(["nope"])


def test_bad_catalog_entries_are_refused():
    with pytest.raises(ValueError, match="arms must be"):
        Mutant("opencl_only", "idea", "masks", (Substitution("impl/masks.py", "a", "b"),), ("t.py::t",),
               arms=("opencl",))
    with pytest.raises(ValueError, match="part must be one of"):
        Substitution("impl/masks.py", "a", "b", "kernel")
    with pytest.raises(ValueError, match="differs"):
        Substitution("impl/masks.py", "same", "same")
    with pytest.raises(ValueError, match="identifier"):
        Mutant("not a name", "idea", "masks", (Substitution("impl/masks.py", "a", "b"),), ("t.py::t",))


# --- the mechanism, on a stand-in repository ---------------------------------------

STANDIN = {
    "calc.py": "def add(a, b):\n    return a + b  # the sum\n\n\ndef half(x):\n    return x / 2\n",
    "test_calc.py": ("import pytest\n\nfrom calc import add, half\n\n\n"
                     "def test_add():\n    assert add(2, 3) == 5\n\n\n"
                     "def test_half_is_broken():\n    assert half(3) == 1\n\n\n"
                     "@pytest.mark.parametrize('x', [3])\ndef test_half_of_params_is_broken(x):\n"
                     "    assert half(x) == 1\n\n\n"
                     "@pytest.mark.skip(reason='stand-in skip')\ndef test_skipped():\n    assert add(1, 1) == 2\n"),
    # The runner's plugin derives its profile from "ci", which the real conftest registers.
    "conftest.py": "from hypothesis import settings\n\nsettings.register_profile('ci', max_examples=10)\n",
}


@pytest.fixture
def standin(tmp_path) -> Path:
    """A tiny repository: calc.py, its tests, and the runner's pytest plugin (not a git checkout)."""
    root = tmp_path / "repo"
    (root / "mutants").mkdir(parents=True)
    for name, text in STANDIN.items():
        (root / name).write_text(text)
    (root / "mutants" / "__init__.py").write_text("")
    shutil.copy(REPO_ROOT / "mutants" / "pytest_plugin.py", root / "mutants" / "pytest_plugin.py")
    return root


def standin_mutant(name: str, old: str, new: str, *tests: str) -> Mutant:
    return Mutant(name, f"stand-in: {name}", "calc", (Substitution("calc.py", old, new),), tests)


def run_standin(root: Path, tmp_path: Path, *mutants: Mutant, **options):
    results = tmp_path / "results.jsonl"
    report = run_catalog(mutants, root=root, workers=1, results_path=results, log=lambda line: None, **options)
    return report, list(read_records(results))


@pytest.fixture(params=["zygote", "process"])
def launcher(request, monkeypatch):
    """Both ways an inner run starts: forked from a warm zygote (Linux, the CPU device) or a plain process."""
    from mutants import runner

    monkeypatch.setenv(runner.ZYGOTE_ENV, "1" if request.param == "zygote" else "0")
    if request.param == "zygote" and not runner.zygote_fits("cpu"):
        pytest.skip(f"no zygote on {sys.platform}: inner runs start plain processes there")
    return request.param


def test_a_killed_mutant_names_its_killer(standin, tmp_path, launcher):
    mutant = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    report, records = run_standin(standin, tmp_path, mutant)
    (result,) = report.results
    assert result.status == "killed" and result.killed_by == "test_calc.py::test_add" and report.ok
    assert "FAILED test_calc.py::test_add" in result.detail
    (record,) = records
    assert record["kind"] == "mutant" and record["killed"] is True and record["status"] == "killed"
    assert record["killed_by"] == "test_calc.py::test_add" and record["seconds"] > 0
    assert "-    return a + b  # the sum\n+    return a - b  # the sum" in record["diff"]
    assert (standin / "calc.py").read_text() == STANDIN["calc.py"], "the tree was edited in place"


def test_an_arm_limited_mutant_is_left_out_where_its_arms_do_not_run(standin, tmp_path, monkeypatch):
    """A mutant of a CUDA-only variant cannot run where only the graph arm does (as on a CPU; the run's arms are
    fixed here, so a GPU host runs the same test): named in ``left_out``, not a result, its record says
    ``left_out`` and why; the others run as usual."""
    import mutants.runner as runner

    monkeypatch.setattr(runner, "_arms", lambda device, arm: ("cpu", ["graph"]))
    cuda_only = Mutant("cuda_only_sum", "stand-in: a CUDA-only variant's bug", "calc",
                       (Substitution("calc.py", "return a + b", "return a - b"),), ("test_calc.py::test_add",),
                       arms=("cuda",))
    every_arm = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    assert not cuda_only.runs_on(["graph"]) and cuda_only.runs_on(["cuda", "graph"]) and every_arm.runs_on(["graph"])
    report, records = run_standin(standin, tmp_path, cuda_only, every_arm)
    assert [m.name for m in report.left_out] == ["cuda_only_sum"]
    assert [r.mutant.name for r in report.results] == ["sum_is_a_difference"] and report.ok
    left, ran = sorted(records, key=lambda r: r["status"] != "left_out")
    assert left["name"] == "cuda_only_sum" and left["killed"] is False and left["tests"] == []
    assert left["detail"] == "its code runs only on the cuda arm; this run's arms: graph"
    assert ran["name"] == "sum_is_a_difference" and ran["status"] == "killed"


def test_a_harmless_mutant_survives_and_fails_the_run(standin, tmp_path):
    harmless = standin_mutant("comment_only", "# the sum", "# the total", "test_calc.py::test_add")
    report, records = run_standin(standin, tmp_path, harmless)
    (result,) = report.results
    assert result.status == "survived" and not report.ok and report.score == 0
    assert records[0]["killed"] is False and records[0]["status"] == "survived" and records[0]["killed_by"] is None
    assert "+    return a + b  # the total" in records[0]["diff"]


def test_the_command_line_fails_on_a_survivor_and_prints_its_diff(monkeypatch, capsys, tmp_path):
    """python -m mutants on this tree, with the catalog swapped for one harmless mutant."""
    harmless = Mutant("harmless_docstring", "a docstring edit: no behaviour changes", "masks",
                      (Substitution("impl/masks.py", "optionally windowed.", "optionally with a window."),),
                      ("parity/test_masks.py::test_create_causal_mask_matches_oracle",))
    monkeypatch.setattr(cli, "by_name", lambda names: [harmless])
    status = cli.main(["harmless_docstring", "--device", "cpu", "--workers", "1",
                       "--results", str(tmp_path / "results.jsonl")])
    out = capsys.readouterr().out
    assert status == 1
    assert "SURVIVED harmless_docstring" in out and "+    \"\"\"bool [N, offset + N]" in out
    assert "0/1 killed (0%), 1 survived" in out


def test_a_stale_substitution_is_an_error_and_runs_nothing(standin, tmp_path):
    absent = standin_mutant("absent", "return a * b", "return a / b", "test_calc.py::test_add")
    ambiguous = standin_mutant("ambiguous", "return ", "return -", "test_calc.py::test_add")
    for mutant, count in ((absent, 0), (ambiguous, 2)):
        with pytest.raises(StaleMutant, match=f"occurs {count} times, not exactly once"):
            mutated_files(mutant, standin)
    report, records = run_standin(standin, tmp_path, absent, ambiguous)
    assert [r.status for r in report.results] == ["stale", "stale"] and not report.ok
    assert report.clean is None, "nothing runs for stale mutants"
    assert [r["status"] for r in records] == ["stale", "stale"] and not any(r["killed"] for r in records)


def test_a_killer_that_fails_on_the_clean_tree_proves_nothing(standin, tmp_path):
    mutant = standin_mutant("halving_doubles", "return x / 2", "return x * 2", "test_calc.py::test_half_is_broken")
    fine = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    report, records = run_standin(standin, tmp_path, mutant, fine)
    assert not report.clean.passed and report.clean.run.failed_ids == ["test_calc.py::test_half_is_broken"]
    broken, killed = report.results
    assert broken.status == "error" and "fail on the unmutated tree" in broken.detail
    assert killed.status == "killed", "mutants with healthy killers still run"
    assert not report.ok


def test_a_killer_named_by_its_function_that_fails_on_the_clean_tree_proves_nothing(standin, tmp_path):
    # pytest reports the failure by its parametrized id; the catalog may name the killer by its function
    mutant = standin_mutant("halving_doubles", "return x / 2", "return x * 2",
                            "test_calc.py::test_half_of_params_is_broken")
    report, _ = run_standin(standin, tmp_path, mutant)
    assert report.clean.run.failed_ids == ["test_calc.py::test_half_of_params_is_broken[3]"]
    (result,) = report.results
    assert result.status == "error" and "test_half_of_params_is_broken[3]" in result.detail
    assert not report.ok


@pytest.mark.parametrize("clean_run", [
    dict(exitstatus=None, passed=0, timed_out=True),  # killed at the timeout: no outcome, no failed id
    dict(exitstatus=3, passed=1, timed_out=False),  # pytest crashed (internal error) after one pass
], ids=["timed_out", "crashed"])
def test_a_clean_check_that_broke_without_a_failed_id_makes_every_mutant_an_error(standin, tmp_path, monkeypatch,
                                                                                   clean_run):
    """A clean check that timed out or crashed names no failing test, so it cannot clear any mutant's killers: each
    mutant is an error naming the exit (and runs nothing), never a kill its killers might score on a broken tree."""
    from mutants import runner
    from mutants.runner import PytestRun

    broken = PytestRun(clean_run["exitstatus"], clean_run["passed"], 0, 0, [], 1.0, "INTERNALERROR> boom",
                       timed_out=clean_run["timed_out"])
    monkeypatch.setattr(runner, "_clean_run", lambda *args, **kwargs: broken)
    mutant = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    report, records = run_standin(standin, tmp_path, mutant)
    assert report.clean.run is broken and not report.clean.passed
    (result,) = report.results
    assert result.status == "error" and result.killed_by is None, (result.status, result.detail)
    assert result.detail.startswith("its killing tests fail on the unmutated tree: "
                                    f"pytest exit {clean_run['exitstatus']}\n") and "boom" in result.detail
    assert [r["status"] for r in records] == ["error"] and not report.ok


@pytest.mark.parametrize("run, passed", [
    (dict(), True),
    (dict(exitstatus=None, timed_out=True), False),  # killed at the timeout after some tests passed
    (dict(exitstatus=1), False),  # pytest failed though no test did (a fixture error, a crashed pytest run)
    (dict(failed=1, exitstatus=1), False),
    (dict(passed=0, exitstatus=5), False),  # no test collected: nothing was checked
], ids=["clean", "timed_out", "exit_1", "a_failure", "none_ran"])
def test_the_clean_check_passes_only_a_finished_run_with_passes_and_no_failure(run, passed):
    """``CleanCheck.passed`` decides whether the mutants' kills count: a run that timed out or exited non-zero did
    not show the killers pass on the unmutated tree, whatever its pass and fail counts say."""
    from mutants.runner import CleanCheck, PytestRun

    fields = {"exitstatus": 0, "passed": 3, "failed": 0, "timed_out": False, **run}
    r = PytestRun(fields["exitstatus"], fields["passed"], fields["failed"], 0,
                  ["t.py::test_a"] if fields["failed"] else [], 1.0, "", timed_out=fields["timed_out"])
    assert CleanCheck(["t.py::test_a"], run=r).passed is passed
    assert CleanCheck(["t.py::test_a"]).passed is False  # no run: nothing checked


@pytest.mark.parametrize("selector, test_id, selected", [
    ("t.py::test_a", "t.py::test_a", True),
    ("t.py::test_a", "t.py::test_a[1-x]", True),
    ("t.py", "t.py::test_a[1]", True),
    ("t.py::test_a", "t.py::test_ab", False),
    ("t.py::test_a[1]", "t.py::test_a[10]", False),
])
def test_a_selector_selects_what_pytest_would_run(selector, test_id, selected):
    assert selects(selector, test_id) is selected


def test_no_killing_test_ran_is_an_error(standin, tmp_path):
    mutant = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_skipped")
    report, _ = run_standin(standin, tmp_path, mutant, clean_check=False)
    (result,) = report.results
    assert result.status == "error" and "no killing test ran (1 skipped" in result.detail


def test_a_hanging_mutant_times_out_as_an_error(standin, tmp_path, launcher):
    mutant = standin_mutant("sum_hangs", "return a + b", "import time; time.sleep(60)", "test_calc.py::test_add")
    fine = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    # 8 s: the fine mutant's pytest run must fit it too (a process start and one test took over 3 s on a loaded
    # 2-core machine); the hang sleeps 60
    report, _ = run_standin(standin, tmp_path, mutant, fine, clean_check=False, timeout=8)
    hung, after = report.results
    assert hung.status == "error" and hung.detail.startswith("timed out after")
    assert after.status == "killed", "the run after a timeout still works (a zygote survives its child's kill)"


def test_a_test_past_the_limit_is_hung_a_kill_by_that_test(standin, tmp_path, launcher):
    """--test-limit: the plugin's watchdog (faulthandler, no GIL needed) ends a test that does not return in time;
    the runner reads the test from the watchdog's file and calls the mutant killed by it, long before --timeout."""
    mutant = standin_mutant("sum_hangs", "return a + b", "import time; time.sleep(60)", "test_calc.py::test_add")
    fine = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    # limit 3 s: far below the hang's 60 and --timeout's 40; a process start and one test fit 40 on a loaded machine
    report, records = run_standin(standin, tmp_path, mutant, fine, clean_check=False, timeout=40, test_limit=3)
    hung, after = report.results
    assert hung.status == "killed" and hung.killed_by == "test_calc.py::test_add", hung.detail
    assert hung.detail.startswith("hung: test_calc.py::test_add did not return") and hung.seconds < 40
    assert records[0]["killed_by"] == "test_calc.py::test_add"
    assert after.status == "killed" and after.detail.startswith("FAILED"), "a test that returns is judged as always"


def test_a_hang_under_xdist_is_a_kill_by_the_hung_test(standin, tmp_path):
    mutant = standin_mutant("sum_hangs", "return a + b", "import time; time.sleep(60)", "test_calc.py::test_add")
    report, _ = run_standin(standin, tmp_path, mutant, clean_check=False, timeout=50, test_limit=3, inner_workers=2)
    (result,) = report.results
    assert result.status == "killed" and result.killed_by == "test_calc.py::test_add", result.detail


def test_the_hang_limit_follows_the_clean_checks_slowest_test(standin, tmp_path):
    from mutants.runner import HANG_FACTOR, HANG_MARGIN, PytestRun, hang_limit, hang_limit_after, run_pytest

    clean = run_pytest(standin, ["test_calc.py::test_add", "test_calc.py::test_skipped"], stop_first=False,
                       root=standin)
    assert clean.exitstatus == 0 and clean.slowest[0] in ("test_calc.py::test_add", "test_calc.py::test_skipped")
    assert clean.slowest[1] > 0 and clean.hung is None
    assert hang_limit(clean) == hang_limit_after(clean.slowest[1]) == HANG_FACTOR * clean.slowest[1] + HANG_MARGIN
    assert hang_limit(PytestRun(0, 1, 0, 0, [], 1.0, "", slowest=None)) is None
    lines = []
    fine = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    run_catalog([fine], root=standin, workers=1, results_path=tmp_path / "r.jsonl", log=lines.append)
    assert any(f"x the slowest clean test (test_calc.py::test_add" in line for line in lines), lines
    for bad in (0, -1.0, True, "5"):
        with pytest.raises(ValueError, match="test_limit"):
            run_standin(standin, tmp_path, fine, test_limit=bad)


def test_inner_workers_run_a_mutants_tests_under_xdist(standin, tmp_path):
    """--inner-workers N: each mutant's pytest run spreads over N xdist processes (a survivor's whole test set then
    takes the machine); the verdicts are those of a one-process run."""
    fine = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    report, records = run_standin(standin, tmp_path, fine, clean_check=False, inner_workers=2)
    (result,) = report.results
    assert result.status == "killed" and records[-1]["status"] == "killed"
    with pytest.raises(ValueError, match="inner_workers"):
        run_standin(standin, tmp_path, fine, inner_workers=-1)


def test_zygote_fits_only_the_cpu_device_on_linux(monkeypatch):
    from mutants import runner

    monkeypatch.setenv(runner.ZYGOTE_ENV, "1")
    assert runner.zygote_fits("cpu") == sys.platform.startswith("linux")
    assert not runner.zygote_fits("gpu") and not runner.zygote_fits(None)  # Metal / CUDA after fork: unsafe
    monkeypatch.setenv(runner.ZYGOTE_ENV, "0")
    assert not runner.zygote_fits("cpu")


def test_forked_runs_import_the_copys_modules_and_report_their_exit(standin, tmp_path):
    """A zygote's child runs in the copy as ``python -m pytest`` would: the copy's modules, its environment, its
    exit status; a dead zygote is an error, not a hang."""
    from mutants import runner

    if not runner.zygote_fits("cpu"):
        pytest.skip(f"no zygote on {sys.platform}")
    (standin / "test_env.py").write_text(
        "import os, sys\n\nimport calc\n\n\ndef test_where():\n"
        "    assert os.path.dirname(calc.__file__) == os.getcwd() == sys.path[0]\n"
        "    assert os.environ['MARK'] == 'copy' and sys.dont_write_bytecode\n")
    env = {"PATH": "/usr/bin:/bin", "MARK": "copy"}
    zygote = runner.Zygote(sys.executable, {"PATH": "/usr/bin:/bin", "MARK": "zygote"})
    try:
        code, timed_out = zygote.run(standin, ["test_env.py", "-q", "-p", "no:cacheprovider"], env,
                                     tmp_path / "log.txt", timeout=60)
        assert (code, timed_out) == (0, False), (tmp_path / "log.txt").read_text()
        code, _ = zygote.run(standin, ["test_calc.py::test_half_is_broken", "-q", "-p", "no:cacheprovider"], env,
                             tmp_path / "log.txt", timeout=60)
        assert code == 1 and "1 failed" in (tmp_path / "log.txt").read_text()
        zygote.process.kill()
        zygote.process.wait()
        with pytest.raises((RuntimeError, OSError)):
            zygote.run(standin, ["test_env.py"], env, tmp_path / "log.txt", timeout=60)
        assert zygote.broken
    finally:
        zygote.close()


def test_the_clean_check_in_shares_counts_every_test(standin, tmp_path, launcher):
    (standin / "test_more.py").write_text("from calc import add\n\n\ndef test_add_zero():\n    assert add(2, 0) == 2\n")
    first = standin_mutant("sum_is_a_difference", "return a + b", "return a - b", "test_calc.py::test_add")
    second = standin_mutant("sum_is_a_product", "return a + b", "return a * b", "test_more.py::test_add_zero")
    results = tmp_path / "results.jsonl"
    report = run_catalog([first, second], root=standin, workers=2, results_path=results, log=lambda line: None)
    assert report.clean.passed and report.clean.run.passed == 2, report.clean.run.output
    assert [r.status for r in report.results] == ["killed", "killed"]


def test_tree_files_outside_git_skip_caches(standin):
    (standin / "__pycache__").mkdir()
    (standin / "__pycache__" / "calc.pyc").write_bytes(b"\0")
    assert sorted(tree_files(standin)) == sorted([*STANDIN, "mutants/__init__.py", "mutants/pytest_plugin.py"])


# --- on this tree ---------------------------------------------------------------------


def git_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout


def test_a_run_on_this_tree_leaves_it_untouched(tmp_path, monkeypatch):
    """git status and the mutated file's bytes are as before; the caller's results file is not touched.

    Other engineers may edit this checkout during the run, so the git status
    comparison covers what the runner could write: the mutant's files and any
    artifact of a run (outcome files, results files, temporary copies).
    """
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs the git checkout (git status is the evidence)")
    (mutant,) = by_name(["window_mask_off_by_one"])
    watched = {path: (REPO_ROOT / path).read_bytes() for path in mutant.files}
    sentinel = tmp_path / "caller-results.jsonl"
    sentinel.write_text('{"kind": "sentinel"}\n')
    monkeypatch.setenv("MLXGATE_RESULTS", str(sentinel))  # the inner runs must never reset or append to it
    before = git_state()
    report = run_catalog([mutant], device="cpu", workers=1, results_path=tmp_path / "results.jsonl",
                         log=lambda line: None)
    after = git_state()
    assert report.ok and report.results[0].killed_by == "parity/test_masks.py::test_create_causal_mask_matches_oracle"
    assert {path: (REPO_ROOT / path).read_bytes() for path in mutant.files} == watched

    def runner_lines(status: str) -> set[str]:
        artifacts = (*mutant.files, "mutant-outcomes", "mlxgate-mutant", "mlxgate-clean", "results.jsonl")
        return {line for line in status.splitlines() if any(a in line for a in artifacts)}

    assert runner_lines(after) == runner_lines(before), f"git status changed:\n{before}\n---\n{after}"
    assert sentinel.read_text() == '{"kind": "sentinel"}\n'
    (record,) = read_records(tmp_path / "results.jsonl")
    assert json.dumps(record)  # the record is JSON (reports/SCHEMA.md, kind "mutant")
    assert record["tests"] == ["parity/test_masks.py::test_create_causal_mask_matches_oracle"]


def test_bad_profile_or_a_missing_gpu_is_a_usage_error(monkeypatch, capsys):
    name = CATALOG[0].name
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--profile", "bogus", "--no-record"])
    assert exit_.value.code == 2
    from impl import arms

    monkeypatch.setattr(arms, "gpu_available", lambda: False)
    assert cli.main([name, "--device", "gpu", "--no-record"]) == 2
    assert "no GPU backend" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--timeout", "nan"], "--timeout must be a finite number > 0"),
    (["--timeout", "inf"], "--timeout must be a finite number > 0"),
    (["--test-limit", "nan"], "--test-limit must be a finite number > 0"),
    (["--python", "/nonexistent/py"], "--python: /nonexistent/py is not an executable file"),
], ids=["timeout-nan", "timeout-inf", "test-limit-nan", "python-missing"])
def test_unusable_run_options_are_refused_before_any_mutant_runs(monkeypatch, capsys, argv, words):
    # run_catalog must not be reached: a bad value is a usage error (2), never a traceback read as a survivor (1).
    monkeypatch.setattr(cli, "run_catalog", lambda *a, **k: pytest.fail("a mutant ran"))
    with pytest.raises(SystemExit) as exit_:
        cli.main([CATALOG[0].name, "--no-record", *argv])
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err


def test_a_results_folder_is_refused_before_any_mutant_runs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "run_catalog", lambda *a, **k: pytest.fail("a mutant ran"))
    with pytest.raises(SystemExit) as exit_:
        cli.main([CATALOG[0].name, "--results", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"--results: {tmp_path} is a folder" in capsys.readouterr().err


def test_stopping_the_runner_kills_its_inner_runs():
    # python -m mutants turns SIGTERM into this (then KeyboardInterrupt): inner pytest runs lead their own process
    # groups (start_new_session), so without it a cancelled CI job would leave them running and their temporary
    # copies on disk.
    from mutants import runner

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    runner.LIVE.add(process)
    try:
        runner.stop_live_runs()
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        runner.LIVE.discard(process)
        if process.poll() is None:
            process.kill()
