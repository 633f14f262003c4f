"""Print pyproject's dependencies (plus the named extras) as requirement lines.

The Makefile feeds this to `pip install -r -`, so the project itself is never
built or installed: the suite runs from the checkout (pytest's pythonpath).
Environment markers stay on the lines; pip evaluates them per platform.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirement_lines(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"unknown extra {extra!r}; pyproject defines {sorted(optional)}")
        lines.extend(optional[extra])
    return lines


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    extras = [e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e]
    print("\n".join(requirement_lines(root / "pyproject.toml", extras)))
