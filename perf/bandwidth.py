"""The device's copy bandwidth: the yardstick every benchmark's GB/s is a percentage of.

Method: ``y = x * 1`` on a large contiguous float32 array ``x`` (1 GiB on a GPU,
64 MiB on the CPU), ``mx.eval(y)``. MLX does not simplify ``x * 1`` away, and
since ``x`` stays referenced its buffer is never donated: every call reads
``x.nbytes`` and writes ``x.nbytes`` into a fresh buffer, so the bytes counted
are ``2 * x.nbytes`` (read + write). Both sizes are far beyond the last-level
cache (H200: 50 MB L2; the CPU's L3 slice is tens of MB), so this is DRAM/HBM
bandwidth as an elementwise MLX kernel achieves it, the same kind of kernel
the benchmarks are built from. Timing: median of ``rounds`` timed calls after
``warmup`` untimed ones, each ending in ``mx.eval`` (``perf.harness.time_call``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import mlx.core as mx

from perf.harness import summarize, time_call

__all__ = ["COPY_BYTES", "CopyBandwidth", "copy_bandwidth"]

COPY_BYTES = {"gpu": 1 << 30, "cpu": 64 << 20}  # bytes of the source array per device type
METHOD = "y = x * 1 on a contiguous float32 array, mx.eval(y); bytes = 2 * x.nbytes (read + write)"


@dataclass(frozen=True)
class CopyBandwidth:
    gbps: float  # (2 * nbytes) / median_s / 1e9
    nbytes: int  # size of the source array
    median_s: float
    samples_s: tuple[float, ...]
    method: str = METHOD

    def as_dict(self) -> dict:
        return {**asdict(self), "samples_s": list(self.samples_s)}


def copy_bandwidth(nbytes: int | None = None, *, rounds: int = 10, warmup: int = 2) -> CopyBandwidth:
    """Measured copy bandwidth of MLX's default device (module docstring)."""
    if nbytes is None:
        nbytes = COPY_BYTES["gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"]
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    if nbytes < 4096 or nbytes % 4:
        raise ValueError(f"nbytes must be a multiple of 4 and >= 4096, got {nbytes}")
    x = mx.random.uniform(shape=(nbytes // 4,), dtype=mx.float32)
    mx.eval(x)
    samples = time_call(lambda: mx.eval(x * 1), rounds=rounds, warmup=warmup)
    median, _ = summarize(samples)
    del x
    return CopyBandwidth(gbps=2 * nbytes / median / 1e9, nbytes=nbytes, median_s=median, samples_s=tuple(samples))
