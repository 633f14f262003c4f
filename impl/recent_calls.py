"""Recently validated calls: a public kernel function runs its checks once per argument signature.

A decode step calls each kernel once per layer with the same shapes, dtypes and scalars, and the
checks (shapes, dtypes, ranges, in Python) cost the H200's host 6-12 us per call: a tenth of a
D128 call in perf's protocol (``perf/RESULTS.md``). So a public function builds a key
of everything its checks read (``array_key`` of each array, each scalar with its type, so ``True``
never passes for ``1``) and keeps what the checks led to (the compiled call, its device scalars):
equal keys validate the same way, so a hit may skip them. A key that cannot be built (an argument
that is not an ``mx.array``, an unhashable scalar) is ``None``: that call always takes the checks,
whose error then names the argument, and nothing is remembered for it.

``RecentCalls`` keeps the last ``size`` keys remembered (a growing KV cache changes its shape every step, so
old keys must go; the compiled calls they hold are ``lru_cache``d by their modules as well). First in,
first out: a hit does not reorder (a decode step's layers remember one key and hit it until the next step).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

__all__ = ["RecentCalls", "array_key", "scalar_key"]


class _Unkeyable(Exception):
    """An argument no key can stand for (the caller then takes the checks)."""


def array_key(x) -> tuple:
    """What a check reads of an array: its shape and dtype; not an ``mx.array``: ``_Unkeyable``."""
    if type(x) is not mx.array:
        raise _Unkeyable
    return x.shape, x.dtype


def scalar_key(value) -> tuple:
    """A scalar argument with its type (``True == 1`` and ``hash(True) == hash(1)``: without the type
    a key made with 1 would let True skip the check that refuses it)."""
    return type(value), value


class RecentCalls:
    """The values of the last ``size`` validated keys (module docstring)."""

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"size must be a positive int, got {type(size).__name__}")
        if size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self._size = int(size)
        self._values: dict = {}  # insertion order: the oldest key first

    def lookup(self, build) -> tuple:
        """(key, value): ``build()``'s key (made of ``array_key`` / ``scalar_key`` parts and e.g. the resolved
        arm) and the value remembered for it. The key is None when ``build`` raises (an argument that cannot be
        keyed, an arm that does not resolve: the checks then raise their error in their own order) or is
        unhashable; the value is None when nothing is remembered."""
        try:
            key = build()
            return key, self._values.get(key)
        except Exception:  # noqa: BLE001 - any failure means: take the checks
            return None, None

    def remember(self, key, value):
        """Keep ``value`` for ``key`` (a None key keeps nothing), forgetting the oldest key past ``size``;
        returns ``value``."""
        if key is not None:
            self._values[key] = value
            if len(self._values) > self._size:
                del self._values[next(iter(self._values))]
        return value

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
