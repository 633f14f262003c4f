"""The CI workflows (.github/workflows/*.yml): lint-clean, and running the README's commands.

* actionlint over every workflow (with ShellCheck on their ``run:`` scripts when it is
  installed) and ShellCheck over ``.ci/run`` and ``scripts/*.sh``; each skips, naming
  the tool, only when the tool is not installed.
* No drift: every job runs ``make test`` or ``make gate`` (the README's first two
  commands), only with variables of the README's Options table, on the device its
  platform calls for; the Metal canary, the comparison with the base branch, the
  artifacts, the Hypothesis database and the shards are wired as README's "CI
  workflows" says.
* The Metal gate: macos-metal's ``make gate`` runs under Metal's shader validation (aborting at a fault) and
  API validation, and collects the Metal probes (``parity/test_metal_probes.py``) on the metal arm.
* ``scripts/ci-base-results.sh`` against a fake GitHub CLI; ``make ci`` runs the
  linux-cpu workflow's commands.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
README = (ROOT / "README.md").read_text()
# (device, EXTRAS every make call carries, runs-on, canary mode); "strict": the canary must pass.
PLATFORMS = {
    "linux-cpu": ("cpu", None, "ubuntu-24.04", None),
    "macos-hosted": ("cpu", None, "macos-15", "allow-unavailable"),
    "macos-metal": ("gpu", None, ["self-hosted", "macOS", "ARM64"], "strict"),
    "cuda": ("gpu", "cuda", ["self-hosted", "linux", "x64", "cuda"], None),
    "deps-newest": ("cpu", None, "ubuntu-24.04", None),
}
# A make variable's value: quoted, a GitHub expression (`${{ matrix.shard }}`), or a word.
VALUE = r"""(?:"[^"]*"|'[^']*'|\$\{\{[^}]*\}\}\S*|\S+)"""
MAKE_CALL = re.compile(rf"\bmake\s+([a-z][\w-]*)((?:[ \t]+[A-Z][A-Z0-9_]*={VALUE})*)")
VARIABLE = re.compile(rf"([A-Z][A-Z0-9_]*)=({VALUE})")


def load(name: str) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1); nothing here needs it.
    return yaml.safe_load((WORKFLOWS / f"{name}.yml").read_text())


def make_calls(script: str) -> list[tuple[str, dict[str, str]]]:
    """``make TARGET VAR=value ...`` invocations in a shell script: (target, {VAR: value})."""
    return [(m.group(1), {k: v.strip("\"'") for k, v in VARIABLE.findall(m.group(2))})
            for m in MAKE_CALL.finditer(script)]


def readme_targets() -> set[str]:
    """The make targets of the README's first code block (its first two commands)."""
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    return {target for target, _ in make_calls(block)}


