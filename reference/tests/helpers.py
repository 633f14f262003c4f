"""Helpers shared by the oracle tests."""

from __future__ import annotations

from contextlib import contextmanager

import mlx.core as mx


@contextmanager
def relied_on(why: str):
    """A failing check of third-party behaviour the project relies on: its message also says who relies on it.

    ``why`` may name ``{version}``: MLX's, filled in, so the message says which release changed.
    """
    try:
        yield
    except AssertionError as exc:
        exc.args = (f"{exc.args[0] if exc.args else ''}\n{why.format(version=mx.__version__)}",)
        raise
