"""The Metal canary: a trivial custom kernel with a known answer, run before any metal-arm test.

A Metal device can accept a kernel and hand back wrong data without raising:
a virtual machine's paravirtual GPU (GitHub-hosted macOS runners) reports
Metal as available, and custom kernels on such devices have been seen to
return all zeros. Every metal-arm gate would then measure garbage, and zeros
can even pass a loose gate. So before the first metal-arm test the suite runs

    out[i] = inp[i] * 2 + i          float32, N = 4096 threads, 256 per threadgroup

and checks every element exactly. The inputs are multiples of 1/4 in
[-64, 64) and i < 2**12, so ``inp*2`` and ``inp*2 + i`` are exactly
representable in float32 (at most 15 significant bits): any correct device,
with or without a fused multiply-add, returns exactly the expected bits.

Statuses (``CanaryResult.status``):

* ``passed``: every element is right.
* ``failed``: the device has Metal, but the kernel raised, or returned zeros
  or garbage. Metal-arm tests must fail with the canary's message.
* ``unavailable``: no usable Metal device: MLX has no Metal backend here, or
  the device is a VM's paravirtual GPU. That is judged by the device's name
  before anything runs: even a right answer there would not speak for Apple
  silicon, and GitHub documents GPU compute as unsupported on those runners.
* ``not_run``: (records only) this run does not use the metal arm
  (e.g. ``--device cpu`` on a Mac with a real GPU).

Command line (the CI canary step)::

    python -m impl.canary [--allow-unavailable] [--json]

prints ``mlxgate metal canary: <status>: <message>`` and exits 0 (passed),
1 (failed) or 2 (unavailable; 0 with ``--allow-unavailable``, for runners
where an unusable Metal is the expected outcome); a bad command line exits 64. Under GitHub Actions it
also emits an annotation, so the verdict shows on the run's summary page.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from impl import arms

__all__ = [
    "EXIT_FAILED",
    "EXIT_PASSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "N",
    "STATUSES",
    "THREADGROUP",
    "CanaryResult",
    "canary_input",
    "check_output",
    "expected_output",
    "failure_message",
    "main",
    "metal_device_name",
    "run_canary",
    "status_without_running",
    "unavailable_reason",
]

STATUSES = ("passed", "failed", "unavailable", "not_run")
N = 4096  # threads: 16 threadgroups, enough to catch a device that runs only the first group
THREADGROUP = 256
EXIT_PASSED, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2
EXIT_USAGE = 64  # a bad command line (sysexits' EX_USAGE): argparse's own 2 would read as "no Metal device"
SOURCE = """
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 2.0f + float(i);
"""


@dataclass(frozen=True)
class CanaryResult:
    """What the canary found. ``first_bad`` is ``{"index", "actual", "expected"}`` of the first wrong element."""

    status: str
    message: str
    device_name: str | None = None
    n: int | None = None
    wrong: int | None = None  # elements that differ from the expected value (NaN counts as wrong)
    zeros: int | None = None  # elements that are exactly 0.0
    first_bad: dict[str, Any] | None = None
    seconds: float | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not isinstance(self.message, str) or not self.message:
            raise ValueError("message must be a non-empty string saying why")

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def record(self, **context: Any) -> dict[str, Any]:
        """A ``canary`` record for ``reports.recorder.append_record`` (reports/SCHEMA.md)."""
        return {"kind": "canary", "arm": "metal", **asdict(self), "time": time.time(), **context}


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n <= 0 or n % THREADGROUP or n > 2**12:
        # n <= 2**12 keeps every output exactly representable (module docstring).
        raise ValueError(f"n must be a positive multiple of {THREADGROUP} and at most 4096, got {n}")
    return int(n)


def canary_input(n: int = N) -> np.ndarray:
    """float32 ``(n,)``: ``((37 i) mod 512 - 256) / 4``, multiples of 1/4 in [-64, 64); neighbours differ."""
    i = np.arange(_check_n(n), dtype=np.int64)
    return (((i * 37) % 512 - 256) / 4).astype(np.float32)


def expected_output(n: int = N) -> np.ndarray:
    """float32 ``(n,)``: ``inp * 2 + i``, exact (computed in float64, then rounded: no rounding happens)."""
    inp = canary_input(n).astype(np.float64)
    return (inp * 2 + np.arange(n, dtype=np.float64)).astype(np.float32)


def check_output(actual: Any, n: int = N, device_name: str | None = None,
                 seconds: float | None = None) -> CanaryResult:
    """Judge what the kernel returned: ``passed`` only when every element is exactly right.

    ``actual`` is anything ``np.asarray`` takes (an MLX array included).
    """
    n = _check_n(n)
    if actual is None:
        raise TypeError("actual must be an array of the kernel's output, got None")
    got = np.asarray(actual)
    common = dict(device_name=device_name, n=n, seconds=seconds)
    where = f" on {device_name!r}" if device_name else ""
    if got.shape != (n,) or got.dtype != np.float32:
        return CanaryResult("failed", f"the canary kernel{where} returned shape {got.shape} dtype {got.dtype}, "
                                      f"expected ({n},) float32", **common)
    want = expected_output(n)
    bad = ~(got == want)  # NaN != anything: garbage NaNs count as wrong
    wrong, zeros = int(bad.sum()), int((got == 0).sum())
    if not wrong:
        return CanaryResult("passed", f"out[i] = inp[i]*2 + i was exact for all {n} elements{where}",
                            wrong=0, zeros=zeros, **common)
    index = int(np.flatnonzero(bad)[0])
    first_bad = {"index": index, "actual": float(got[index]), "expected": float(want[index])}
    if zeros == n:
        what = (f"returned all zeros ({n} of {n} elements): the kernel did not run or its output was never "
                "written (a paravirtual or broken Metal device does this)")
    else:
        finite = int(np.isfinite(got).sum())
        what = (f"returned garbage: {wrong} of {n} elements wrong ({zeros} zero, {n - finite} non-finite); "
                f"first at index {index}: got {got[index]!r}, expected {want[index]!r}")
    return CanaryResult("failed", f"the canary kernel out[i] = inp[i]*2 + i{where} {what}",
                        wrong=wrong, zeros=zeros, first_bad=first_bad, **common)


def metal_device_name() -> str | None:
    """MLX's name for the GPU (``Apple M2 Max``, ``Apple Paravirtual device``), or None without Metal."""
    if not arms.metal_available():
        return None
    import mlx.core as mx

    try:
        return str(mx.device_info(mx.gpu).get("device_name") or "") or None
    except (RuntimeError, ValueError, AttributeError):
        return None


