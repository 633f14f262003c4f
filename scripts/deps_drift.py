"""What the running environment holds that its lock does not: the packages whose versions changed.

    python scripts/deps_drift.py LOCK            # print the differences (exit 0)
    python scripts/deps_drift.py LOCK --check    # exit 1 when there is any (a locked .venv must equal its lock)
    python scripts/deps_drift.py --extras lint   # against this machine's lock for those extras (scripts/lock.py)
    python scripts/deps_drift.py ... --failed    # the suite failed: name what changed, as the likely cause

Run it with the environment's own interpreter (``.venv-newest/bin/python``): it reads that
interpreter's installed distributions. ``make test DEPS=newest`` prints the differences
before the tests and again, as the suspects, when they fail; a locked ``make venv`` checks
that what pip installed is exactly the lock.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# The installer's own packages: in every venv, never in a lock (uv leaves them out).
INSTALLER = frozenset({"pip"})
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """PEP 503 name: ``ML_dtypes`` and ``ml-dtypes`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict[str, str]:
    """``name==version`` pins of a requirements lock (hash and comment lines skipped), by canonical name."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the lock's contents (a str), got {type(text).__name__}")
    pins: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "--")):
            continue
        match = PIN.match(stripped)
        if not match:
            raise ValueError(f"lock line {number} is not a name==version pin: {line!r}")
        name = canonical(match.group(1))
        if name in pins:
            raise ValueError(f"lock line {number}: {name} is pinned twice")
        pins[name] = match.group(2)
    return pins


def installed() -> dict[str, str]:
    """This interpreter's distributions, by canonical name."""
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


@dataclass(frozen=True)
class Drift:
    changed: tuple[tuple[str, str, str], ...]  # (name, locked, installed)
    missing: tuple[tuple[str, str], ...]  # locked, not installed: (name, locked)
    extra: tuple[tuple[str, str], ...]  # installed, not in the lock: (name, installed)

    def __bool__(self) -> bool:
        return bool(self.changed or self.missing or self.extra)

    def lines(self) -> list[str]:
        return ([f"  {n} {old} -> {new}" for n, old, new in self.changed]
                + [f"  {n} {old} -> not installed" for n, old in self.missing]
                + [f"  {n} (not in the lock) {new}" for n, new in self.extra])


def drift(locked: dict[str, str], present: dict[str, str]) -> Drift:
    present = {n: v for n, v in present.items() if n not in INSTALLER}
    return Drift(changed=tuple((n, locked[n], present[n]) for n in sorted(locked.keys() & present.keys())
                               if locked[n] != present[n]),
                 missing=tuple((n, locked[n]) for n in sorted(locked.keys() - present.keys())),
                 extra=tuple((n, present[n]) for n in sorted(present.keys() - locked.keys())))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/deps_drift.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path, nargs="?", help="a lock file (default: this machine's, by --extras)")
    parser.add_argument("--extras", default="", help="EXTRAS as make takes them, to select this machine's lock")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the environment differs from the lock")
    mode.add_argument("--failed", action="store_true", help="the suite failed: name the changed packages")
    args = parser.parse_args(argv)
    if args.lock is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import lock as locks  # scripts/lock.py, beside this file

        try:
            name = locks.select(sys.platform, platform.machine(), locks.parse_extras(args.extras))
        except ValueError as error:
            print(f"deps: nothing to compare with: {error}")
            return 1 if args.check else 0
        args.lock = Path(os.path.relpath(locks.lock_path(name)))
    if not args.lock.is_file():
        print(f"deps_drift: lock {args.lock}: no such file", file=sys.stderr)
        return 2
    found = drift(read_lock(args.lock.read_text()), installed())
    count = len(found.lines())
    if not found:
        print(f"deps: the environment is exactly {args.lock}")
    elif args.failed:
        print(f"deps: the suite failed on versions other than {args.lock}'s; the {count} packages that "
              "changed, the likely cause (pin one back in a venv to bisect):", *found.lines(), sep="\n")
    else:
        print(f"deps: {count} packages differ from {args.lock} (locked -> installed):", *found.lines(), sep="\n")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
