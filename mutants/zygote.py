"""A warm interpreter that forks one child per inner pytest run (Linux, the CPU device).

Every mutant's killing tests run in a fresh pytest process inside that mutant's copy of the tree.
Started as ``python -m pytest``, each such process spends ~2 s importing the same third-party
modules (pytest and its plugins, Hypothesis, NumPy, SciPy, ml_dtypes, MLX) before it runs a
test: for a catalog of 70 mutants plus the clean check that was a third of the catalog's time
on 2 cores. This script imports them once and then forks per run; the child starts from those
modules already loaded and imports nothing of the project's before it is in the copy, so every
project module (the mutated ones included) comes from the copy, as in a fresh process.

It is run by path (``python mutants/zygote.py``), never imported from the tree: ``sys.path[0]``
is then this folder, not the repository, and nothing of the project is imported here. Protocol,
one JSON object per line: the runner writes ``{"cwd", "args", "env", "log"}``; the zygote answers
``{"pid": N}`` once the child runs (leading its own process group, setsid: the runner kills that group at a
timeout) and ``{"exit": code}`` when it ended (a negative code: killed by that signal). End of
input ends the zygote.

Only on Linux with the CPU device (``runner.zygote_fits``): forking after MLX's Metal or CUDA
libraries are loaded is unsafe (macOS's Objective-C runtime aborts forked children), so GPU runs
start plain processes.
"""

from __future__ import annotations

import json
import os
import sys

# Imported once, inherited by every child. Only third-party modules: none of the project's.
WARM = ("numpy", "scipy.special", "ml_dtypes", "mlx.core", "hypothesis", "hypothesis.stateful",
        "hypothesis.extra.numpy", "pytest", "_pytest.python", "_pytest.unittest", "_hypothesis_pytestplugin",
        "xdist.plugin", "pytest_benchmark.plugin", "jinja2", "yaml")


def warm() -> None:
    import importlib

    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional plugin this venv lacks: the child imports what it has
            pass


def child(request: dict) -> None:
    """In the forked child: become ``python -m pytest ARGS`` run in ``cwd`` with ``env``; never returns."""
    code = 70  # EX_SOFTWARE: the harness itself failed
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.dont_write_bytecode = True  # PYTHONDONTWRITEBYTECODE is read at start-up only
        # `python -m pytest` puts the working directory first on sys.path; this script put its own folder there.
        sys.path[0] = request["cwd"]
        # pytest marks its plugins' distributions for assertion rewriting; those warmed here were imported before
        # it could, which it warns about once each: nothing of theirs is a test, so the warning says nothing.
        args = ["-W", "ignore::pytest.PytestAssertRewriteWarning", *request["args"]]
        sys.argv = ["pytest", *args]
        import pytest

        code = int(pytest.main(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report it in the log, exit non-zero
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    warm()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
