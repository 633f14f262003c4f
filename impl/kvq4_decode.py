"""One-row decode attention over a 4-bit, group-64 affine KV cache, head dim 256.

Contract (the seed's ``kvq4DecodeSdpa``, @mlx-bun/inference 1.0.0
``kernels/attention/kvq4-decode.ts``)::

    kvq4_decode(q, keys, values, *, scale, block=None, body=None, arm=None) -> [1, H, 1, 256]

* ``q`` [1, H, 1, 256]: one query row (B = 1, L = 1), float32 / float16 /
  bfloat16 (T). Output in T.
* ``keys`` / ``values``: ``QuantizedKV(packed, scales, biases)`` or a plain
  ``(packed, scales, biases)`` tuple, the layout of ``mx.quantize(x,
  group_size=64, bits=4)`` for x [1, KVH, N, 256]: ``packed`` uint32 [1, KVH,
  N, 32] (dim d is the 4-bit code at bits ``4 * (d % 8)`` of word ``d // 8``),
  ``scales`` / ``biases`` [1, KVH, N, 4] in T. Any of the six planes may be a
  strided view (a slice of a larger cache along heads or tokens, a transpose):
  the kernel reads each plane through its own ``*_strides``, never copying.
  N >= 1 is a runtime argument (read from ``kp_shape``): one compiled kernel
  serves every cache length. At KVH = N = 1 the scale and bias planes hold 4
  elements: MLX passes an input of fewer than 8 elements to a Metal kernel in
  the ``constant`` address space instead of ``device``
  (``max_constant_array_size``; so are the direct body's geometry and one-entry
  block table), and both bodies read every plane element by element, so such
  a call compiles and computes as any other (``parity/test_small_inputs.py``).
  q and the packed planes (head dim 256) never get that small.
* GQA: H = KVH * REP with an even REP (the threadgroup splits its query heads
  into 2 head groups); query head h reads KV head ``h // REP``.
* ``scale``: finite real; ``q * scale`` is formed in T (MLX's op) before the
  kernel, as the seed does.
* ``block``: tokens per threadgroup, any int >= 1 (a larger block than can change the numbers is clamped: to N
  for ``direct``, one partition; to SUB * N for ``seed``, every token in the first sub-chunk), or None: the body picks it
  (``direct``: ``impl.paged_attention.partition_size`` for an affine pool, from N
  and the heads, at least 512 tokens; ``seed``: the seed's 512, measured on an M4
  Pro). It partitions the softmax, so it is part of the numbers.
* ``body``: which kernel body the compiled and graph arms run, ``"direct"`` or
  ``"seed"`` (``BODIES``; below), or None: ``default_body`` picks ``direct``
  except for N >= 2**24, which ``direct`` refuses (it reads N from a float32).
* ``kvq4_decode_eligible(q, keys, group_size, bits)`` says whether the seed's
  conditions hold (B = L = 1, D = 256, bits 4, group 64, an even GQA factor).
  ``kvq4_decode`` refuses anything else with a ValueError / TypeError naming
  the argument, before any launch (on a compiled arm once per argument signature
  when the planes are ``QuantizedKV``s: ``impl.recent_calls``). The compiled arms also need the combine
  buffers (``4 * (SUB * REP * 256 + 2 * SUB * REP)`` bytes of threadgroup
  memory) to fit the device: Metal's 32 KiB allows REP <= 6, CUDA's 48 KiB of
  static shared memory REP <= 10; the graph arm has no such bound. That bound is
  the seed body's: the direct body combines at most 4 query rows per threadgroup.

Bodies. ``direct``: the direct attention body of ``impl.paged_attention`` (its docstring
has the algorithm: partitions of ``block`` tokens, one threadgroup per KV head x partition
x chunk of up to 4 query rows, 8-token batches per SIMD group, a float32 online softmax per
batch, the SIMD groups combined in threadgroup memory, then its merge kernel), in its
``KVQ4`` layout: no block table, each plane read through its own strides
(``STRIDED_PARTIAL``: views are never copied), a lane owns one packed word (8 dims of
one group), dequantized in float32 as ``fma(scale, code, bias)`` and not rounded to T,
and ``q * scale`` rounded to T in the kernel (the seed forms it in T with MLX's op, which
rounds the scalar to T first: ``_in_dtype``). The graph arm is paged attention's
(``graph_attention`` with the same layout). Why: on the H200 the paged affine body moved the
same 4-bit bytes 1.4x faster than the seed body, which ncu found instruction-bound at 6% of
DRAM bandwidth (``perf/RESULTS.md``); it also has no GQA bound and keeps one body for
paged and contiguous caches.

``seed`` (the seed's kernel: the port of record, and the default for N >= 2**24: ``default_body``).
Algorithm (every arm): a threadgroup is one KV head x one block of ``block`` tokens: 8 SIMD groups
= SUB = 4 token sub-chunks of ceil(block / 4) tokens x
2 head groups of REP / 2 query heads. Each lane owns 8 of the 256 dims (one
packed word) and dequantizes on load in float32, ``fma(scale, code, bias)``
(never rounded to T). A score is each lane's 8-term fma chain over its dims,
summed over the SIMD group (q carries the scale); a float32 online softmax
runs over the sub-chunk's tokens. The 4 sub-chunks combine in threadgroup memory
(rescaled to their max; a sub-chunk with no token has max -inf and is
skipped), then a merge kernel combines the blocks the same way and divides,
casting to T. That merge is multi-query's (``impl.multi_query.merge_launch`` with one query row: the same
partial layout; the seed's own merge was a copy of it, one thread per output element over every block, which
left the GPU nearly idle: ``impl.multi_query``'s docstring has the H200 profile).

Arms (seed body): ``metal`` / ``cuda`` compile the partial body below and the shared merge, the seed's with two
port fixes that keep its Metal semantics: the last-axis stride of every plane
is read (the seed assumed 1), and biases are read through their own strides
(the seed used the scales' strides for both). ``graph`` is the same
computation in MLX ops: same blocks, sub-chunks, float32 online softmax
(one token position of every sub-chunk per step), combine and merge. Its
liberties only change float32 rounding: ``scale * code + bias`` is two ops
(exactly the fma for float16/bfloat16 scales, whose product with a 4-bit code
is exact in float32), ``o * factor + e * v`` likewise, and the score's
8-term and 32-lane sums are MLX's sums (of elementwise float32 products: a
float32 matmul would run in TF32 on MLX's CUDA backend, see
``parity/test_kvq4_decode.py::test_float32_matmul_precision``).

Gates (both bodies, every test parametrized by ``body``): ``parity/test_kvq4_decode.py`` (error ratio against the float64 oracle
``reference.attention.attention_ref`` on the K/V as the kernel dequantizes
them, with the naive computation in T on ``mx.dequantize``-rounded K/V as
baseline; KL through a fixed LM head against ``mx.dequantize`` +
``mx.fast.scaled_dot_product_attention``; at scale 0.1, NMSE against the oracle on MLX's T
``q * scale``, which a body that skips that rounding misses by ~100x); ``properties/test_kvq4_decode_props.py``
(Hypothesis: GQA 2..8, N across block and sub-chunk edges, blocks 64..512,
strided and transposed planes, bad input).

The compiled arms run (scale,) partial and merge as one ``mx.compile``d call per (arm, scale,
block, input shapes) (``_compiled_direct``, ``_compiled_pair``): built call by call, the two custom-kernel primitives
cost more host time than the kernels at N = 32k on the H200. N is in the planes' shapes, so a
trace serves one decode step's layers and only the most recent ``TRACES_KEPT`` are kept
(``impl.kernels.compile`` says why: one function traced for every N leaks). The seed body's block on the H200
(ms per call): 256 beats the seed's 512 at 32/8/N32k (0.264 / 0.280) and 8/1/N32k (0.099 / 0.104) and loses at
16/8/N128k (0.569 / 0.532), so the seed's 512 stays. A seed body batching 8 tokens per SIMD group (the 8 tokens'
loads in flight together, 9 shuffles for 8 scores, a merge over 16 SIMD groups, a block chosen from N, KVH and the
compute units) passed every gate but was slower than this kernel at block 512: 16/8/D256/N128k 0.686 / 0.594 ms,
8/1/D256/N32k 0.132 / 0.110; only 32/8/D256/N32k gained (0.300 / 0.315). It is in git history at 013596e; a retry
should start from a profile of both kernels at N128k.

One KV head (8/1/D256/N32k) is 1.4x dequantize + SDPA, short of the 3x target, and out of reach for a partial +
merge call (``perf/RESULTS.md``, bound 3): this call with both kernel bodies emptied (same inputs, grids and
outputs) costs the H200's host 35-39 us per call eval8 and 36-41 us pipelined8, so it is below 3x the control in
pipelined8, eval1 and pipelined1 even with kernels that do nothing, and in eval8 leaves 2.3-5.7 us for the GPU's
work, about one read of the 9.44 MB of K / V at copy bandwidth. ncu on the direct partial there: 60 us alone, 128
threadgroups (64 partitions x 2 row chunks, each dequantizing the same K / V), 219 registers, 3% of DRAM bandwidth:
latency-bound. Partitions 128 / 256 / 1024, 8 SIMD groups, 4 tokens per step and 8 rows per threadgroup all measured
within ~10% of the default (itself 4-8 us apart through two call paths in one process); a tensor-core body
(multi-query's partial on the bfloat16 cache) is 1.75x / 1.90x the control in eval8 / pipelined8.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from impl import multi_query
from impl import paged_attention as direct
from impl.arms import ARMS, resolve_arm
from impl.checks import check_choice, check_int, check_scale
from impl.kernels import TRACES_KEPT, KernelSpec, Launch, input_signature, kernel_text
from impl.kv.quantization import Quantization
from impl.recent_calls import RecentCalls, array_key, scalar_key

__all__ = [
    "BITS",
    "BODIES",
    "DTYPES",
    "GROUP_SIZE",
    "HEAD_DIM",
    "KV4_DECODE_BLOCK",
    "SUB",
    "THREADGROUP_MEMORY",
    "QuantizedKV",
    "default_body",
    "kvq4_decode",
    "kvq4_decode_eligible",
    "max_gqa_factor",
    "merge_launch",
    "partial_launch",
    "threadgroup_bytes",
]

HEAD_DIM = 256
BITS = 4
GROUP_SIZE = 64
WORDS = HEAD_DIM * BITS // 32  # packed uint32 words per row: one per lane
GROUPS = HEAD_DIM // GROUP_SIZE
SUB = 4  # token sub-chunks per threadgroup
KV4_DECODE_BLOCK = 512  # tokens per threadgroup, the seed's measured default (the seed body's)
BODIES = ("direct", "seed")  # which kernel body runs the arms (module docstring)
SIMD = 32
DTYPES = (mx.bfloat16, mx.float16, mx.float32)
# Threadgroup memory a compiled arm may declare (bytes): Apple GPUs' limit, CUDA's static __shared__ limit.
THREADGROUP_MEMORY = {"metal": 32 * 1024, "cuda": 48 * 1024}


class QuantizedKV(NamedTuple):
    """One quantized K or V plane set, as ``mx.quantize`` returns it (plus its parameters)."""

    packed: mx.array  # uint32 [1, KVH, N, 32]
    scales: mx.array  # T [1, KVH, N, 4]
    biases: mx.array  # T [1, KVH, N, 4]
    group_size: int = GROUP_SIZE
    bits: int = BITS


# The seed body's partial pass (``kvq4_decode.metal``); its blocks are merged by multi-query's merge.
PARTIAL_SOURCE = kernel_text(__file__, "kvq4_decode.metal")

PARTIAL = KernelSpec("kvq4_decode_partial", ("q", "kp", "ks", "kb", "vp", "vs", "vb"), ("part",),
                     PARTIAL_SOURCE, ensure_row_contiguous=False)


def threadgroup_bytes(rep: int) -> int:
    """Threadgroup memory of the partial kernel for GQA factor ``rep``: osh, msh and lsh (float32)."""
    rep = check_int("rep", rep, minimum=1)
    return 4 * (SUB * rep * HEAD_DIM + 2 * SUB * rep)


def max_gqa_factor(arm: str) -> int | None:
    """The largest even GQA factor whose combine buffers fit ``arm``'s threadgroup memory (None: no bound)."""
    limit = THREADGROUP_MEMORY.get(check_choice("arm", arm, ARMS))
    if limit is None:
        return None
    rep = 2
    while threadgroup_bytes(rep + 2) <= limit:
        rep += 2
    return rep


