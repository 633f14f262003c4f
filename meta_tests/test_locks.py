"""The locks (locks/*.txt, scripts/lock.py) agree with pyproject.toml, and the drift report names what changed.

A lock disagrees with pyproject when a direct dependency that applies to its platform
is missing, pinned outside its range, or when the lock pins as direct a package
pyproject no longer asks for: ``make lock`` regenerates them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import deps_drift  # noqa: E402  (scripts/ is not a package)
import lock  # noqa: E402

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAMES = sorted(lock.LOCKS)
# What a platform's markers read (PEP 508); the rest of the environment is this interpreter's.
MARKERS = {"linux": {"platform_system": "Linux", "os_name": "posix"},
           "darwin": {"platform_system": "Darwin", "os_name": "posix"}}


def blocks(text: str) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (version, hashes, the requirers of its ``# via`` annotation), from uv's lock format."""
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if line and not line.startswith((" ", "#")):
            match = deps_drift.PIN.match(stripped)
            assert match, f"not a pin: {line!r}"
            current = deps_drift.canonical(match.group(1))
            out[current] = (match.group(2), [], [])
        elif current and stripped.startswith("--hash="):
            out[current][1].append(stripped.split("=", 1)[1].rstrip(" \\"))
        elif current and stripped.startswith("#") and stripped not in ("# via", "#"):
            out[current][2].append(stripped.lstrip("# ").removeprefix("via ").strip())
    return out


def applicable(name: str) -> list[Requirement]:
    """pyproject's requirements (dependencies and the lock's extras) whose markers hold on the lock's platform."""
    _, system, machine, extras = lock.LOCKS[name]
    env = default_environment() | MARKERS[system] | {
        "sys_platform": system, "platform_machine": machine,
        "python_version": lock.PYTHON, "python_full_version": f"{lock.PYTHON}.0", "implementation_name": "cpython"}
    lines = list(PROJECT["dependencies"]) + [r for e in extras for r in PROJECT["optional-dependencies"][e]]
    return [r for r in map(Requirement, lines) if r.marker is None or r.marker.evaluate(env | {"extra": ""})]


@pytest.mark.parametrize("name", NAMES)
def test_lock_pins_every_applicable_dependency_inside_its_range(name):
    pins = blocks(lock.lock_path(name).read_text())
    for requirement in applicable(name):
        key = deps_drift.canonical(requirement.name)
        assert key in pins, f"locks/{name}.txt lacks {requirement} (pyproject): run make lock"
        version = pins[key][0]
        assert requirement.specifier.contains(Version(version), prereleases=True), (
            f"locks/{name}.txt pins {key}=={version}, outside pyproject's {requirement}: run make lock")


@pytest.mark.parametrize("name", NAMES)
def test_lock_direct_dependencies_are_pyprojects(name):
    direct = {n for n, (_, _, via) in blocks(lock.lock_path(name).read_text()).items()
              if "mlxgate (pyproject.toml)" in via}
    wanted = {deps_drift.canonical(r.name) for r in applicable(name)}
    assert direct == wanted, (f"locks/{name}.txt's direct dependencies differ from pyproject's: "
                              f"only in the lock {sorted(direct - wanted)}, only in pyproject {sorted(wanted - direct)}; "
                              "run make lock")


@pytest.mark.parametrize("name", NAMES)
def test_every_pin_has_a_hash_and_the_lock_names_its_command(name):
    text = lock.lock_path(name).read_text()
    assert f"#    {lock.COMPILE_COMMAND}\n" in text, f"locks/{name}.txt was not written by {lock.COMPILE_COMMAND}"
    for package, (version, hashes, _) in blocks(text).items():
        assert hashes and all(h.startswith("sha256:") and len(h) == 71 for h in hashes), (
            f"locks/{name}.txt: {package}=={version} has no sha256 hash (pip --require-hashes would refuse it)")


def test_linux_x86_64_locks_pin_the_cpu_torch_wheel():
    # a bare torch pin there resolves to a multi-GB CUDA build; the macOS locks take the same release
    for name, (_, system, machine, _) in lock.LOCKS.items():
        version = blocks(lock.lock_path(name).read_text())["torch"][0]
        assert version == ("2.13.0+cpu" if (system, machine) == ("linux", "x86_64") else "2.13.0"), (name, version)


