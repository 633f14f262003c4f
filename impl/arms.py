"""Kernel arms and which of them this machine can run.

Every kernel in ``impl`` has three arms:

* ``graph``: the kernel's algorithm written with plain MLX ops (same partitions,
  float32 accumulation and merge). Runs on any MLX device, CPU included.
* ``metal``: the kernel body compiled with ``mx.fast.metal_kernel`` (Apple GPU).
* ``cuda``: the same body compiled with ``mx.fast.cuda_kernel`` behind a CUDA
  prelude (NVIDIA GPU, MLX's CUDA backend).

The custom-kernel arms need the GPU stream, so on ``--device cpu`` only ``graph``
runs, and the reason the others did not is reported, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

ARMS = ("graph", "metal", "cuda")
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class ArmStatus:
    name: str
    available: bool
    reason: str  # why it is unavailable; what it runs on when available


def metal_available() -> bool:
    return bool(mx.metal.is_available())


def cuda_available() -> bool:
    cuda = getattr(mx, "cuda", None)
    return bool(cuda is not None and cuda.is_available())


def gpu_available() -> bool:
    return metal_available() or cuda_available()


def default_device_name() -> str:
    """``gpu`` where MLX has one, else ``cpu``."""
    return "gpu" if gpu_available() else "cpu"


def use_device(name: str) -> None:
    """Make ``name`` ('cpu' or 'gpu') MLX's default device."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {name!r}")
    if name == "gpu" and not gpu_available():
        raise ValueError("device='gpu' requested but MLX has no GPU backend here (no Metal, no CUDA)")
    mx.set_default_device(mx.gpu if name == "gpu" else mx.cpu)


def current_device_name() -> str:
    return "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"


def discover_arms(device: str | None = None) -> dict[str, ArmStatus]:
    """Status of every arm on ``device`` (default: MLX's current default device)."""
    device = current_device_name() if device is None else device
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    statuses = {"graph": ArmStatus("graph", True, f"MLX ops on the {device}")}
    for arm, present, label in (
        ("metal", metal_available(), "no Metal device"),
        ("cuda", cuda_available(), "no CUDA device (MLX's CUDA backend is not available)"),
    ):
        if not present:
            statuses[arm] = ArmStatus(arm, False, label)
        elif device != "gpu":
            statuses[arm] = ArmStatus(arm, False, f"{arm} needs the GPU stream; this run uses --device {device}")
        else:
            statuses[arm] = ArmStatus(arm, True, f"{arm} kernels on the GPU")
    return statuses


def available_arms(device: str | None = None) -> list[str]:
    return [name for name, status in discover_arms(device).items() if status.available]


def resolve_arm(arm: str | None) -> str:
    """The arm a kernel call runs: ``arm`` if available, else a clear error.

    ``None`` picks the best available: the device's compiled arm, else graph.
    """
    # Every kernel call starts here, so the answer is remembered (building the statuses costs ~2 us, a
    # tenth of a decode kernel's host budget). The probes are part of the key: a test that replaces
    # one is seen at once, and the device type is read on every call (``mx.Device`` itself is no key: it
    # hashes by identity and compares by value). A hit costs ~0.15 us on CI's CPU, half of what building
    # the device's name did.
    key = (arm, mx.default_device().type, metal_available, cuda_available)
    try:
        return _RESOLVED[key]
    except (KeyError, TypeError):  # not seen yet, or an unhashable arm (refused below)
        pass
    if arm is not None and not isinstance(arm, str):
        raise TypeError(f"arm must be one of {ARMS} or None, got {type(arm).__name__}")
    resolved = _RESOLVED[key] = _resolve(arm)
    return resolved


_RESOLVED: dict = {}


def _resolve(arm: str | None) -> str:
    statuses = discover_arms()
    if arm is None:
        for name in ("metal", "cuda"):
            if statuses[name].available:
                return name
        return "graph"
    if arm not in statuses:
        raise ValueError(f"arm must be one of {ARMS} or None, got {arm!r}")
    if not statuses[arm].available:
        raise ValueError(f"arm={arm!r} is not available here: {statuses[arm].reason}")
    return arm
