"""The locks: the exact versions the suite is tested with, per platform, with hashes.

``locks/<name>.txt`` is ``uv pip compile pyproject.toml --generate-hashes`` for one
platform and one set of extras (``LOCKS``), resolved for CPython ``PYTHON``.
``make gate`` and ``make test`` build ``.venv`` from the lock of the machine they
run on (``select``: ``pip install --require-hashes --no-deps -r``); pyproject.toml
keeps the ranges, for installing the package into an environment of one's own and
for ``DEPS=newest``. ``meta_tests/test_locks.py`` fails when a lock and pyproject
disagree.

    python scripts/lock.py compile            # make lock: every lock, with uv
    python scripts/lock.py select [EXTRAS]    # the lock for this machine (a path), or exit 2 saying why

Linux x86_64's torch is PyTorch's CPU wheel ``2.13.0+cpu`` (pyproject pins it):
uv finds it in ``TORCH_WHEELS`` (a folder, default the ``PIP_FIND_LINKS`` pip uses)
or on PyTorch's CPU index, and the lock holds that file's hash.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = ROOT / "locks"
# CPython minor version every lock is resolved for. Linux x86_64's torch pin is one wheel per CPython
# (cp311): another Python there finds no hashed torch for it, so the Makefile refuses it by name.
PYTHON = "3.11"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# name -> (uv's --python-platform, sys.platform, platform.machine(), extras). manylinux_2_35: MLX
# 0.32's Linux wheels are manylinux_2_35 only.
LOCKS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "linux-x86_64": ("x86_64-manylinux_2_35", "linux", "x86_64", ()),
    "linux-x86_64-lint": ("x86_64-manylinux_2_35", "linux", "x86_64", ("lint",)),
    "linux-x86_64-cuda": ("x86_64-manylinux_2_35", "linux", "x86_64", ("cuda",)),
    "linux-x86_64-cuda-lint": ("x86_64-manylinux_2_35", "linux", "x86_64", ("cuda", "lint")),
    "macos-arm64": ("aarch64-apple-darwin", "darwin", "arm64", ()),
    "macos-arm64-lint": ("aarch64-apple-darwin", "darwin", "arm64", ("lint",)),
}
COMPILE_COMMAND = "make lock"
DARWIN_CONSTRAINTS = LOCK_DIR / "darwin-constraints.txt"
MACOS = "14.0"  # the oldest macOS MLX 0.32 ships Metal wheels for (macosx_14_0_arm64)


def lock_path(name: str) -> Path:
    return LOCK_DIR / f"{name}.txt"


def parse_extras(text: str) -> tuple[str, ...]:
    """``EXTRAS`` as the Makefile passes it ("", "lint", "cuda,lint"): sorted, without repeats."""
    if not isinstance(text, str):
        raise TypeError(f"extras must be a str, got {type(text).__name__}")
    return tuple(sorted({e.strip() for e in text.split(",") if e.strip()}))


def select(system: str, machine: str, extras: tuple[str, ...]) -> str:
    """The lock for a machine (``sys.platform``, ``platform.machine()``) and extras; ValueError naming
    what has none."""
    for name, (_, sys_platform, lock_machine, lock_extras) in LOCKS.items():
        if (sys_platform, lock_machine, lock_extras) == (system, machine, tuple(sorted(extras))):
            return name
    known = ", ".join(f"{p}/{m}" + (f" EXTRAS={','.join(e)}" if e else "") for _, p, m, e in LOCKS.values())
    raise ValueError(f"no lock for platform {system}/{machine} with extras {','.join(extras) or '(none)'}: "
                     f"locks/ holds {known}; DEPS=newest installs from pyproject's ranges instead")


def compile_lock(name: str, uv: str, torch_wheels: str | None) -> None:
    uv_platform, sys_platform, _, extras = LOCKS[name]
    out = lock_path(name)
    command = [uv, "pip", "compile", "pyproject.toml", "--quiet", "--generate-hashes",
               "--python-version", PYTHON, "--python-platform", uv_platform,
               "--no-emit-find-links", "--no-emit-index-url", "--custom-compile-command", COMPILE_COMMAND,
               "--output-file", str(out.relative_to(ROOT))]
    for extra in extras:
        command += ["--extra", extra]
    if uv_platform.startswith("x86_64-manylinux"):
        # torch 2.13.0+cpu is on PyTorch's CPU index only; a folder holding the wheel serves offline.
        command += ["--find-links", torch_wheels] if torch_wheels else ["--extra-index-url", TORCH_CPU_INDEX,
                                                                        "--index-strategy", "unsafe-best-match"]
    if sys_platform == "darwin":
        # pyproject allows torch >=2.5 on macOS (an environment of one's own); the lock takes the release the
        # Linux locks test with, so both oracles are the same torch.
        command += ["--constraints", str(DARWIN_CONSTRAINTS.relative_to(ROOT))]
    env = dict(os.environ)
    if uv_platform.endswith("apple-darwin"):
        env["MACOSX_DEPLOYMENT_TARGET"] = MACOS  # uv resolves for macOS 13 by default: MLX has no wheel there
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lock.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile", help="regenerate every lock with uv (make lock)")
    chosen = sub.add_parser("select", help="print the lock for this machine")
    chosen.add_argument("extras", nargs="?", default="")
    args = parser.parse_args(argv)
    if args.command == "select":
        try:
            name = select(sys.platform, platform.machine(), parse_extras(args.extras))
        except ValueError as error:
            print(f"scripts/lock.py: {error}", file=sys.stderr)
            return 2
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if LOCKS[name][0].startswith("x86_64-manylinux") and here != PYTHON:
            print(f"scripts/lock.py: {lock_path(name).relative_to(ROOT)} is resolved for CPython {PYTHON} and its "
                  f"torch 2.13.0+cpu is the cp{PYTHON.replace('.', '')} wheel; this is Python {here}: run make with "
                  f"PYTHON=python{PYTHON}, or DEPS=newest to install pyproject's ranges", file=sys.stderr)
            return 2
        print(lock_path(name).relative_to(ROOT))
        return 0
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists():
        print("scripts/lock.py: uv is not installed (make lock installs it into .venv)", file=sys.stderr)
        return 2
    wheels = os.environ.get("TORCH_WHEELS", os.environ.get("PIP_FIND_LINKS")) or None
    LOCK_DIR.mkdir(exist_ok=True)
    for name in LOCKS:
        print(f"lock: {lock_path(name).relative_to(ROOT)}", file=sys.stderr)
        compile_lock(name, uv, wheels)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