def test_select_maps_each_platform_and_extras_to_its_lock():
    for name, (_, system, machine, extras) in lock.LOCKS.items():
        assert lock.select(system, machine, tuple(reversed(extras))) == name
    assert lock.parse_extras(" lint,cuda,lint ") == ("cuda", "lint")
    with pytest.raises(ValueError, match=r"platform linux/aarch64 with extras \(none\).*DEPS=newest"):
        lock.select("linux", "aarch64", ())
    with pytest.raises(ValueError, match="extras metal"):
        lock.select("darwin", "arm64", ("metal",))
    with pytest.raises(TypeError, match="extras must be a str"):
        lock.parse_extras(None)


def test_the_venv_recipe_installs_the_selected_lock_with_hashes():
    # A clean make: under `make test DEPS=newest` the parent's variables reach a child make through MAKEFLAGS.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DEPS", "EXTRAS")}
    recipe = subprocess.run(["make", "-n", "-B", "venv", f"PYTHON={sys.executable}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=True).stdout
    assert "scripts/lock.py select" in recipe and "--require-hashes --no-deps" in recipe, recipe
    assert "scripts/deps_drift.py" in recipe and "--check" in recipe, recipe  # the venv must equal the lock
    newest = subprocess.run(["make", "-n", "test", "DEPS=newest", f"PYTHON={sys.executable}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=True).stdout
    assert ".venv-newest" in newest and "--upgrade-strategy eager" in newest and "--failed" in newest, newest
    bad = subprocess.run(["make", "-n", "test", "DEPS=latest"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "DEPS=latest" in bad.stderr


# --- the drift report ----------------------------------------------------------------------------------

LOCK_TEXT = """# This file was autogenerated by uv via the following command:
#    make lock
ml-dtypes==0.5.1 \\
    --hash=sha256:aaaa
    # via mlxgate (pyproject.toml)
NumPy==2.4.6 \\
    --hash=sha256:bbbb
torch==2.13.0+cpu \\
    --hash=sha256:cccc
"""


def test_read_lock_reads_pins_by_canonical_name():
    assert deps_drift.read_lock(LOCK_TEXT) == {"ml-dtypes": "0.5.1", "numpy": "2.4.6", "torch": "2.13.0+cpu"}
    with pytest.raises(ValueError, match="line 1 is not a name==version pin"):
        deps_drift.read_lock("numpy>=2\n")
    with pytest.raises(ValueError, match="numpy is pinned twice"):
        deps_drift.read_lock("numpy==1\nNumPy==2\n")
    with pytest.raises(TypeError, match="text must be"):
        deps_drift.read_lock(Path("locks"))


def test_drift_names_each_changed_missing_and_extra_package():
    found = deps_drift.drift(deps_drift.read_lock(LOCK_TEXT),
                             {"ml-dtypes": "0.7.0", "numpy": "2.4.6", "scipy": "1.17.1", "pip": "26.3"})
    assert found.lines() == ["  ml-dtypes 0.5.1 -> 0.7.0", "  torch 2.13.0+cpu -> not installed",
                             "  scipy (not in the lock) 1.17.1"]
    assert not deps_drift.drift({"numpy": "2.4.6"}, {"numpy": "2.4.6", "pip": "1"})  # pip: the installer's own


def test_drift_command_checks_and_names_the_suspects(tmp_path):
    fake = tmp_path / "lock.txt"
    fake.write_text(LOCK_TEXT)
    script = str(ROOT / "scripts" / "deps_drift.py")
    check = subprocess.run([sys.executable, script, str(fake), "--check"], capture_output=True, text=True)
    assert check.returncode == 1 and "ml-dtypes 0.5.1 -> " in check.stdout, check.stdout
    failed = subprocess.run([sys.executable, script, str(fake), "--failed"], capture_output=True, text=True)
    assert failed.returncode == 0 and "the suite failed" in failed.stdout and "ml-dtypes 0.5.1" in failed.stdout
    gone = subprocess.run([sys.executable, script, str(tmp_path / "none.txt")], capture_output=True, text=True)
    assert gone.returncode == 2 and "no such file" in gone.stderr
