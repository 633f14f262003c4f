"""Fixture result sets for the report tests: records as the suite writes them.

Each scenario returns the list of records a run would append to results.jsonl
(the same shape ``parity.gates.Gate``, ``conftest.environment_record`` and
``reports.plugin`` produce; perf and mutant records follow reports/SCHEMA.md).
Values are generated from a seeded ``random.Random`` so every set is the same
on every run; nothing here is a measured result.
"""

from __future__ import annotations

import random

KERNELS = ("paged_attention", "sdpa_decode", "quantized_matmul", "normalized_argmax", "rope")
DTYPES = ("float32", "float16", "bfloat16")
SHAPES = ((1, 8, 64), (2, 8, 128), (4, 32, 128), (8, 32, 256), (16, 64, 512))
# ULP budgets per dtype used by the synthetic max_ulp gates (fixture values only).
ULPS = {"float32": 4, "float16": 2, "bfloat16": 2}
SKIP_REASONS = {"metal": "no Metal device", "cuda": "no CUDA device (MLX's CUDA backend is not available)"}


def environment(arms_available=("graph",), **overrides) -> dict:
    arms = {name: {"available": name in arms_available,
                   "reason": "MLX ops on the cpu" if name in arms_available else SKIP_REASONS.get(name, "unavailable")}
            for name in ("graph", "metal", "cuda")}
    return {"schema": 1, "kind": "environment", "time": 1.7e9, "device": "cpu", "mlx": "0.32.4", "numpy": "2.4.6",
            "scipy": "1.17.1", "hypothesis": "6.170.17", "torch": "2.13.0", "python": "3.11.7",
            "platform": "Linux-6.18-x86_64-with-glibc2.36", "machine": "x86_64", "profile": "ci", "os": "Linux 6.18",
            "date": "2026-11-29T12:00:00+00:00", "mlx_backend": "cpu",
            "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}, "arms": arms,
            **overrides}


def gate_record(kernel: str, arm: str, dtype: str, shape, gate: str, measured, threshold, *, case=None,
                test_id=None, passed=None) -> dict:
    test_id = test_id or f"parity/test_{kernel}.py::test_{kernel}_matches_oracle[{arm}-{dtype}]"
    passed = (float(measured) <= float(threshold)) if passed is None else passed
    return {"schema": 1, "kind": "gate", "test_id": test_id, "gate": gate, "kernel": kernel, "arm": arm,
            "case": case, "dtype": dtype, "shape": list(shape), "measured": measured, "threshold": threshold,
            "derivation": f"{ULPS[dtype]} ULP of {dtype}: one rounding of the output plus float32 accumulation"
            if gate == "max_ulp" else "FlashAttention's rule: 2x the naive low-precision baseline",
            "passed": passed, "worst": None if passed else {"index": [0, 1, 2], "actual": 1.5, "expected": 1.0},
            "detail": "" if passed else "worst element differs", "time": 1.7e9}


