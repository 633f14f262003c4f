"""Direct paged attention: a few query rows read K/V blocks in place through a block table.

Contract (the seed's ``pagedAttentionView.attend`` direct path, mlx-bun 0.5.0
``paged-attention.ts`` / @mlx-bun/inference ``kernels/attention/paged.ts``)::

    paged_attention(q, storage, block_table, length, *, scale, arm=None) -> [1, Hq, n, Dv]

* ``q`` [1, Hq, n, Dk], 1 <= n <= 8 (``DIRECT_MAX_QUERIES``; longer prefills
  belong to ``paged_attention_gather``), dtype float32 / float16 / bfloat16
  equal to ``storage.dtype``. Output in q's dtype.
* ``storage``: any ``PagedStorage`` (``impl.kv``'s ``BlockPool`` and its
  attention views, or plain arrays in a dataclass): ``keys`` [num_blocks, Hkv,
  block_size, Dk] and ``values`` [..., Dv] in ``dtype``, or, when
  ``quantization`` (affine, bits 4|8, ``group_size``) is set, uint32 planes
  [..., D*bits/32] with ``*_scales`` / ``*_biases`` [..., D/group_size] in ``dtype``.
* ``block_table``: 1-D ints (list, NumPy or mx.array); token t lives in slot
  ``t % block_size`` of physical block ``block_table[t // block_size]``.
* ``length``: live tokens, n <= length <= len(table) * block_size (and the pool's
  capacity). Bottom-right causal: query i sees tokens j <= length - n + i.
  Nothing at or past ``length`` is read: unused slots may hold anything, NaN included.
* GQA/MQA: query head h reads KV head h // (Hq / Hkv).
* Eligibility is validated before any launch; bad input raises ValueError /
  TypeError naming the argument.

Algorithm (every arm): the sequence is cut into 64-token partitions. Partial
pass: one SIMD group (32 lanes) per (query head, query row, partition) keeps a
float32 running max and sum (online softmax) and a float32 accumulator of
Dv/32 values per lane; scores are float32 dot products times ``scale``.
Quantized pools dequantize on load: ``InT(scale * code + bias)`` rounded to
the pool dtype, then widened. Merge pass: per output element, rescale each
partition by ``exp(max_p - max)`` and divide the summed values by the summed
normalizers, cast to q's dtype. An empty partition (rows of the last partition
beyond a query's causal limit) contributes max ``-inf``, sum 0: weight 0.

Arms: ``metal`` / ``cuda`` compile the seed's bodies below (verbatim; the
quantized partial is derived from the plain one by the seed's own two string
replacements). ``graph`` (``_graph``) is the same computation in MLX ops:
the same 64-token partitions and float32 state; scores summed as the kernel
sums them (32 lane-strided float32 sums, then across lanes: ``_lane_dot``);
dequantize-on-load rounded to the pool dtype; the same merge and casts. One
liberty: inside a partition it takes the max, ``exp(s - max)`` and the sums at
once instead of online, which changes only float32 rounding. It never uses a
float32 matmul: MLX's CUDA backend computes those with TF32 inputs (seen on
the H200: a one-token output, which is V itself, came back 9e-4 off).

Gates: ``parity/test_paged_attention.py`` (error ratio against the float64
oracle ``reference.attention.attention_ref`` with FlashAttention's factor 2 and
the naive low-precision baseline, a KL gate through a fixed LM head; quantized
pools against the oracle on the dequantized K/V and against
``paged_attention_gather``); ``properties/test_paged_attention_props.py``
(Hypothesis: head layouts, head dims, block sizes, lengths across block and
partition edges, permuted tables, NaN-poisoned unused slots, KV4/KV8). The
CUDA arm's record on an NVIDIA H200: ``reports/runs/2026-11-29-h200-cuda/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.checks import check_int, check_scale
from impl.kernels import KernelSpec, Launch

__all__ = [
    "DIRECT_MAX_QUERIES",
    "PAGED_DTYPES",
    "PART",
    "PagedStorage",
    "QUANTIZED_BITS",
    "merge_launch",
    "paged_attention",
    "paged_attention_gather",
    "partial_launch",
]

DIRECT_MAX_QUERIES = 8
PART = 64  # tokens per partition
SIMD = 32
PAGED_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
QUANTIZED_BITS = (4, 8)


@runtime_checkable
class PagedStorage(Protocol):
    """What paged attention reads (``impl.kv.BlockPool`` and its views have these attributes)."""

    keys: mx.array  # [num_blocks, Hkv, block_size, Dk] in dtype, or uint32 [..., Dk*bits/32]
    values: mx.array  # [num_blocks, Hkv, block_size, Dv] in dtype, or uint32 [..., Dv*bits/32]
    key_scales: mx.array | None  # [num_blocks, Hkv, block_size, Dk/group] in dtype, quantized only
    key_biases: mx.array | None
    value_scales: mx.array | None  # [..., Dv/group]
    value_biases: mx.array | None
    block_size: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype
    quantization: object | None  # None, or has .bits in {4, 8} and .group_size


# Each SIMD group reduces one query/head over a bounded sequence partition.
# Only partial output vectors and normalizers materialize, never gathered KV.
PARTIAL_SOURCE = """
  uint lane = thread_position_in_threadgroup.x;
  uint hq = threadgroup_position_in_grid.y % HQ;
  uint query = threadgroup_position_in_grid.y / HQ;
  uint part = threadgroup_position_in_grid.z;
  uint hk = hq / (HQ / HK);
  float accum[(DV + 31) / 32];
  for (uint j = 0; j < (DV + 31) / 32; ++j) accum[j] = 0;
  float maximum = -INFINITY, total = 0;
  uint length = uint(scale[1]);
  uint count = (length + PART - 1) / PART;
  uint end = min(uint(length - N + query + 1), (part + 1) * PART);
  for (uint token = part * PART; token < end; ++token) {
    uint physical = table[token / BS];
    uint keyBase = ((physical * HK + hk) * BS + token % BS) * DK;
    float score = 0;
    for (uint d = lane; d < DK; d += 32)
      score += float(q[(hq * N + query) * DK + d]) * float(keys[keyBase + d]);
    score = simd_sum(score) * scale[0];
    float next = max(maximum, score);
    float previous = exp(maximum - next), weight = exp(score - next);
    uint valueBase = ((physical * HK + hk) * BS + token % BS) * DV;
    for (uint j = 0; j < (DV + 31) / 32; ++j) {
      uint d = j * 32 + lane;
      if (d < DV) accum[j] = accum[j] * previous + weight * float(values[valueBase + d]);
    }
    total = total * previous + weight; maximum = next;
  }
  uint base = ((hq * N + query) * count + part);
  for (uint j = 0; j < (DV + 31) / 32; ++j) {
    uint d = j * 32 + lane;
    if (d < DV) out[base * DV + d] = accum[j];
  }
  if (lane == 0) { normal[base * 2] = maximum; normal[base * 2 + 1] = total; }