# --- validation -------------------------------------------------------------


def _planes(name: str, planes) -> QuantizedKV:
    if isinstance(planes, QuantizedKV):
        return planes
    if isinstance(planes, (tuple, list)) and len(planes) == 3:
        return QuantizedKV(*planes)
    raise TypeError(f"{name} must be a QuantizedKV or a (packed, scales, biases) tuple, got {type(planes).__name__}")


def kvq4_decode_eligible(q, keys, group_size: int, bits: int) -> bool:
    """The seed's ``kvq4DecodeEligible``: one query row, head dim 256, a 4-bit group-64 cache, an even GQA factor."""
    try:
        packed = _planes("keys", keys).packed
    except TypeError:
        return False
    if not isinstance(q, mx.array) or q.ndim != 4 or not isinstance(packed, mx.array) or packed.ndim != 4:
        return False
    b, h, L, d = q.shape
    kvh = packed.shape[1]
    # (bits and group_size compared only as ints: an array's == is elementwise, and True would pass for 1)
    return (b == 1 and L == 1 and d == HEAD_DIM and _is_int(bits) and bits == BITS and _is_int(group_size)
            and group_size == GROUP_SIZE and kvh > 0 and h > 0 and h % kvh == 0 and (h // kvh) % 2 == 0)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_planes(name: str, planes: QuantizedKV, dtype: mx.Dtype) -> tuple[int, int]:
    """(KVH, N) of a valid plane set, else ValueError / TypeError naming ``name``."""
    if not _is_int(planes.bits) or planes.bits != BITS:
        raise ValueError(f"{name}.bits must be {BITS} (the kernel unpacks 4-bit codes), got {planes.bits!r}")
    if not _is_int(planes.group_size) or planes.group_size != GROUP_SIZE:
        raise ValueError(f"{name}.group_size must be {GROUP_SIZE}, got {planes.group_size!r}")
    for field in ("packed", "scales", "biases"):
        if not isinstance(getattr(planes, field), mx.array):
            raise TypeError(f"{name}.{field} must be an mx.array, got {type(getattr(planes, field)).__name__}")
    packed, scales, biases = planes.packed, planes.scales, planes.biases
    if packed.dtype != mx.uint32:
        raise ValueError(f"{name}.packed must be uint32, got {packed.dtype}")
    if packed.ndim != 4 or packed.shape[0] != 1 or packed.shape[3] != WORDS:
        raise ValueError(f"{name}.packed must have shape [1, KVH, N, {WORDS}] (head dim {HEAD_DIM} at {BITS} bits), "
                         f"got {list(packed.shape)}")
    _, kvh, n, _ = packed.shape
    if kvh < 1:
        raise ValueError(f"{name}.packed holds no KV head (KVH = 0)")
    for field, plane in (("scales", scales), ("biases", biases)):
        if tuple(plane.shape) != (1, kvh, n, GROUPS):
            raise ValueError(f"{name}.{field} must have shape [1, {kvh}, {n}, {GROUPS}] (groups of {GROUP_SIZE}), "
                             f"got {list(plane.shape)}")
        if plane.dtype != dtype:
            raise ValueError(f"{name}.{field} has dtype {plane.dtype} but q has {dtype}")
    if n < 1:
        raise ValueError(f"{name} holds no cached position (N = 0)")
    return kvh, n



def _validate(q, keys, values, scale, block, body) -> tuple[QuantizedKV, QuantizedKV, float, int | None]:
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1 or q.shape[2] != 1:
        raise ValueError(f"q must have shape [1, H, 1, {HEAD_DIM}] (one query row), got {list(q.shape)}")
    if q.shape[3] != HEAD_DIM:
        raise ValueError(f"q has head dim D={q.shape[3]}; the kernel is written for D={HEAD_DIM}")
    if q.dtype not in DTYPES:
        raise ValueError(f"q must be one of {DTYPES}, got {q.dtype}")
    keys, values = _planes("keys", keys), _planes("values", values)
    kvh, n = _check_planes("keys", keys, q.dtype)
    if _check_planes("values", values, q.dtype) != (kvh, n):
        raise ValueError(f"values have [KVH, N] = {list(values.packed.shape[1:3])} but keys have {[kvh, n]}")
    h = q.shape[1]
    if h < 1:
        raise ValueError(f"q has H={h} heads: it needs at least one")
    if h % kvh:
        raise ValueError(f"q has H={h} heads, not a multiple of the cache's KVH={kvh}")
    if (h // kvh) % 2:
        raise ValueError(f"q has H={h} heads over KVH={kvh}: the GQA factor {h // kvh} must be even "
                         "(the kernel splits a KV head's queries into 2 head groups)")
    if body is not None and (not isinstance(body, str) or body not in BODIES):
        raise ValueError(f"body must be None or one of {BODIES}, got {body!r}")
    scale = check_scale(scale)
    if not math.isfinite(_in_dtype(scale, q.dtype)):  # q * scale is formed in T: an infinite scale makes NaN
        raise ValueError(f"scale={scale!r} is not finite in q's dtype {q.dtype} (q * scale is formed in it)")
    return keys, values, scale, None if block is None else check_int("block", block, minimum=1)


def _check_fits(arm: str, rep: int) -> None:
    limit = THREADGROUP_MEMORY.get(arm)
    if limit is not None and threadgroup_bytes(rep) > limit:
        raise ValueError(f"q's GQA factor {rep} needs {threadgroup_bytes(rep)} bytes of threadgroup memory; "
                         f"the {arm} arm has {limit} (GQA <= {max_gqa_factor(arm)}): use arm='graph'")


# --- the kernels -------------------------------------------------------------


def partial_launch(qs: mx.array, keys: QuantizedKV, values: QuantizedKV, block: int) -> Launch:
    """The partial pass exactly as the seed issues it (``qs``: the pre-scaled, contiguous query)."""
    h = qs.shape[1]
    kvh, n = keys.packed.shape[1], keys.packed.shape[2]
    rep, blocks = h // kvh, -(-n // block)
    return Launch(PARTIAL, (qs, keys.packed, keys.scales, keys.biases, values.packed, values.scales, values.biases),
                  (("T", qs.dtype), ("D", HEAD_DIM), ("KVH", kvh), ("REP", rep), ("BLOCK", block), ("SUB", SUB)),
                  grid=(SIMD * 2 * SUB * blocks, kvh, 1), threadgroup=(SIMD * 2 * SUB, 1, 1),
                  output_shapes=(multi_query.parts_shape(blocks, kvh, rep, HEAD_DIM),), output_dtypes=(mx.float32,))


def merge_launch(part: mx.array, dtype: mx.Dtype, kvh: int, rep: int) -> Launch:
    """The seed body's merge of its blocks: multi-query's merge (``impl.multi_query.merge_launch``) with one query
    row, whose partial has the same layout (``impl.multi_query.pack_parts``, with blocks for splits and REP for NQ;
    the seed's merge was that body's copy)."""
    return multi_query.merge_launch(part, dtype, kvh * rep, 1, kvh, HEAD_DIM)


def default_body(length: int) -> str:
    """The body a call without ``body`` runs over a cache of ``length`` tokens: ``direct``, except for caches of
    ``direct.DIRECT_MAX_LENGTH`` tokens or more (the direct body reads the length from a float32).

    One KV head runs ``direct`` too: with partitions of at least 512 tokens
    (``impl.paged_attention.QUANTIZED_MIN_PARTITION``) it beats the seed body at 8/1/D256/N32k in every protocol
    (H200, us per call, each call of a round on its own cache: eval8 93.7 against 104.9, pipelined8 56.2 / 65.5, one
    call per round 161.1 / 256.8 and 68.9 / 139.1; with 64-token partitions, 512 of them and a 25 us merge, it lost:
    0.123-0.133 ms against 0.086), as it does at 8 KV heads (16/8/N128k 0.427 against 0.560, 32/8/N32k 0.214 against
    0.276)."""
    return "seed" if check_int("length", length, minimum=0) >= direct.DIRECT_MAX_LENGTH else "direct"


def kvq4_decode(q: mx.array, keys, values, *, scale: float, block: int | None = None, body: str | None = None,
                arm: str | None = None) -> mx.array:
    """softmax(scale * q . K^T) V for one query row over a 4-bit group-64 cache (module docstring).

    ``block``: tokens per threadgroup (a softmax partition: part of the numbers); None picks it
    (``direct``: from N and the heads, as paged attention does for an affine pool, at least
    ``impl.paged_attention.QUANTIZED_MIN_PARTITION`` tokens; ``seed``: ``KV4_DECODE_BLOCK``).
    ``body``: ``"direct"`` (the direct attention body of ``impl.paged_attention`` over this cache),
    ``"seed"`` (the seed's kernel) or None (``default_body``).
    """
    # A compiled arm's call whose arguments were validated before goes straight to its compiled call
    # (impl.recent_calls: the checks cost the H200's host about a tenth of the call).
    key, call = _RECENT.lookup(lambda: (resolve_arm(arm), array_key(q), _planes_key(keys), _planes_key(values),
                                        scalar_key(scale), scalar_key(block), scalar_key(body)))
    if call is None:
        keys, values, scale, block = _validate(q, keys, values, scale, block, body)
        arm = resolve_arm(arm)
        kvh, n = keys.packed.shape[1], keys.packed.shape[2]
        body = default_body(n) if body is None else body
        if body == "direct" and n >= direct.DIRECT_MAX_LENGTH:
            raise ValueError(f"keys hold N={n} positions; body='direct' reads N from a float32 and takes "
                             f"fewer than 2**24 (body='seed' or None takes any N)")
        if body == "seed":
            # A block of SUB * N tokens or more puts every token in its first sub-chunk (sub >= N): the same
            # numbers as any larger block, so it is clamped there (the graph arm's arrays never grow with it).
            block = min(KV4_DECODE_BLOCK if block is None else block, SUB * n)
            _check_fits(arm, q.shape[1] // kvh)
        if arm == "graph":
            return _graph_call(q, keys, values, scale, block, body)
        signature = input_signature((q, *keys[:3], *values[:3]))
        call = (_compiled_direct(arm, _in_dtype(scale, q.dtype), block, signature) if body == "direct"
                else _compiled_pair(arm, scale, block, signature))
        _RECENT.remember(key, call)
    return call(q, *keys[:3], *values[:3])


def _planes_key(planes) -> tuple:
    """What the checks read of a ``QuantizedKV`` (a plain tuple of planes is not keyed: it takes the checks)."""
    if type(planes) is not QuantizedKV:
        raise TypeError("only a QuantizedKV is keyed")
    return (array_key(planes.packed), array_key(planes.scales), array_key(planes.biases),
            scalar_key(planes.group_size), scalar_key(planes.bits))


def _graph_call(q: mx.array, keys: QuantizedKV, values: QuantizedKV, scale: float, block: int | None,
                body: str) -> mx.array:
    """The graph arm of the chosen body (validated arguments)."""
    if body == "seed":
        return _graph(_scaled(q, scale), keys, values, block)
    cache, n = _cache(keys, values), keys.packed.shape[2]
    span = direct.partition_span(q, cache, n, block)
    return direct.graph_attention(q, cache, direct.single_block_table(), n, _in_dtype(scale, q.dtype), span,
                                  direct.KVQ4)


_RECENT = RecentCalls(TRACES_KEPT)  # validated (arm, arguments) -> compiled call


def _scaled(q: mx.array, scale: float) -> mx.array:
    return mx.contiguous(q * scale)  # softmax scale folded into q, in T (the seed's mulScalar)


@lru_cache(maxsize=TRACES_KEPT)
def _compiled_pair(arm: str, scale: float, block: int, signature: tuple):
    """Scale, partial and merge as one ``mx.compile``d function for the inputs' ``signature``
    (``input_signature``; ``impl.kernels.compile.TRACES_KEPT`` says why one per signature, so few)."""

    def pair(q, *planes):
        keys, values = QuantizedKV(*planes[:3]), QuantizedKV(*planes[3:])
        (part,) = partial_launch(_scaled(q, scale), keys, values, block).run(arm)
        (out,) = merge_launch(part, q.dtype, keys.packed.shape[1], q.shape[1] // keys.packed.shape[1]).run(arm)
        return out

    return mx.compile(pair)


# --- the direct body ------------------------------------------------------------


class _Cache(NamedTuple):
    """kvq4's planes as the direct body's storage: per KV head one "block" of all N tokens."""

    keys: mx.array
    values: mx.array
    key_scales: mx.array
    key_biases: mx.array
    value_scales: mx.array
    value_biases: mx.array
    block_size: int
    head_dim: int = HEAD_DIM
    v_head_dim: int = HEAD_DIM
    dtype: mx.Dtype = mx.bfloat16
    quantization: Quantization = Quantization(bits=BITS, group_size=GROUP_SIZE)


def _cache(keys: QuantizedKV, values: QuantizedKV) -> _Cache:
    return _Cache(keys.packed, values.packed, keys.scales, keys.biases, values.scales, values.biases,
                  block_size=keys.packed.shape[2], dtype=keys.scales.dtype)


@lru_cache(maxsize=64)
def _in_dtype(scale: float, dtype: mx.Dtype) -> float:
    """``scale`` as ``q * scale`` sees it: MLX casts a Python scalar to the array's dtype.

    Remembered and rounded on the CPU stream: an ``.item()`` on the GPU stream waits for the device.
    Once per call, that wait took 32/8/N32k on the H200 from 0.214 to 0.250 ms."""
    return mx.array(scale, dtype=dtype).astype(mx.float32, stream=mx.cpu).item()


@lru_cache(maxsize=TRACES_KEPT)
def _compiled_direct(arm: str, scale: float, block: int | None, signature: tuple):
    """Partial + merge of the direct body as one ``mx.compile``d call per input ``signature`` (N is in it)."""

    def call(q, kp, ks, kb, vp, vs, vb):
        cache = _cache(QuantizedKV(kp, ks, kb), QuantizedKV(vp, vs, vb))
        launch = direct.strided_partial_launch(mx.contiguous(q), cache, kp.shape[2], scale, block)
        (parts,) = launch.run(arm)
        (out,) = direct.merge_launch(parts, launch.inputs[4], q.dtype).run(arm)
        return out

    return mx.compile(call)


def _forget_direct_calls() -> None:
    """Forget the direct body's compiled calls, and the validated calls that hold one: the launches they traced read
    impl.paged_attention's choices (``set_merge``, ``set_threadgroup_target``, ...), which call this with its plans."""
    _compiled_direct.cache_clear()
    _RECENT.clear()


direct.forget_with_plans(_forget_direct_calls)


# --- the graph arm -----------------------------------------------------------


def _dequantize(planes: QuantizedKV, tokens: mx.array) -> mx.array:
    """Rows ``tokens`` of every KV head as float32 [KVH, T, 32 lanes, 8]: ``scale * code + bias`` per dim."""
    words = mx.take(planes.packed[0], tokens, axis=1)  # [KVH, T, 32]
    shifts = mx.arange(8, dtype=mx.uint32) * 4
    codes = ((words[..., None] >> shifts) & 15).astype(mx.float32)  # [KVH, T, 32, 8]: dim 8 * lane + i
    lane_group = mx.arange(SIMD) // (GROUP_SIZE // 8)  # lane -> its 64-dim group
    scales = mx.take(mx.take(planes.scales[0], tokens, axis=1), lane_group, axis=2).astype(mx.float32)
    biases = mx.take(mx.take(planes.biases[0], tokens, axis=1), lane_group, axis=2).astype(mx.float32)
    return scales[..., None] * codes + biases[..., None]


def _combine(m: mx.array, o: mx.array, l: mx.array, axis: int) -> tuple[mx.array, mx.array, mx.array]:
    """Softmax partials (max m, values o with one more trailing axis, sum l) combined along ``axis`` of m:
    rescaled to the largest max; a partial with max -inf (no token) is skipped (weight 0)."""
    top = m.max(axis=axis, keepdims=True)
    w = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))
    return top.squeeze(axis), (w[..., None] * o).sum(axis=axis), (w * l).sum(axis=axis)


def _graph(qs: mx.array, keys: QuantizedKV, values: QuantizedKV, block: int) -> mx.array:
    """The partial + merge kernels in MLX ops (the module docstring says where they differ)."""
    h = qs.shape[1]
    kvh, n = keys.packed.shape[1], keys.packed.shape[2]
    rep, blocks, sub = h // kvh, -(-n // block), -(-block // SUB)
    steps = min(sub, n)  # positions within a sub-chunk that hold a token anywhere

    # Token of (block, sub-chunk, position): b * block + sc * sub + i; live when inside the block and the cache.
    within = mx.arange(SUB).reshape(SUB, 1) * sub + mx.arange(steps).reshape(1, steps)  # [SUB, steps]
    token = mx.arange(blocks).reshape(blocks, 1, 1) * block + within  # [blocks, SUB, steps]
    live = (within < block) & (token < n)
    gathered = mx.where(live, token, 0).reshape(-1)
    k = _dequantize(keys, gathered)  # [KVH, T, 32, 8]
    v = _dequantize(values, gathered).reshape(kvh, blocks, SUB, steps, HEAD_DIM)

    # Scores: each lane's 8-term dot product, then the sum over the 32 lanes (simd_sum). Elementwise
    # products and sums, not a matmul: MLX's CUDA backend runs float32 matmuls in TF32 (10-bit mantissa).
    q = qs.astype(mx.float32).reshape(kvh, rep, 1, SIMD, 8)
    lanes = (q * k[:, None]).sum(axis=-1)  # [KVH, REP, T, 32]
    scores = lanes.sum(axis=-1).reshape(kvh, rep, blocks, SUB, steps)

    # Online softmax per sub-chunk, one token position of every sub-chunk at a time.
    m = mx.full((kvh, rep, blocks, SUB), -mx.inf, dtype=mx.float32)
    l = mx.zeros((kvh, rep, blocks, SUB), dtype=mx.float32)
    o = mx.zeros((kvh, rep, blocks, SUB, HEAD_DIM), dtype=mx.float32)
    for i in range(steps):
        score, here = scores[..., i], live[..., i]  # [KVH, REP, blocks, SUB], [blocks, SUB]
        mn = mx.maximum(m, score)
        factor, e = mx.exp(m - mn), mx.exp(score - mn)
        vi = v[:, None, :, :, i]  # [KVH, 1, blocks, SUB, D]
        o = mx.where(here[..., None], o * factor[..., None] + e[..., None] * vi, o)
        l = mx.where(here, l * factor + e, l)
        m = mx.where(here, mn, m)

    m, o, l = _combine(m, o, l, axis=3)  # the 4 sub-chunks of a block
    _, num, den = _combine(m, o, l, axis=2)  # the blocks (merge kernel)
    out = (num / den[..., None]).astype(qs.dtype)  # [KVH, REP, D]
    return out.reshape(1, h, 1, HEAD_DIM)
