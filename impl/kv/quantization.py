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
        """ValueError unless ``group_size`` divides ``dim`` (the head dim called ``name``)."""
        if dim % self.group_size:
            raise ValueError(f"group_size {self.group_size} does not divide {name}={dim}")

    def quantize(self, rows: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """(packed, scales, biases) of ``rows`` [..., D]."""
        return mx.quantize(rows, group_size=self.group_size, bits=self.bits, mode=MODE)

    def dequantize(self, packed: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        """Rows [..., D] in the scales' dtype."""
        return mx.dequantize(packed, scales, biases, group_size=self.group_size, bits=self.bits, mode=MODE)


def check_quantization(quantization) -> "Quantization | None":
    if quantization is not None and not isinstance(quantization, Quantization):
        raise TypeError(f"quantization must be None or a Quantization, got {type(quantization).__name__}")
    return quantization