"""

# The seed derives the affine KV4/KV8 body from the plain one: dequantize on load.
QUANTIZED_PARTIAL_SOURCE = PARTIAL_SOURCE.replace(
    "float(keys[keyBase + d])",
    "float(InT(float(ks[(keyBase+d)/GROUP]) * float((keys[(keyBase+d)/PACK] >> (((keyBase+d)%PACK)*BITS)) "
    "& ((1u<<BITS)-1u)) + float(kb[(keyBase+d)/GROUP])))",
).replace(
    "float(values[valueBase + d])",
    "float(InT(float(vs[(valueBase+d)/GROUP]) * float((values[(valueBase+d)/PACK] >> (((valueBase+d)%PACK)*BITS)) "
    "& ((1u<<BITS)-1u)) + float(vb[(valueBase+d)/GROUP])))",
)

MERGE_SOURCE = """
  uint d = thread_position_in_grid.x;
  uint row = thread_position_in_grid.y;
  if (d >= DV) return;
  uint count = normal_shape[2];
  float maximum = -INFINITY;
  for (uint part = 0; part < count; ++part) maximum = max(maximum, normal[(row * count + part) * 2]);
  float sum = 0, value = 0;
  for (uint part = 0; part < count; ++part) {
    uint base = row * count + part;
    float weight = exp(normal[base * 2] - maximum);
    sum += normal[base * 2 + 1] * weight;
    value += parts[base * DV + d] * weight;
  }
  out[row * DV + d] = OutT(value / sum);
