"""Affine KV quantization settings and the two MLX calls that implement them.

A quantized pool stores, for K and for V, three planes per token row:
``packed`` (uint32, ``head_dim * bits / 32`` words), ``scales`` and ``biases``
(the pool dtype, ``head_dim / group_size`` each): exactly what
``mx.quantize(rows, group_size, bits, mode="affine")`` returns for rows shaped
``[..., head_dim]``. Groups run along the head dimension, so every token row is
quantized on its own and writing rows in pieces gives the same planes as
quantizing them all at once (the bit-exact gate in ``parity/test_kv_parity.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from impl.checks import check_int

from .validation import KV_DTYPES  # the dtypes a pool's rows, scales and biases take

SUPPORTED_BITS = (4, 8)
# MLX's affine mode accepts these group sizes only (mx.quantize refuses others).
SUPPORTED_GROUP_SIZES = (32, 64, 128)
MODE = "affine"


@dataclass(frozen=True)
class Quantization:
    """Affine quantization of a KV pool: ``bits`` in {4, 8}, ``group_size`` in {32, 64, 128}."""

    bits: int
    group_size: int

    def __post_init__(self):
        # Python and NumPy integers, kept as Python ints (frozen: set through object.__setattr__)
        object.__setattr__(self, "bits", check_int("bits", self.bits))
        if self.bits not in SUPPORTED_BITS:
            raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {self.bits}")
        object.__setattr__(self, "group_size", check_int("group_size", self.group_size))
        if self.group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size must be one of {SUPPORTED_GROUP_SIZES}, got {self.group_size}")

    @property
    def pack(self) -> int:
        """Quantized values per uint32 word."""
        return 32 // self.bits

    def check_divides(self, dim: int, name: str) -> None:
        """ValueError unless ``dim`` (the head dim called ``name``) is a positive int that ``group_size`` divides."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        dim = check_int(name, dim, minimum=1)
        if dim % self.group_size:
            raise ValueError(f"group_size {self.group_size} does not divide {name}={dim}")

    def quantize(self, rows: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """(packed, scales, biases) of ``rows`` [..., D]: a floating mx.array whose D ``group_size`` divides."""
        if not isinstance(rows, mx.array):
            raise TypeError(f"rows must be an mx.array, got {type(rows).__name__}")
        if rows.dtype not in KV_DTYPES:
            raise ValueError(f"rows must be float32, float16 or bfloat16, got {rows.dtype}")
        if rows.ndim < 2:  # MLX's quantize takes matrices (a token row per row)
            raise ValueError(f"rows must be [..., D] with at least 2 dims, got shape {list(rows.shape)}")
        self.check_divides(rows.shape[-1], "rows' last dim")
        return mx.quantize(rows, group_size=self.group_size, bits=self.bits, mode=MODE)

    def dequantize(self, packed: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        """Rows [..., D] in the scales' dtype: ``packed`` uint32 [..., D * bits / 32], ``scales`` / ``biases``
        [..., D / group_size] of one floating dtype (what ``quantize`` returns)."""
        for name, plane in (("packed", packed), ("scales", scales), ("biases", biases)):
            if not isinstance(plane, mx.array):
                raise TypeError(f"{name} must be an mx.array, got {type(plane).__name__}")
        if packed.dtype != mx.uint32:
            raise ValueError(f"packed must be uint32, got {packed.dtype}")
        if scales.dtype not in KV_DTYPES or biases.dtype != scales.dtype:
            raise ValueError(f"scales and biases must share a floating dtype, got {scales.dtype} and {biases.dtype}")
        groups = packed.shape[:-1] + (packed.shape[-1] * self.pack // self.group_size,) if packed.ndim else None
        if packed.ndim < 2 or packed.shape[-1] * self.pack % self.group_size or scales.shape != groups \
                or biases.shape != groups:
            raise ValueError(f"packed [..., D * {self.bits} / 32] needs scales and biases [..., D / {self.group_size}]"
                             f", got {list(packed.shape)}, {list(scales.shape)}, {list(biases.shape)}")
        if packed.size == 0:  # no rows: MLX's dequantize cannot reshape an empty array
            return mx.zeros(packed.shape[:-1] + (packed.shape[-1] * self.pack,), scales.dtype)
        return mx.dequantize(packed, scales, biases, group_size=self.group_size, bits=self.bits, mode=MODE)


def check_quantization(quantization) -> "Quantization | None":
    if quantization is not None and not isinstance(quantization, Quantization):
        raise TypeError(f"quantization must be None or a Quantization, got {type(quantization).__name__}")
    return quantization