def unavailable_reason() -> str | None:
    """Why this machine has no usable Metal device, or None when it has one (that the canary may test)."""
    if not arms.metal_available():
        return f"no Metal device: MLX has no Metal backend here ({platform.system()} {platform.machine()})"
    name = metal_device_name()
    if name and "paravirtual" in name.lower():
        return (f"the Metal device is {name!r}, a virtual machine's paravirtual GPU (GitHub-hosted macOS "
                "runners): GitHub documents GPU compute there as unsupported, and its results would not stand "
                "for Apple silicon; run the metal arm on a self-hosted Apple Silicon runner")
    return None


def status_without_running(arm_reason: str) -> CanaryResult:
    """The canary's status for a run that does not use the metal arm (``arm_reason`` says why)."""
    if not isinstance(arm_reason, str) or not arm_reason:
        raise ValueError("arm_reason must be a non-empty string (the metal arm's skip reason)")
    reason = unavailable_reason()
    if reason:
        return CanaryResult("unavailable", reason, device_name=metal_device_name())
    return CanaryResult("not_run", f"the metal arm is not part of this pytest run ({arm_reason}); "
                                   "`python -m impl.canary` checks the device on its own",
                        device_name=metal_device_name())


def _launch(n: int) -> np.ndarray:
    import mlx.core as mx

    kernel = mx.fast.metal_kernel(name="mlxgate_canary", input_names=["inp"], output_names=["out"], source=SOURCE)
    # No init_value: a kernel that never runs leaves the buffer as it was (zeros or stale data), which is the point.
    (out,) = kernel(inputs=[mx.array(canary_input(n))], grid=(n, 1, 1), threadgroup=(THREADGROUP, 1, 1),
                    output_shapes=[(n,)], output_dtypes=[mx.float32], stream=mx.gpu)
    mx.eval(out)
    return np.array(out, copy=True)


def run_canary(n: int = N) -> CanaryResult:
    """Run the canary kernel on this machine's Metal device and judge it."""
    n = _check_n(n)
    reason = unavailable_reason()
    name = metal_device_name()
    if reason:
        return CanaryResult("unavailable", reason, device_name=name, n=n)
    start = time.perf_counter()
    try:
        actual = _launch(n)
    except Exception as exc:  # MLX raises RuntimeError (compile, launch); anything else is as fatal here
        return CanaryResult("failed", f"the canary kernel on {name!r} raised {type(exc).__name__}: {exc}",
                            device_name=name, n=n, seconds=time.perf_counter() - start)
    return check_output(actual, n=n, device_name=name, seconds=time.perf_counter() - start)


def failure_message(result: CanaryResult) -> str:
    """What a metal-arm test says when the canary did not pass."""
    if not isinstance(result, CanaryResult):
        raise TypeError(f"result must be a CanaryResult, got {type(result).__name__}")
    return (f"Metal canary {result.status}: {result.message}. Metal-arm results would be meaningless, so every "
            "metal-arm test fails until the canary passes (reproduce: .venv/bin/python -m impl.canary)")


def _annotation(result: CanaryResult, allow_unavailable: bool) -> str:
    level = {"passed": "notice", "failed": "error"}.get(result.status,
                                                        "notice" if allow_unavailable else "error")
    text = str(result).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return f"::{level} title=Metal canary::{text}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m impl.canary", description=__doc__.splitlines()[0])
    parser.add_argument("--allow-unavailable", action="store_true",
                        help="exit 0 when there is no usable Metal device (hosted runners); a failed kernel still fails")
    parser.add_argument("--json", action="store_true", help="also print the canary record as JSON")
    args = parser.parse_args(argv)
    result = run_canary()
    print(f"mlxgate metal canary: {result}")
    if result.status == "unavailable" and args.allow_unavailable:
        print("mlxgate metal canary: an unusable Metal device is the expected outcome here (--allow-unavailable); "
              "no metal-arm result comes from this machine")
    if args.json:
        print(json.dumps(result.record(where="cli"), sort_keys=True))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(_annotation(result, args.allow_unavailable))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as summary:
            summary.write(f"**Metal canary**: `{result.status}`: {result.message}\n")
    if result.ok:
        return EXIT_PASSED
    if result.status == "unavailable":
        return EXIT_PASSED if args.allow_unavailable else EXIT_UNAVAILABLE
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