"""

PARTIAL = KernelSpec("paged_attention_partial", ("q", "keys", "values", "table", "scale"), ("out", "normal"),
                     PARTIAL_SOURCE)
QUANTIZED_PARTIAL = KernelSpec("paged_attention_affine_partial",
                               ("q", "keys", "values", "table", "scale", "ks", "kb", "vs", "vb"), ("out", "normal"),
                               QUANTIZED_PARTIAL_SOURCE)
MERGE = KernelSpec("paged_attention_merge", ("parts", "normal"), ("out",), MERGE_SOURCE)

assert QUANTIZED_PARTIAL_SOURCE.count("InT(") == 2, "the seed's replacements must both apply"


# --- validation -------------------------------------------------------------



def _table(block_table, num_blocks: int) -> mx.array:
    if isinstance(block_table, mx.array):
        if block_table.dtype not in (mx.int32, mx.int64, mx.uint32, mx.int16, mx.uint16, mx.uint8, mx.int8):
            raise ValueError(f"block_table must hold integers, got dtype {block_table.dtype}")
        host = np.array(block_table.astype(mx.int64))
    else:
        host = np.asarray(block_table)
        if host.size == 0:
            host = host.astype(np.int64)
        if not np.issubdtype(host.dtype, np.integer):
            raise ValueError(f"block_table must hold integers, got dtype {host.dtype}")
    if host.ndim != 1:
        raise ValueError(f"block_table must be 1-D, got shape {host.shape}")
    bad = (host < 0) | (host >= num_blocks)
    if bad.any():
        raise ValueError(f"block_table entry {int(host[bad][0])} is outside the pool's {num_blocks} blocks")
    return mx.array(host.astype(np.int32))


def _check_plane(name: str, array, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    if not isinstance(array, mx.array):
        raise TypeError(f"storage.{name} must be an mx.array, got {type(array).__name__}")
    if tuple(array.shape) != shape:
        raise ValueError(f"storage.{name} must have shape {list(shape)}, got {list(array.shape)}")
    if array.dtype != dtype:
        raise ValueError(f"storage.{name} must have dtype {dtype}, got {array.dtype}")
    return array


def _validate(q, storage, block_table, length, scale, *, direct: bool):
    """Checks everything a launch depends on; returns (table int32, scale float, planes)."""
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError(f"q must have shape [1, Hq, n, Dk], got {list(q.shape)}")
    _, hq, n, dk = q.shape
    if direct and n > DIRECT_MAX_QUERIES:
        raise ValueError(f"q has n={n} query rows; the direct kernel takes at most {DIRECT_MAX_QUERIES}: "
                         "use paged_attention_gather (the gather + SDPA control) for longer prefills")
    if n < 1:
        raise ValueError("q must have at least one query row")
    scale = check_scale(scale)
    dtype = storage.dtype
    if dtype not in PAGED_DTYPES:
        raise ValueError(f"storage.dtype must be one of {PAGED_DTYPES}, got {dtype}")
    if q.dtype != dtype:
        raise ValueError(f"q has dtype {q.dtype} but the pool's dtype (storage.dtype) is {dtype}")
    block_size = check_int("storage.block_size", storage.block_size, minimum=1)
    head_dim = check_int("storage.head_dim", storage.head_dim, minimum=1)
    v_head_dim = check_int("storage.v_head_dim", storage.v_head_dim, minimum=1)
    if dk != head_dim:
        raise ValueError(f"q has Dk={dk} but storage.head_dim is {head_dim}")
    keys, values = storage.keys, storage.values
    if not isinstance(keys, mx.array) or keys.ndim != 4:
        raise ValueError("storage.keys must be an mx.array [num_blocks, Hkv, block_size, width]")
    num_blocks, hkv = keys.shape[0], keys.shape[1]
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q has Hq={hq} heads, not a multiple of the pool's Hkv={hkv}")
    quant = storage.quantization
    if quant is None:
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim), dtype)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim), dtype)
        planes = ()
    else:
        bits = getattr(quant, "bits", None)
        group = getattr(quant, "group_size", None)
        if bits not in QUANTIZED_BITS:
            raise ValueError(f"storage.quantization.bits must be one of {QUANTIZED_BITS}, got {bits!r}")
        check_int("storage.quantization.group_size", group, minimum=1)
        for name, dim in (("head_dim", head_dim), ("v_head_dim", v_head_dim)):
            if dim % group:
                raise ValueError(f"storage.quantization.group_size={group} does not divide storage.{name}={dim}")
        pack = 32 // bits
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim // pack), mx.uint32)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim // pack), mx.uint32)
        planes = tuple(
            _check_plane(name, getattr(storage, name), (num_blocks, hkv, block_size, dim // group), dtype)
            for name, dim in (("key_scales", head_dim), ("key_biases", head_dim),
                              ("value_scales", v_head_dim), ("value_biases", v_head_dim)))
    length = check_int("length", length, minimum=1)
    table = _table(block_table, num_blocks)
    if length < n:
        raise ValueError(f"length={length} is shorter than the n={n} query rows it must contain")
    if length > num_blocks * block_size:
        raise ValueError(f"length={length} exceeds the pool's capacity {num_blocks} blocks x {block_size}")
    needed = -(-length // block_size)
    if table.size < needed:
        raise ValueError(f"block_table has {table.size} blocks but length={length} needs {needed} "
                         f"of block_size {block_size}")
    if direct and length >= 2**24:  # the kernels read length from a float32
        raise ValueError(f"length={length} must be below 2**24 for the direct kernel")
    return table[:needed], float(scale), planes


# --- the direct kernel -----------------------------------------------------


def partial_launch(q: mx.array, storage: PagedStorage, table: mx.array, length: int, scale: float,
                   planes: Sequence[mx.array] = ()) -> Launch:
    """The partial pass's call (inputs, template, grid) exactly as the seed issues it."""
    _, hq, n, _ = q.shape
    hk, dv, parts = storage.keys.shape[1], storage.v_head_dim, -(-length // PART)
    multiplier = mx.array([scale, length], dtype=mx.float32)
    template = [("HQ", hq), ("HK", hk), ("N", n), ("DK", storage.head_dim), ("DV", dv),
                ("BS", storage.block_size), ("PART", PART)]
    spec = PARTIAL
    if storage.quantization is not None:
        bits, group = storage.quantization.bits, storage.quantization.group_size
        template += [("BITS", bits), ("GROUP", group), ("PACK", 32 // bits), ("InT", storage.dtype)]
        spec = QUANTIZED_PARTIAL
    return Launch(spec, (q, storage.keys, storage.values, table, multiplier, *planes), tuple(template),
                  grid=(SIMD, hq * n, parts), threadgroup=(SIMD, 1, 1),
                  output_shapes=((hq, n, parts, dv), (hq, n, parts, 2)), output_dtypes=(mx.float32, mx.float32))


def merge_launch(parts: mx.array, normal: mx.array, out_dtype: mx.Dtype) -> Launch:
    hq, n, _, dv = parts.shape
    return Launch(MERGE, (parts, normal), (("OutT", out_dtype), ("DV", dv)),
                  grid=(-(-dv // SIMD) * SIMD, hq * n, 1), threadgroup=(SIMD, 1, 1),
                  output_shapes=((1, hq, n, dv),), output_dtypes=(out_dtype,))


def paged_attention(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                    arm: str | None = None) -> mx.array:
    """Causal attention of q's n <= 8 rows over the first ``length`` paged tokens (module docstring)."""
    table, scale, planes = _validate(q, storage, block_table, length, scale, direct=True)
    arm = resolve_arm(arm)
    if arm == "graph":
        return _graph(q, storage, table, length, scale)
    parts, normal = partial_launch(q, storage, table, length, scale, planes).run(arm)
    (out,) = merge_launch(parts, normal, q.dtype).run(arm)
    return out


# --- the graph arm ---------------------------------------------------------


def _load(storage: PagedStorage, which: str, physical: mx.array, slot: mx.array) -> mx.array:
    """Token rows [T, Hkv, D] in float32, as the kernel reads them (dequantized and rounded to InT)."""
    plane = storage.keys if which == "keys" else storage.values
    rows = plane[physical, :, slot]  # [T, Hkv, width]
    if storage.quantization is None:
        return rows.astype(mx.float32)
    bits, group = storage.quantization.bits, storage.quantization.group_size
    prefix = "key" if which == "keys" else "value"
    scales = getattr(storage, f"{prefix}_scales")[physical, :, slot].astype(mx.float32)
    biases = getattr(storage, f"{prefix}_biases")[physical, :, slot].astype(mx.float32)
    pack = 32 // bits
    shifts = mx.arange(pack, dtype=mx.uint32) * bits
    codes = (rows[..., None] >> shifts) & ((1 << bits) - 1)  # element i of a word at bits i*BITS
    codes = codes.reshape(*rows.shape[:-1], -1).astype(mx.float32)
    scales, biases = mx.repeat(scales, group, axis=-1), mx.repeat(biases, group, axis=-1)
    return (scales * codes + biases).astype(storage.dtype).astype(mx.float32)  # float(InT(s*q + b))


def _lane_dot(q: mx.array, k: mx.array) -> mx.array:
    """q [H, R, D] . k [H, T, D] -> [H, R, T] summed as the kernel sums: each of 32 lanes adds
    dims lane, lane+32, ... in order (float32), then the 32 lane sums are added (``simd_sum``).

    A plain float32 matmul would do for the algebra, but not for the precision:
    MLX's CPU GEMV was measured less accurate than the kernel's order (one
    D=256 case: 5.2 float32 ULP of max|s|, against 3.2 for this order and 1.5
    for NumPy/OpenBLAS), enough to fail float32 error-ratio gates the kernel
    passes, and MLX's CUDA float32 matmul rounds its inputs to TF32.
    """
    pad = -q.shape[-1] % SIMD  # zero dims contribute exact zeros
    if pad:
        q = mx.pad(q, [(0, 0), (0, 0), (0, pad)])
        k = mx.pad(k, [(0, 0), (0, 0), (0, pad)])
    lanes = None  # [H, R, T, 32]: lane l's running sum over dims l, l+32, ...
    for start in range(0, q.shape[-1], SIMD):
        step = q[:, :, None, start:start + SIMD] * k[:, None, :, start:start + SIMD]
        lanes = step if lanes is None else lanes + step
    return lanes.sum(axis=-1)


def _graph(q: mx.array, storage: PagedStorage, table: mx.array, length: int, scale: float) -> mx.array:
    """The kernels' partial + merge in MLX ops (the module docstring says where it differs)."""
    _, hq, n, dk = q.shape
    hk, bs = storage.keys.shape[1], storage.block_size
    group, parts = hq // hk, -(-length // PART)
    tokens = mx.arange(parts * PART)
    # Pad positions re-read the last live token (never a slot past length) and are masked below.
    live = mx.minimum(tokens, length - 1)
    physical, slot = table[live // bs], live % bs
    k = _load(storage, "keys", physical, slot).transpose(1, 0, 2)  # [Hkv, T, Dk]
    v = _load(storage, "values", physical, slot).transpose(1, 0, 2)  # [Hkv, T, Dv]
    dv = v.shape[-1]

    qf = q.astype(mx.float32).reshape(hk, group * n, dk)  # head h = kv * group + r
    scores = _lane_dot(qf, k) * mx.array(scale, dtype=mx.float32)  # [Hkv, group*n, T]
    query = mx.arange(n).reshape(1, n, 1)
    visible = tokens.reshape(1, 1, -1) <= (length - n + query)  # bottom-right causal, [1, n, T]
    scores = mx.where(visible, scores.reshape(hk, group, n, -1), -mx.inf)
    scores = scores.reshape(hk, group * n, parts, PART)

    # Partial: per partition max, normalizer and unnormalized values (float32).
    maximum = scores.max(axis=-1)  # [Hkv, group*n, parts]; -inf for an empty partition
    shift = mx.where(maximum == -mx.inf, 0.0, maximum)
    weights = mx.exp(scores - shift[..., None])  # masked: exp(-inf) = 0
    total = weights.sum(axis=-1)
    # Elementwise products summed over the partition's 64 tokens, not a matmul: MLX's
    # CUDA backend computes float32 matmuls with TF32 inputs (10-bit mantissas).
    accum = (weights[..., None] * v.reshape(hk, 1, parts, PART, dv)).sum(axis=-2)  # [Hkv, group*n, parts, Dv]

    # Merge: rescale partitions to the global max.
    overall = maximum.max(axis=-1, keepdims=True)
    rescale = mx.exp(maximum - overall)  # empty partitions: 0
    value = (accum * rescale[..., None]).sum(axis=-2)
    normalizer = (total * rescale).sum(axis=-1)
    out = (value / normalizer[..., None]).astype(q.dtype)
    return out.reshape(1, hq, n, dv)


# --- the gather + SDPA control ---------------------------------------------


def _gather(plane: mx.array, table: mx.array, length: int) -> mx.array:
    """Blocks of ``plane`` in table order as one [1, Hkv, length, width] sequence."""
    picked = mx.take(plane, table, axis=0)  # [blocks, Hkv, bs, width]
    hkv, width = plane.shape[1], plane.shape[3]
    return picked.transpose(1, 0, 2, 3).reshape(1, hkv, -1, width)[:, :, :length]


def paged_attention_gather(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                           mask=None) -> mx.array:
    """The seed's numerical control: gather the live blocks, (dequantize,) then MLX's fused SDPA.

    Any n; ``mask`` is passed to ``mx.fast.scaled_dot_product_attention``
    (None, ``"causal"`` for bottom-right causal, or an array). Quantized pools
    go through ``mx.dequantize`` (affine), whose output dtype is the scales'.
    """
    table, scale, _ = _validate(q, storage, block_table, length, scale, direct=False)
    k, v = _gather(storage.keys, table, length), _gather(storage.values, table, length)
    quant = storage.quantization
    if quant is not None:
        planes = [_gather(getattr(storage, name), table, length)
                  for name in ("key_scales", "key_biases", "value_scales", "value_biases")]
        k = mx.dequantize(k, planes[0], planes[1], group_size=quant.group_size, bits=quant.bits)
        v = mx.dequantize(v, planes[2], planes[3], group_size=quant.group_size, bits=quant.bits)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
