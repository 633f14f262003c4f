"""The graph arm of direct paged attention: the partial and merge kernels in MLX ops.

``graph`` (``graph_attention``) is the same computation in MLX ops: the same partitions and float32
state; scores summed in each lane's order, then across lanes (``_lane_dot``);
dequantize-on-load rounded to the pool dtype; the same merge and casts. Its liberties change
only float32 rounding: inside a partition it takes the max, ``exp(s - max)`` and the sums at
once instead of per batch and per SIMD group, adds lanes in a different tree, and multiplies
then adds where the kernel fuses. It never uses a float32 matmul: MLX's CUDA backend computes
those with TF32 inputs (seen on the H200: a one-token output, which is V itself, came back
9e-4 off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx

from .launch import PAGED, SIMD, Layout, _lane_map, _quant_key

if TYPE_CHECKING:
    from impl.paged_attention import PagedStorage

__all__ = ["graph_attention"]


def _load(storage: PagedStorage, which: str, physical: mx.array, slot: mx.array, round_kv: bool = True) -> mx.array:
    """Token rows [T, Hkv, D] in float32, as the kernel reads them (dequantized, then rounded to InT
    when ``round_kv``)."""
    plane = storage.keys if which == "keys" else storage.values
    rows = plane[physical, :, slot]  # [T, Hkv, width]
    if storage.quantization is None:
        return rows.astype(mx.float32)
    bits, group = _quant_key(storage.quantization)
    prefix = "key" if which == "keys" else "value"
    scales = getattr(storage, f"{prefix}_scales")[physical, :, slot].astype(mx.float32)
    biases = getattr(storage, f"{prefix}_biases")[physical, :, slot].astype(mx.float32)
    pack = 32 // bits
    shifts = mx.arange(pack, dtype=mx.uint32) * bits
    codes = (rows[..., None] >> shifts) & ((1 << bits) - 1)  # element i of a word at bits i*BITS
    codes = codes.reshape(*rows.shape[:-1], -1).astype(mx.float32)
    scales, biases = mx.repeat(scales, group, axis=-1), mx.repeat(biases, group, axis=-1)
    values = scales * codes + biases
    return values.astype(storage.dtype).astype(mx.float32) if round_kv else values  # float(InT(s*q + b))


def _lane_dot(q: mx.array, k: mx.array, per_lane: int, lanes: int = SIMD) -> mx.array:
    """q [H, R, D] . k [H, T, D] -> [H, R, T] summed as the kernel sums: of the ``lanes`` that read a
    row, lane l owns dims (j * lanes + l) * per_lane + e and adds them in (j, e) order in float32,
    then the lane sums are added (the kernel's transpose-reduction adds them in a tree: rounding only).

    A plain float32 matmul would do for the algebra, but not for the precision:
    MLX's CPU GEMV was measured less accurate than the kernel's order (one
    D=256 case: 5.2 float32 ULP of max|s|, against 3.2 for a lane-split order and
    1.5 for NumPy/OpenBLAS), enough to fail float32 error-ratio gates the kernel
    passes, and MLX's CUDA float32 matmul rounds its inputs to TF32.
    """
    width = lanes * per_lane
    pad = -q.shape[-1] % width  # zero dims contribute exact zeros
    if pad:
        q = mx.pad(q, [(0, 0), (0, 0), (0, pad)])
        k = mx.pad(k, [(0, 0), (0, 0), (0, pad)])
    steps = q.shape[-1] // width
    q = q.reshape(*q.shape[:-1], steps, lanes, per_lane)
    k = k.reshape(*k.shape[:-1], steps, lanes, per_lane)
    sums = None  # [H, R, T, lanes]: each lane's running sum over its dims, in the kernel's order
    for j in range(steps):
        for e in range(per_lane):
            step = q[:, :, None, j, :, e] * k[:, None, :, j, :, e]
            sums = step if sums is None else sums + step
    return sums.sum(axis=-1)


def graph_attention(q: mx.array, storage: PagedStorage, table: mx.array, length: int, scale: float,
           span: int, layout: Layout = PAGED) -> mx.array:
    """The kernels' partial + merge in MLX ops (the module docstring says where it differs).
    A ``KVQ4`` layout passes its planes [1, Hkv, N, width] as one block of ``block_size`` N, table [0]."""
    _, hq, n, dk = q.shape
    hk, bs = storage.keys.shape[1], storage.block_size
    group, parts = hq // hk, -(-length // span)
    tokens = mx.arange(parts * span)
    # Pad positions re-read the last live token (never a slot past length) and are masked below.
    live = mx.minimum(tokens, length - 1)
    physical, slot = table[live // bs], live % bs
    k = _load(storage, "keys", physical, slot, layout.round_kv).transpose(1, 0, 2)  # [Hkv, T, Dk]
    v = _load(storage, "values", physical, slot, layout.round_kv).transpose(1, 0, 2)  # [Hkv, T, Dv]
    dv = v.shape[-1]

    # head h = kv * group + r; the kernel folds the scale into q as it loads it (in float32, or rounded
    # to q's dtype: a product of two values of the dtype is exact in float32, so this is MLX's q * scale)
    qf = q.astype(mx.float32) * mx.array(scale, dtype=mx.float32)
    if layout.round_q:
        qf = qf.astype(q.dtype).astype(mx.float32)
    qf = qf.reshape(hk, group * n, dk)
    bits = None if storage.quantization is None else _quant_key(storage.quantization)[0]
    lanes = _lane_map(dk, dv, storage.dtype, bits)
    scores = _lane_dot(qf, k, lanes.vk, lanes.lanes)
    query = mx.arange(n).reshape(1, n, 1)
    visible = tokens.reshape(1, 1, -1) <= (length - n + query)  # bottom-right causal, [1, n, T]
    scores = mx.where(visible, scores.reshape(hk, group, n, -1), -mx.inf)
    scores = scores.reshape(hk, group * n, parts, span)

    # Partial: per partition max, normalizer and unnormalized values (float32).
    maximum = scores.max(axis=-1)  # [Hkv, group*n, parts]; -inf for an empty partition
    shift = mx.where(maximum == -mx.inf, 0.0, maximum)
    weights = mx.exp(scores - shift[..., None])  # masked: exp(-inf) = 0
    total = weights.sum(axis=-1)
    # Elementwise products summed over the partition's tokens, not a matmul: MLX's
    # CUDA backend computes float32 matmuls with TF32 inputs (10-bit mantissas).
    accum = (weights[..., None] * v.reshape(hk, 1, parts, span, dv)).sum(axis=-2)  # [Hkv, group*n, parts, Dv]

    # Merge: rescale partitions to the global max.
    overall = maximum.max(axis=-1, keepdims=True)
    rescale = mx.exp(maximum - overall)  # empty partitions: 0
    value = (accum * rescale[..., None]).sum(axis=-2)
    normalizer = (total * rescale).sum(axis=-1)
    out = (value / normalizer[..., None]).astype(q.dtype)
    return out.reshape(1, hq, n, dv)