def readme_options() -> set[str]:
    """Variables named in the first column of the README's Options table."""
    table = README.split("## Options", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    spans = [span for row in rows for span in re.findall(r"`([^`]*)`", row.split(" | ")[0])]
    return {name for span in spans for name in re.findall(r"\b([A-Z][A-Z0-9_]*)=", span)}


def gate_workflows() -> list[str]:
    """The workflows with a gate job (deps-newest runs only the tests)."""
    return [name for name in PLATFORMS if "gate" in load(name)["jobs"]]


def jobs() -> list[tuple[str, str, dict]]:
    return [(name, job_name, job) for name in PLATFORMS for job_name, job in load(name)["jobs"].items()]


JOB_IDS = [f"{name}-{job}" for name, job, _ in jobs()]


def run_scripts(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def step_index(job: dict, predicate) -> int:
    matches = [i for i, step in enumerate(job["steps"]) if predicate(step)]
    assert matches, f"no step matches in {[s.get('name') or s.get('uses') for s in job['steps']]}"
    return matches[0]


def runs_make(step: dict, *targets: str) -> bool:
    return any(target in targets for target, _ in make_calls(step.get("run", "")))


def uses(step: dict, action: str) -> bool:
    return step.get("uses", "").split("@")[0] == action


# --- no drift from the README -------------------------------------------------------


def test_readme_states_the_commands_and_options():
    assert readme_targets() == {"gate", "test"}
    assert {"DEVICE", "PROFILE", "ARGS", "WORKERS", "EXTRAS", "COMPARE", "SHARD_ID", "NUM_SHARDS", "DEPS", "K"} <= readme_options()
    assert set(PLATFORMS) == {p.stem for p in WORKFLOWS.glob("*.yml")}
    for name in PLATFORMS:
        assert f"`{name}.yml`" in README.split("## CI workflows", 1)[1], f"README's CI section omits {name}.yml"


@pytest.mark.parametrize("name,job_name,job", jobs(), ids=JOB_IDS)
def test_jobs_run_the_readme_commands_with_documented_options(name, job_name, job):
    device, extras, _, _ = PLATFORMS[name]
    calls = [call for script in run_scripts(job) for call in make_calls(script)]
    targets = {target for target, _ in calls}
    assert targets & readme_targets(), f"{name}/{job_name} runs neither `make test` nor `make gate`"
    assert targets <= readme_targets() | {"venv"}, f"{name}/{job_name}: make targets {targets}"
    assert job_name in targets, f"the {job_name} job runs `make {job_name}`"
    for target, variables in calls:
        undocumented = set(variables) - readme_options()
        assert not undocumented, f"{name}/{job_name}: `make {target}` uses {undocumented}, not in README's Options"
        if target in readme_targets():
            assert variables.get("DEVICE") == device, f"{name}/{job_name}: make {target} must say DEVICE={device}"
        if extras:
            assert variables.get("EXTRAS") == extras, f"{name}/{job_name}: make {target} needs EXTRAS={extras}"
    # One venv per job: a make call with other EXTRAS would rebuild it mid-job.
    assert len({variables.get("EXTRAS") for _, variables in calls}) == 1, calls


@pytest.mark.parametrize("name", PLATFORMS)
def test_runners_and_devices(name):
    device, _, runs_on, _ = PLATFORMS[name]
    for job_name, job in load(name)["jobs"].items():
        assert job["runs-on"] == runs_on, f"{name}/{job_name}"
        scripts = "\n".join(run_scripts(job))
        assert f"DEVICE={'gpu' if device == 'cpu' else 'cpu'}" not in scripts
        if isinstance(runs_on, list) and "self-hosted" in runs_on:
            assert "head.repo.full_name == github.repository" in job["if"], "fork PRs must not reach self-hosted"


# --- the Metal canary ---------------------------------------------------------------


@pytest.mark.parametrize("name,job_name,job", jobs(), ids=JOB_IDS)
def test_metal_canary_runs_first_where_the_platform_is_a_mac(name, job_name, job):
    mode = PLATFORMS[name][3]
    canaries = [i for i, step in enumerate(job["steps"]) if "impl.canary" in step.get("run", "")]
    if mode is None:
        assert not canaries
        return
    assert len(canaries) == 1, f"{name}/{job_name}: one canary step"
    command = job["steps"][canaries[0]]["run"]
    assert ("--allow-unavailable" in command) == (mode == "allow-unavailable"), command
    assert "continue-on-error" not in job["steps"][canaries[0]]  # its verdict decides, even when allowed
    assert canaries[0] < step_index(job, lambda s: runs_make(s, "gate", "test")), "the canary runs first"
    assert canaries[0] > step_index(job, lambda s: runs_make(s, "venv")), "after make venv builds MLX"


# --- the Metal gate: validation layers and the probes -----------------------------------

# What the macos-metal gate job's `make gate` step sets (the workflow's comment says why): shader validation that
# aborts at a fault (its default only logs and zero-fills the read) and reports it on stderr, and API validation
# that asserts.
METAL_VALIDATION = {
    "MTL_SHADER_VALIDATION": "1",
    "MTL_SHADER_VALIDATION_ENABLE_ERROR_REPORTING": "1",
    "MTL_SHADER_VALIDATION_ABORT_ON_FAULT": "1",
    "MTL_SHADER_VALIDATION_REPORT_TO_STDERR": "1",
    "MTL_DEBUG_LAYER": "1",
    "MTL_DEBUG_LAYER_ERROR_MODE": "assert",
}
METAL_PROBES = "parity/test_metal_probes.py"
# The probes only a Mac settles (impl/metal_probes.py): each must reach the metal arm in the Metal gate.
METAL_PROBE_TESTS = ("test_simdgroup_fragment_ownership", "test_simdgroup_load_origin_and_transpose",
                     "test_a_1024_thread_group_runs", "test_argmax_groups_fit_the_pipeline_limit",
                     "test_half_and_bfloat_conversions_round_to_nearest_even",
                     "test_special_values_follow_ieee_under_the_default_math_mode")


def gate_pytest_paths() -> list[str]:
    """The paths the Makefile's `gate` recipe hands pytest (what `make gate` collects)."""
    recipe = (ROOT / "Makefile").read_text().split("\ngate: ", 1)[1].split("\n\n", 1)[0]
    call = re.search(r"\$\(PY\) -m pytest((?: [\w./-]+)+)", recipe)
    assert call, "make gate's recipe runs no `$(PY) -m pytest <paths>`"
    return call.group(1).split()


def test_metal_gate_runs_under_shader_and_api_validation():
    """Every `make gate` step of the macos-metal gate job sets Metal's shader validation (aborting at a fault) and
    API validation, in the step's own environment (read when the MTLDevice is created, in the pytest process), and
    no workflow- or job-level env overrides them."""
    workflow = load("macos-metal")
    job = workflow["jobs"]["gate"]
    steps = [step for step in job["steps"] if runs_make(step, "gate")]
    assert steps, "the macos-metal gate job runs no `make gate`"
    for step in steps:
        env = {k: str(v) for k, v in (step.get("env") or {}).items()}
        wrong = {k: env.get(k) for k, v in METAL_VALIDATION.items() if env.get(k) != v}
        assert not wrong, f"macos-metal's `{step['name']}` step must set {METAL_VALIDATION}; differs: {wrong}"
    for scope, env in (("workflow", workflow.get("env")), ("gate job", job.get("env"))):
        assert not set(METAL_VALIDATION) & set(env or {}), f"the macos-metal {scope} env sets validation variables"


def test_metal_gate_collects_the_probes_on_the_metal_arm(tmp_path):
    """The probe file is under a path `make gate` collects, the macos-metal gate job's `make gate` calls narrow
    nothing (no ARGS, no shard), and collecting it gives each probe a metal-arm item (on a machine without Metal
    too: there the item is a skip with a reason, on the Mac a test)."""
    paths = gate_pytest_paths()
    collected = [p for p in paths if METAL_PROBES == p or METAL_PROBES.startswith(p.rstrip("/") + "/")]
    assert collected, f"make gate collects {paths}: none holds {METAL_PROBES}"
    job = load("macos-metal")["jobs"]["gate"]
    calls = [variables for script in run_scripts(job) for target, variables in make_calls(script) if target == "gate"]
    assert calls and all(not {"ARGS", "SHARD_ID", "NUM_SHARDS"} & set(v) and v.get("DEVICE") == "gpu" for v in calls)
    env = {**os.environ, "MLXGATE_RESULTS": str(tmp_path / "results.jsonl")}  # not the running suite's file
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--device", "cpu", METAL_PROBES], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    items = [line for line in run.stdout.splitlines() if line.startswith(f"{METAL_PROBES}::")]
    for test in METAL_PROBE_TESTS:
        ours = [item for item in items if item.split("::", 1)[1].split("[", 1)[0] == test]
        assert ours and all("metal" in item.split("[", 1)[1].rstrip("]").split("-") for item in ours), (test, ours)


# --- comparison with the base branch, artifacts, Hypothesis database, shards ---------


@pytest.mark.parametrize("name", gate_workflows())
def test_gate_job_compares_with_the_base_branch_on_pull_requests(name):
    job = load(name)["jobs"]["gate"]
    base = step_index(job, lambda s: "ci-base-results.sh" in s.get("run", ""))
    gate = step_index(job, lambda s: runs_make(s, "gate"))
    step = job["steps"][base]
    assert base < gate and step["if"] == "github.event_name == 'pull_request'"
    assert step["env"]["BASE_REF"] == "${{ github.base_ref }}" and "GH_TOKEN" in step["env"]
    # Same workflow file, and the artifact name this workflow's gate job uploads.
    args = step["run"].split()
    upload = job["steps"][step_index(job, lambda s: uses(s, "actions/upload-artifact"))]
    assert args[1:3] == [f"{name}.yml", upload["with"]["name"]] and args[3] == '"$BASE_REF"'
    assert load(name)["permissions"]["actions"] == "read"
    # With base results: COMPARE=them; without (a logged notice from the script): the plain gate.
    gate_step = job["steps"][gate]
    assert gate_step["env"]["BASE_RESULTS"] == f"${{{{ steps.{step['id']}.outputs.results }}}}"
    compares = [variables.get("COMPARE") for target, variables in make_calls(gate_step["run"]) if target == "gate"]
    assert sorted(compares, key=str) == ["$BASE_RESULTS", None], compares
    # Gone gates fail the comparison unless the pull request says it removes them (the removes-checks label).
    assert gate_step["env"]["COMPARE_ALLOW_REMOVED"] == (
        "${{ contains(github.event.pull_request.labels.*.name, 'removes-checks') && '1' || '' }}")


@pytest.mark.parametrize("name,job_name,job", jobs(), ids=JOB_IDS)
def test_every_job_uploads_reports_out_even_when_it_fails(name, job_name, job):
    upload = job["steps"][step_index(job, lambda s: uses(s, "actions/upload-artifact"))]
    assert upload["with"]["path"] == "reports/out/" and upload["if"] == "always()"
    expected = f"results-{name}" if job_name == "gate" else f"reports-{name}-test-"
    assert upload["with"]["name"].startswith(expected)


@pytest.mark.parametrize("name,job_name,job", jobs(), ids=JOB_IDS)
def test_hypothesis_database_rolls_between_runs(name, job_name, job):
    restore_i = step_index(job, lambda s: uses(s, "actions/cache/restore"))
    save_i = step_index(job, lambda s: uses(s, "actions/cache/save"))
    suite_i = step_index(job, lambda s: runs_make(s, "gate", "test"))
    restore, save = job["steps"][restore_i]["with"], job["steps"][save_i]
    assert restore_i < suite_i < save_i
    assert restore["path"] == save["with"]["path"] == ".hypothesis"
    assert save["if"] == "always()"  # a failing run is the one with new counterexamples
    key = restore["key"]
    assert key == save["with"]["key"] and "${{ github.run_id }}" in key  # a new cache each run
    # Fallbacks: prefixes of the key, most specific (this job, this shard) first.
    prefixes = restore["restore-keys"].splitlines()
    assert prefixes and all(key.startswith(p) for p in prefixes) and prefixes == sorted(prefixes, key=len)[::-1]


@pytest.mark.parametrize("name", PLATFORMS)
def test_test_job_shards_by_its_matrix(name):
    job = load(name)["jobs"]["test"]
    matrix = job["strategy"]["matrix"]
    (num,) = matrix["num_shards"]
    assert matrix["shard"] == list(range(num)) and job["strategy"]["fail-fast"] is False
    ((_, variables),) = [call for script in run_scripts(job) for call in make_calls(script) if call[0] == "test"]
    assert variables["SHARD_ID"] == "${{ matrix.shard }}"
    assert variables["NUM_SHARDS"] == "${{ matrix.num_shards }}"


def test_deps_newest_runs_weekly_and_on_dependency_changes():
    workflow = load("deps-newest")
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert len(triggers["schedule"]) == 1 and len(triggers["schedule"][0]["cron"].split()) == 5
    assert triggers["schedule"][0]["cron"].split()[2:4] == ["*", "*"]  # every week, not one day of the month
    assert {"pyproject.toml", "locks/**"} <= set(triggers["pull_request"]["paths"])
    calls = [call for _, job in workflow["jobs"].items() for script in run_scripts(job) for call in make_calls(script)]
    assert calls and all(variables.get("DEPS") == "newest" for _, variables in calls), calls
    # every other workflow runs the locked versions (no DEPS=newest there)
    for name in set(PLATFORMS) - {"deps-newest"}:
        assert all("DEPS" not in variables for _, _, job in [(name, None, j) for j in load(name)["jobs"].values()]
                   for script in run_scripts(job) for _, variables in make_calls(script)), name


# --- make ci: what linux-cpu runs ------------------------------------------------------


def test_make_ci_runs_the_linux_workflow():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nci:\n", 1)[1].split("\n\n", 1)[0]
    ci_run = (ROOT / ".ci" / "run").read_text()
    linux = load("linux-cpu")["jobs"]
    (gate_call,) = {tuple(sorted(v.items())) for s in run_scripts(linux["gate"]) for t, v in make_calls(s)
                    if t == "gate" and "COMPARE" not in v}
    test_scripts = "\n".join(run_scripts(linux["test"]))
    # The gate job's command (without the PR-only COMPARE), then the test job's (without its shard).
    assert "$(MAKE) --no-print-directory gate" in recipe and dict(gate_call) == {"DEVICE": "cpu"}
    assert "CI=true DEVICE=cpu" in recipe and "./.ci/run" in recipe and "EXTRAS=lint" in test_scripts
    assert "venv EXTRAS=lint" in recipe
    # .ci/run: CI=true, the system tools the test job installs, then make test.
    assert "export CI=true" in ci_run and "\nmake test\n" in ci_run
    assert "scripts/ci-tools.sh chromium shellcheck clang-19" in ci_run
    assert "scripts/ci-tools.sh chromium shellcheck clang-19" in test_scripts


# --- lint ---------------------------------------------------------------------------------

ACTIONLINT = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
SHELLCHECK = shutil.which("shellcheck")


@pytest.mark.skipif(ACTIONLINT is None, reason="actionlint not installed: pyproject's lint extra "
                                               "(make venv EXTRAS=lint) installs it")
def test_actionlint():
    command = [ACTIONLINT, "-no-color"] + ([f"-shellcheck={SHELLCHECK}"] if SHELLCHECK else [])
    run = subprocess.run(command + sorted(str(p) for p in WORKFLOWS.glob("*.yml")), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def shell_scripts() -> list[Path]:
    return [ROOT / ".ci" / "run", *sorted((ROOT / "scripts").glob("*.sh"))]


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck not installed: .ci/run and scripts/ci-tools.sh "
                                               "install Debian's package")
def test_shellcheck_scripts():
    run = subprocess.run([SHELLCHECK, "--severity=style", *map(str, shell_scripts())], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_shell_scripts_are_executable_bash():
    for script in shell_scripts():
        assert os.access(script, os.X_OK), f"{script} is not executable"
        assert script.read_text().startswith("#!/usr/bin/env bash\n"), script


# --- scripts/ci-base-results.sh against a fake gh ----------------------------------------

FAKE_GH = r'''#!/usr/bin/env bash
# gh stand-in: `run list` prints $FAKE_RUNS (one id a line); `run download ID` succeeds for ids in
# $FAKE_WITH_ARTIFACT, writing DIR/results.json. Every call is logged to $FAKE_LOG.
echo "$*" >>"$FAKE_LOG"
if [ "$1 $2" = "run list" ]; then
  [ -z "${FAKE_LIST_FAILS:-}" ] || { echo "HTTP 403: Resource not accessible by integration" >&2; exit 1; }
  for run in $FAKE_RUNS; do echo "$run"; done
elif [ "$1 $2" = "run download" ]; then
  run=$3; shift 3
  while [ $# -gt 0 ]; do case "$1" in --dir) dir=$2; shift 2 ;; *) shift ;; esac; done
  case " $FAKE_WITH_ARTIFACT " in
    *" $run "*) mkdir -p "$dir" && echo "{\"run\": $run}" >"$dir/results.json" ;;
    *) echo "no valid artifacts found to download" >&2; exit 1 ;;
  esac
fi
'''


def base_results(tmp_path: Path, runs: str, with_artifact: str = "", gh: bool = True, **env: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gh:
        (bin_dir / "gh").write_text(FAKE_GH)
        (bin_dir / "gh").chmod(0o755)
    system_path = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "gh").exists()]
    output = tmp_path / "github_output"
    output.write_text("")
    environ = {"PATH": os.pathsep.join([str(bin_dir), *system_path]), "GITHUB_OUTPUT": str(output),
               "FAKE_RUNS": runs, "FAKE_WITH_ARTIFACT": with_artifact, "FAKE_LOG": str(tmp_path / "gh.log"), **env}
    run = subprocess.run([str(ROOT / "scripts" / "ci-base-results.sh"), "linux-cpu.yml", "results-linux-cpu", "main",
                          str(tmp_path / "base")], env=environ, capture_output=True, text=True, timeout=60)
    log = (tmp_path / "gh.log").read_text() if (tmp_path / "gh.log").exists() else ""
    return run, output.read_text(), log


def test_base_results_newest_run_with_the_artifact(tmp_path):
    run, output, log = base_results(tmp_path, runs="30 20 10", with_artifact="20 10")
    assert run.returncode == 0, run.stderr
    assert output == f"results={tmp_path / 'base' / 'results.json'}\n"
    assert (tmp_path / "base" / "results.json").read_text().strip() == '{"run": 20}'  # 30 had none
    listing = log.splitlines()[0]
    for arg in ("--workflow linux-cpu.yml", "--branch main", "--event push", "--status success"):
        assert arg in listing
    assert "run download 20 --name results-linux-cpu" in log and "run download 10" not in log


@pytest.mark.parametrize("runs,why", [("", "no successful push run of linux-cpu.yml on main yet"),
                                      ("30 20", "none of the last 2 successful runs")], ids=["no-runs", "expired"])
def test_no_base_results_is_skipped_with_a_reason(tmp_path, runs, why):
    run, output, _ = base_results(tmp_path, runs=runs)
    assert run.returncode == 0, run.stderr
    assert "::notice title=No base results::" in run.stdout and why in run.stdout
    assert "make gate runs without COMPARE" in run.stdout
    assert output == "results=\n" and not (tmp_path / "base").exists()


def test_base_results_errors_are_not_skips(tmp_path):
    run, output, _ = base_results(tmp_path, runs="30", FAKE_LIST_FAILS="1")
    assert run.returncode != 0 and "HTTP 403" in run.stderr and output == ""
    (tmp_path / "no-gh").mkdir()
    run, output, _ = base_results(tmp_path / "no-gh", runs="30", gh=False)
    assert run.returncode == 1 and "::error title=GitHub CLI missing::" in run.stderr and output == ""
    usage = subprocess.run([str(ROOT / "scripts" / "ci-base-results.sh"), "only-one"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