def gates(count: int, seed: int = 0, arm: str = "graph", kernels=KERNELS) -> list[dict]:
    """Passing gates spread over ``kernels``, dtypes and shapes (each kernel is one plot in the report)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kernel, dtype, shape = kernels[i % len(kernels)], DTYPES[(i // 5) % 3], SHAPES[(i // 15) % len(SHAPES)]
        if i % 2:
            out.append(gate_record(kernel, arm, dtype, shape, "max_ulp", rng.randint(0, ULPS[dtype]), ULPS[dtype],
                                   case=f"case{i % 40}"))
        else:
            bound = 10 ** rng.uniform(-4, -2)
            out.append(gate_record(kernel, arm, dtype, shape, "error_ratio", bound * rng.uniform(0.05, 0.9), bound,
                                   case=f"case{i % 40}"))
    return out


def outcome_record(nodeid: str, outcome: str = "passed", skip_reason=None, message=None, duration=0.01) -> dict:
    return {"schema": 1, "kind": "test", "nodeid": nodeid, "module": nodeid.split("::")[0], "outcome": outcome,
            "duration": duration, "skip_reason": skip_reason, "message": message,
            "when": "call" if outcome == "failed" else ("setup" if outcome == "skipped" else None), "time": 1.7e9}


def property_record(nodeid: str, failed: bool = False) -> dict:
    failure = None
    if failed:
        failure = {"error": "GateFailure: max_ulp gate failed", "examples": ["test_roundtrip(\n    n=17,\n)"],
                   "hypothesis_version": "6.170.17", "blob": "AXicY2BgYGQAAAAZAAY=", "seed": 12345,
                   "commands": [f".venv/bin/python -m pytest '{nodeid}' -p reports.plugin "
                                "--mlxgate-reproduce=6.170.17:AXicY2BgYGQAAAAZAAY=",
                                f"MLXGATE_PROFILE=ci .venv/bin/python -m pytest '{nodeid}' --hypothesis-seed=12345"]}
    return {"schema": 1, "kind": "property", "nodeid": nodeid, "module": nodeid.split("::")[0],
            "outcome": "failed" if failed else "passed", "examples": 3 if failed else 100, "invalid": 2,
            "failing": 1 if failed else 0, "shrinks": 25 if failed else 0, "seconds": 1.25, "runs": 1,
            "stopped_because": "nothing left to do" if failed else "settings.max_examples=100",
            "phases": {}, "failure": failure, "time": 1.7e9}


def finding() -> dict:
    return {"schema": 1, "kind": "finding", "test_id": "parity/test_argmax.py::test_argmax_ties",
            "title": "mx.argmax returns the first index on ties on the CPU backend",
            "evidence": {"input": [1.0, 3.0, 3.0], "mx.argmax": 1, "mlx": "0.32.4"},
            "kernel": "normalized_argmax", "arm": None, "time": 1.7e9}


def perf_record(benchmark: str, median_s: float, baseline_median_s: float | None, regressed: bool,
                p_value: float = 0.5, effect: float = 0.1, **timing) -> dict:
    nbytes = 64 * 2**20
    return {"schema": 1, "kind": "perf", "benchmark": benchmark, "kernel": "paged_attention", "arm": "graph",
            "shape": [8, 32, 128], "median_s": median_s, "iqr_s": median_s * 0.05, "bytes": nbytes,
            "flops": 2 * nbytes, "gbps": nbytes / median_s / 1e9, "pct_copy_bw": 100 * (nbytes / median_s / 1e9) / 20.0,
            "baseline_median_s": baseline_median_s, "p_value": p_value, "effect": effect, "regressed": regressed,
            "time": 1.7e9, **timing}


def left_out_mutant_record(name: str) -> dict:
    """A mutant of a CUDA-only variant, on a run without the cuda arm (mutants/runner.py: nothing ran)."""
    return {"schema": 1, "kind": "mutant", "name": name, "killed": False, "killed_by": None, "status": "left_out",
            "seconds": 0.0, "diff": "", "detail": "its code runs only on the cuda arm; this run's arms: graph",
            "time": 1.7e9}


def mutant_record(name: str, killed: bool) -> dict:
    return {"schema": 1, "kind": "mutant", "name": name, "killed": killed,
            "killed_by": "parity/test_paged_attention.py::test_matches_oracle[graph]" if killed else None,
            "seconds": 3.5, "diff": "--- a/impl/paged_attention.py\n+++ b/impl/paged_attention.py\n-    m = max(a, b)\n"
                                    "+    m = min(a, b)\n", "time": 1.7e9}


# --- scenarios --------------------------------------------------------------


# Scenarios other than mixed_failures and full_suite gate few kernels: each kernel
# is a plot, and plots are most of the time a render takes.
def all_pass() -> list[dict]:
    return [environment(), *gates(60, kernels=KERNELS[:2]), outcome_record("parity/test_rope.py::test_rope[graph]")]


def mixed_failures() -> list[dict]:
    records = [environment(), *gates(60)]
    records.append(gate_record("sdpa_decode", "graph", "float16", (2, 8, 128), "max_ulp", 9, 2, case="long-context",
                               test_id="parity/test_sdpa_decode.py::test_sdpa_decode_long[graph]"))
    records.append(gate_record("rope", "graph", "float32", (4, 32, 128), "max_ulp", "inf", 4, case="nan-input",
                               test_id="parity/test_rope.py::test_rope_nan[graph]"))
    records += [outcome_record("parity/test_sdpa_decode.py::test_sdpa_decode_long[graph]", "failed",
                            message="GateFailure: max_ulp gate failed (kernel=sdpa_decode)"),
                outcome_record("parity/test_rope.py::test_rope[graph]")]
    return records


def skipped_arms() -> list[dict]:
    records = [environment(), *gates(20, kernels=KERNELS[:1])]
    for name in ("test_rope", "test_sdpa_decode"):
        records.append(outcome_record(f"parity/test_x.py::{name}[graph]"))
        for arm, reason in SKIP_REASONS.items():
            records.append(outcome_record(f"parity/test_x.py::{name}[{arm}]", "skipped", skip_reason=f"arm {arm}: {reason}"))
    return records


def with_findings() -> list[dict]:
    return [environment(), *gates(10, kernels=KERNELS[:1]), finding()]


def with_perf_and_mutants() -> list[dict]:
    return [environment(), *gates(20, kernels=KERNELS[:1]), property_record("properties/test_quant.py::test_roundtrip"),
            property_record("properties/test_quant.py::test_dequant_bound", failed=True),
            perf_record("paged_decode_b8", 0.0021, 0.0020, False, p_value=0.4, effect=0.05, batch=8,
                        protocol="eval", inputs="distinct", input_sets=8),
            perf_record("paged_prefill_b1", 0.0150, 0.0100, True, p_value=0.001, effect=1.8),
            mutant_record("swap max for min in the online softmax", True),
            mutant_record("drop the -inf mask on padded slots", False),
            left_out_mutant_record("sum the fused lse's lanes upward")]


def full_suite(count: int = 5000) -> list[dict]:
    """A realistic full run: every kernel, three dtypes, thousands of Hypothesis-driven gates, a few failures."""
    records = [environment(), *gates(count - 3, seed=7)]
    records += [gate_record(k, "graph", "bfloat16", (16, 64, 512), "max_ulp", 5, 2, case="edge")
                for k in KERNELS[:3]]
    records += [outcome_record(f"parity/test_{k}.py::test_{k}[{arm}-{d}]",
                            "passed" if arm == "graph" else "skipped",
                            skip_reason=None if arm == "graph" else f"arm {arm}: {SKIP_REASONS[arm]}")
                for k in KERNELS for d in DTYPES for arm in ("graph", "metal", "cuda")]
    records += [property_record(f"properties/test_{k}.py::test_{k}_property") for k in KERNELS]
    records += [finding()]
    return records
