"""Run context for the environment record: OS, MLX backend, versions, git state, date.

``run_context()`` returns the fields ``conftest.environment_record`` adds to
what it already records (device, MLX/numpy/scipy/hypothesis versions, arms,
profile). Nothing here imports torch: its version comes from the installed
package metadata, so pytest's start-up stays fast.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_version(name: str) -> str | None:
    """The installed version of ``name``, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def mlx_backend() -> str:
    """The backend MLX's GPU stream would use here: 'metal', 'cuda' or 'cpu' (no GPU)."""
    import mlx.core as mx

    if mx.metal.is_available():
        return "metal"
    cuda = getattr(mx, "cuda", None)
    if cuda is not None and cuda.is_available():
        return "cuda"
    return "cpu"


def git_state(root: Path = ROOT) -> dict:
    """``{"commit": sha or None, "dirty": bool or None}``; None where git is unavailable."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # Untracked files count as dirty too: the suite runs from the working tree.
    status = git("status", "--porcelain") if commit else None
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def dependency_state(root: Path = ROOT) -> dict | None:
    """The lock of this platform nearest what is installed: ``{"lock": path, "differs": [lines]}``, or None where
    ``locks/`` has none for this platform. ``differs`` empty: the tested versions exactly (``make`` builds .venv
    so); otherwise each package as ``scripts/deps_drift.py`` prints it (locked -> installed), e.g. a DEPS=newest run.
    """
    import platform as _platform
    import sys

    from scripts import deps_drift, lock

    installed = deps_drift.installed()
    best = None
    for name, (_, system, machine, _) in lock.LOCKS.items():
        path = root / "locks" / f"{name}.txt"
        if (system, machine) != (sys.platform, _platform.machine()) or not path.is_file():
            continue
        lines = deps_drift.drift(deps_drift.read_lock(path.read_text()), installed).lines()
        if best is None or len(lines) < len(best["differs"]):
            best = {"lock": f"locks/{name}.txt", "differs": [line.strip() for line in lines]}
    return best


def run_context(root: Path = ROOT) -> dict:
    """Fields for the environment record (all JSON-serializable)."""
    return {
        "dependencies": dependency_state(root),
        "os": f"{platform.system()} {platform.release()}",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "mlx_backend": mlx_backend(),
        "torch": package_version("torch"),
        "git": git_state(root),
    }
