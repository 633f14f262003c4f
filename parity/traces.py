"""The compiled arms' trace caches (kvq4 decode, multi-query): one ``mx.compile``d function per input
signature, a bounded number kept. Shared by their parity tests; nothing here runs a kernel."""

from __future__ import annotations

from impl.kernels import TRACES_KEPT


def check_bounded_trace_cache(cached, leading: tuple, signature) -> None:
    """``cached(*leading, signature(n))``: the same function for one signature, another for the next
    length, and at most ``maxsize`` kept after many lengths (the oldest dropped, so MLX frees them)."""
    cached.cache_clear()
    first = cached(*leading, signature(1000))
    assert cached(*leading, signature(1000)) is first  # a decode step's other layers replay it
    assert cached(*leading, signature(1001)) is not first  # the next step traces its own
    for n in range(1002, 1100):
        cached(*leading, signature(n))
    info = cached.cache_info()
    assert info.currsize == info.maxsize == TRACES_KEPT <= 16  # a few sequences' lengths, not a leak
    cached.cache_clear()
