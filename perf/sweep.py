"""Variant sweeps of direct paged attention in kernel time: one kernel choice against others, interleaved in one process.

    from perf.sweep import sweep
    import impl.paged_attention as paged
    out = sweep([(32, 8, 1, 128, 131072)], {"registers": lambda: paged.set_matrix_ring(0),
                                            "ring 3": lambda: paged.set_matrix_ring(3)}, calls=12)

A choice is judged against another in one process, each measured in turn and ``rounds`` times (the spread between
two measurements of one kernel is the noise a difference must clear), because controls and kernels move between
processes with no code change (``perf/RESULTS.md``). For each shape, the paged cases of ``perf.cases.paged_group``
(each call on its own input set, up to ``calls`` sets):

1. the direct kernel's output under every variant is compared bit for bit with the first variant's (a choice of
   fetch, stage or layout that reaches the same products must give the same bits; ``identical`` says whether it did,
   ``apart`` how far: max |difference| / max |first|, inf where only one is NaN: a reordered sum moves it by
   roundings, a wrong kernel by its values);
2. the variants are measured in turn by ``perf.kernel_time.measure`` (kernel time: CUPTI through torch.profiler, or
   ``trace``), ``rounds`` rounds of all of them, then the controls (``controls``: MLX SDPA on contiguous K/V by
   default) ``rounds`` times; one line per measurement goes to ``log``;
3. ``reset`` (default: the first variant's apply) runs at the end, whatever happened, and the inputs are released.

The result: ``{"<dims>|<label>": [measurement, ...], "<dims>|<label>|identical": bool, "<dims>|<label>|apart":
float}``, a measurement being
``{"median_us", "iqr_us", "gbps", "split_us": {kernel name: median us}}``, or ``{"error": ...}`` where one failed
(the others still run). The records under ``records/h200-cuda/`` before this module each carry their own copy of
this loop (stage_sweep.py, target_sweep.py, ring_sweep.py, ...): records as they ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import mlx.core as mx
import numpy as np

from perf import kernel_time as kt
from perf.harness import check_count

__all__ = ["DIRECT", "sweep"]

DIRECT = "paged_attention"  # the case whose variants a sweep compares (perf.cases' kernel name)


def sweep(shapes: Iterable[Sequence[int]], variants: Mapping[str, Callable[[], None]], *, calls: int = 12,
          rounds: int = 2, controls: Sequence[str] = ("sdpa",), arms: Sequence[str] = ("cuda",),
          reset: Callable[[], None] | None = None, trace=None, timer: str | None = None,
          log: Callable[[str], None] = print) -> dict:
    """Kernel time of ``variants`` (label -> a callable that makes the choice) at each of ``shapes`` (DecodeShape
    fields: Hq, Hkv, rows, D, N), beside ``controls`` (module docstring)."""
    from perf.cases import paged_group
    from perf.shapes import DecodeShape

    shapes = [tuple(s) for s in shapes]
    if not shapes:
        raise ValueError("shapes must name at least one DecodeShape")
    if not isinstance(variants, Mapping) or not variants or not all(callable(v) for v in variants.values()):
        raise ValueError("variants must map at least one label to a callable that makes its choice")
    rounds = check_count("rounds", rounds, 1)
    calls = check_count("calls", calls, 1)
    first = next(iter(variants.values()))
    reset = reset or first
    if timer is None and trace is None:
        timer = kt.availability().timer
    out, start = {}, time.time()
    try:
        for dims in shapes:
            group = paged_group(DecodeShape(*dims), list(arms), copies=calls)
            try:
                for case in group.cases:
                    if case.kernel == DIRECT:
                        _compare(case, variants, dims, out, log)
                        todo = [(label, apply) for _ in range(rounds) for label, apply in variants.items()]
                    elif case.kernel in controls:
                        todo = [(case.kernel, None)] * rounds
                    else:
                        continue
                    for label, apply in todo:
                        if apply is not None:
                            apply()
                        out.setdefault(f"{dims}|{label}", []).append(
                            _measure(case, calls, trace, timer, f"{dims} {label}", start, log))
            finally:
                group.release()
    finally:
        reset()
    return out


def _output(case) -> np.ndarray:
    y = case.build()()
    return np.array((y[0] if isinstance(y, (tuple, list)) else y).astype(mx.float32))


def _compare(case, variants, dims, out, log) -> None:
    """Each variant's output against the first's, bit for bit (NaN where NaN), and how far apart they are."""
    labels = list(variants)
    variants[labels[0]]()
    reference = _output(case)
    scale = float(np.max(np.abs(reference), initial=0.0)) or 1.0
    for label in labels[1:]:
        variants[label]()
        y = _output(case)
        same = bool(np.array_equal(reference, y, equal_nan=True))
        with np.errstate(invalid="ignore"):
            apart = 0.0 if same else float(np.nanmax(np.where(np.isnan(reference) == np.isnan(y),
                                                              np.abs(y - reference), np.inf), initial=0.0)) / scale
        out[f"{dims}|{label}|identical"] = same
        out[f"{dims}|{label}|apart"] = apart
        log(f"{dims} {label}: bit-identical to {labels[0]}: {same}"
            + ("" if same else f" (max |difference| / max |{labels[0]}| = {apart:.3g})"))


def _measure(case, calls, trace, timer, tag, start, log) -> dict:
    try:
        result = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls, trace=trace,
                            timer=timer)
    except Exception as exc:  # one measurement's failure is recorded; the others still run
        log(f"{tag}: {type(exc).__name__}: {str(exc)[:300]}")
        return {"error": f"{type(exc).__name__}: {exc}"}
    split = {name: round(seconds * 1e6, 2) for name, seconds in result.kernel_medians_s().items()}
    parts = " ".join(f"{name[-26:]}={us:.1f}" for name, us in split.items())
    log(f"{tag:40s} {result.median_s * 1e6:8.1f} us {result.gbps(case.bytes):6.0f} GB/s {parts} "
        f"t={time.time() - start:.0f}")
    return {"median_us": result.median_s * 1e6, "iqr_us": result.iqr_s * 1e6, "gbps": result.gbps(case.bytes),
            "split_us": split}
