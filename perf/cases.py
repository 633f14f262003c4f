"""The benchmarks: this project's kernels and the controls they must beat, at one shape each.

Every family builds a ``Group``: the cases of one shape, sharing inputs that are
allocated and evaluated once, on first use, untimed (``Group.release`` frees
them). Data: standard normal q, K, V (x 0.5) drawn with ``mx.random`` on the
default device, bfloat16; values do not change the work these kernels do.

Input sets (``copies``): a group holds up to ``copies`` input sets, drawn with
seeds ``seed``, ``seed + 1``, ... (every set its own K/V, pool and block table),
and a case's launch takes them in turn, so the calls of one timed round read
different data, as a decode step's layers read different caches. With one
set, a round's calls read the same K/V: they run concurrently (MLX puts a
round's kernels in one CUDA graph) and share it in the GPU's cache: on the
H200 a stand-in that only streams 134 MB of K/V reached 7.9 TB/s per call
that way, above the 4.8 TB/s of HBM, and a paged partition that let 8 calls
run side by side looked 1.4x faster than it is (203.6 against 289.2 us at
16/8/D256/N128k; 282.8 against 287.6 on distinct sets). The sets are
built one by one and stop where they would pass ``input_budget_bytes()`` (a
quarter of the device's memory): at least one set, whatever its size.

Families (``benchmark`` names; kernel[arm] of each case):

* ``paged_decode`` (one decode row over a paged bf16 pool, block 16, shuffled
  table, handed over as one ``BlockTable`` built untimed with the inputs, as
  a decode step builds one per step for all its layers' calls):
  ``paged_attention[arm]`` (the direct kernel), ``gather_sdpa[mlx]``
  (the seed's control: gather the live blocks, then MLX's SDPA),
  ``sdpa[mlx]`` (``mx.fast.scaled_dot_product_attention`` on contiguous K/V:
  what a dense cache costs), and with torch on CUDA ``sdpa_*[torch]``
  (``torch.nn.functional.scaled_dot_product_attention``, bf16, contiguous K/V,
  ``enable_gqa``: default dispatch, flash and cuDNN backends).
* ``paged_decode_q4`` / ``paged_decode_q8``: the same over an affine 4/8-bit
  group-64 pool: ``paged_attention[arm]`` (dequantize on load) against
  ``gather_dequantize_sdpa[mlx]``.
* ``kvq4_decode`` (D 256, 4-bit group-64 contiguous cache): ``kvq4_decode[arm]``
  (the default body: ``impl.kvq4_decode.default_body``) and ``kvq4_decode_seed[arm]`` (the seed's body)
  against ``dequantize_sdpa[mlx]``; ``dense_decode`` holds ``sdpa[mlx]`` on the
  same shape in bf16 (the seed's claim: 4-bit K/V is ~0.28x the bytes).
* ``multi_query`` (L rows, causal, bottom-right): ``multi_query_causal[arm]``
  against ``sdpa_causal[mlx]`` (MLX's SDPA with ``mask="causal"``) and
  ``sdpa_rows[mlx]`` (L single-row SDPA calls, row i over its prefix, one eval).
* ``normalized_argmax`` ([B, V] bf16 logits): ``normalized_argmax[arm]`` against
  ``logsumexp_sub_argmax[mlx]`` (``argmax(logits - logsumexp(logits))``).

Bytes (the problem's compulsory traffic, ``perf.harness``): decode, K and V of
the N live tokens (bf16 rows, or packed codes + scales + biases), q, the
output, the block table for paged pools; argmax, the logits and the ids.
FLOPs: decode 4 * Hq * L * N * D (Q.K^T and P.V multiply-adds; the causal
triangle of L rows is ignored, N >> L); argmax 5 per logit (logsumexp: max,
subtract, exp, add; the normalized score: subtract).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from impl.arms import ARMS
from impl.kv.quantization import Quantization
from impl.kvq4_decode import QuantizedKV, kvq4_decode
from impl.multi_query import multi_query_causal
from impl.normalized_argmax import normalized_argmax, normalized_argmax_native
from impl.block_table import BlockTable
from impl.checks import check_int
from impl.paged_attention import paged_attention, paged_attention_gather
from perf.harness import Case, taking_turns
from perf.shapes import BLOCK_SIZE, DTYPE, QUANT_GROUP, ArgmaxShape, DecodeShape
from properties.strategies import ArrayPagedStorage

__all__ = ["Group", "argmax_group", "input_budget_bytes", "kvq4_group", "multi_query_group", "paged_group"]

ITEMSIZE = 2  # bfloat16
BF16 = mx.bfloat16
TORCH_SDPA_BACKENDS = ("default", "flash", "cudnn", "efficient")  # what _torch_sdpa can select
SEED_LIMIT = 2**64  # MLX's seeds are unsigned 64-bit: input set i is drawn with seed + i


def input_budget_bytes() -> int | None:
    """The most bytes a group's input sets may take together: a quarter of the default device's memory
    (``total_memory`` on CUDA, ``memory_size`` on Metal), None where MLX does not say (the CPU)."""
    info = mx.device_info(mx.default_device())
    memory = info.get("total_memory") or info.get("memory_size")
    return int(memory) // 4 if memory else None


def _nbytes(value) -> int:
    """Bytes of the MLX arrays held in ``value`` (dicts, sequences and objects' attributes, walked)."""
    if isinstance(value, mx.array):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "__dict__"):
        return sum(_nbytes(v) for v in vars(value).values())
    return 0


class _Inputs:
    """Up to ``copies`` input sets, ``make(seed + i)``, built on first call and kept until ``release``
    (module docstring: the sets stop at ``input_budget_bytes()``, at least one is built)."""

    def __init__(self, make: Callable[[int], dict], seed: int, copies: int):
        self._make, self._seed, self._copies, self._sets = make, seed, copies, None  # checked by the group

    def __call__(self) -> list[dict]:
        if self._sets is None:
            sets = [self._make(self._seed)]
            budget, size = input_budget_bytes(), _nbytes(sets[0])
            while len(sets) < self._copies and (budget is None or (len(sets) + 1) * size <= budget):
                sets.append(self._make(self._seed + len(sets)))
            self._sets = sets
        return self._sets

    def release(self) -> None:
        self._sets = None


def _each_set(inputs: _Inputs, launch_of: Callable[[dict], Callable[[], object]]):
    """A case's build: one launch per input set of the group, taken in turn."""
    return lambda: taking_turns([launch_of(x) for x in inputs()])


@dataclass
class Group:
    """The cases of one benchmark family at one shape, sharing their input sets."""

    cases: list[Case]
    inputs: _Inputs = field(repr=False)

    def release(self) -> None:
        self.inputs.release()
        mx.clear_cache()


def _normal(shape) -> mx.array:
    return (0.5 * mx.random.normal(shape)).astype(BF16)


def _check_shape(shape, kind) -> None:
    # The shape's own constructor checks its fields (perf.shapes): a plain tuple has not been through it.
    if not isinstance(shape, kind):
        raise TypeError(f"shape must be a {kind.__name__}, got {type(shape).__name__}")


def _check_names(name: str, values, choices: tuple[str, ...]) -> tuple[str, ...]:
    """``values`` as a tuple of distinct names from ``choices``, else TypeError / ValueError naming ``name``.

    Only a list or tuple: a str would be taken letter by letter, and an iterator used up by the first pass
    over it (the group would silently have no cases); a repeated name would give two cases one id."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a list or tuple of names from {choices}, got {type(values).__name__}")
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{name} must hold names from {choices}, got {value!r}")
        if value not in choices:
            raise ValueError(f"{name} must hold names from {choices}, got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a name, got {list(values)}")
    return tuple(values)


def _check_arms(arms: Sequence[str]) -> tuple[str, ...]:
    arms = _check_names("arms", arms, ARMS)
    if not arms:  # the controls alone: nothing of this project's would be timed
        raise ValueError(f"arms must name at least one of {ARMS}")
    return arms


def _check_seed(seed, copies) -> tuple[int, int]:
    """``seed`` and ``copies`` as ints: copies >= 1, and seed + copies - 1 (the last set's seed) a valid seed."""
    copies = check_int("copies", copies, minimum=1)
    return check_int("seed", seed, minimum=0, maximum=SEED_LIMIT - copies), copies


def _decode_bytes(s: DecodeShape, kv_row_bytes: int, table: bool) -> int:
    """K and V of N tokens (``kv_row_bytes`` per token per KV head, each), q, out and the block table."""
    kv = 2 * s.hkv * s.length * kv_row_bytes
    q_out = 2 * s.hq * s.rows * s.head_dim * ITEMSIZE
    return kv + q_out + (4 * (s.length // BLOCK_SIZE) if table else 0)


def _decode_flops(s: DecodeShape) -> int:
    return 4 * s.hq * s.rows * s.length * s.head_dim


def _quantized_row_bytes(d: int, bits: int) -> int:
    return d * bits // 8 + 2 * (d // QUANT_GROUP) * ITEMSIZE  # codes + a scale and a bias per group


def _dense_qkv(s: DecodeShape):
    q = _normal((1, s.hq, s.rows, s.head_dim))
    k = _normal((1, s.hkv, s.length, s.head_dim))
    v = _normal((1, s.hkv, s.length, s.head_dim))
    return q, k, v


def _pool(k: mx.array, v: mx.array, s: DecodeShape, seed: int, bits: int | None):
    """Dense [1, Hkv, N, D] K/V scattered into a pool of 16-token blocks by a shuffled table."""
    blocks = s.length // BLOCK_SIZE
    table = np.random.default_rng(seed).permutation(blocks).astype(np.int32)  # logical i -> physical table[i]
    where = mx.array(np.argsort(table).astype(np.int32))  # physical p holds logical where[p]

    def to_pool(x):
        logical = x[0].reshape(s.hkv, blocks, BLOCK_SIZE, s.head_dim).transpose(1, 0, 2, 3)
        return mx.take(logical, where, axis=0)

    pk, pv = to_pool(k), to_pool(v)
    if bits is None:
        storage = ArrayPagedStorage(pk, pv, BLOCK_SIZE, s.head_dim, s.head_dim, BF16)
    else:
        quant = Quantization(bits, QUANT_GROUP)
        kq, ks, kb = quant.quantize(pk)
        vq, vs, vb = quant.quantize(pv)
        storage = ArrayPagedStorage(kq, vq, BLOCK_SIZE, s.head_dim, s.head_dim, BF16, quant, ks, kb, vs, vb)
    return storage, table


def paged_group(shape: DecodeShape, arms: Sequence[str], *, bits: int | None = None, dense: bool = True,
                torch_backends: Sequence[str] = (), seed: int = 0, copies: int = 1) -> Group:
    """``paged_decode`` (bits None) or ``paged_decode_q{bits}`` cases at ``shape`` (module docstring)."""
    _check_shape(shape, DecodeShape)
    arms = _check_arms(arms)
    torch_backends = _check_names("torch_backends", torch_backends, TORCH_SDPA_BACKENDS)
    seed, copies = _check_seed(seed, copies)
    if not isinstance(dense, (bool, np.bool_)):
        raise TypeError(f"dense must be a bool, got {type(dense).__name__}")
    if bits is not None:
        bits = check_int("bits", bits)  # 4.0 would pass the test below and name the benchmark paged_decode_q4.0
        if bits not in (4, 8):
            raise ValueError(f"bits must be None, 4 or 8, got {bits!r}")
        if shape.head_dim % QUANT_GROUP:
            raise ValueError(f"shape.head_dim must be a multiple of the quantization group {QUANT_GROUP} "
                             f"for bits={bits}, got {shape.head_dim}")
        if torch_backends:  # the torch references read the bf16 cache only: they would be dropped silently
            raise ValueError(f"torch_backends must be empty for a quantized pool (bits={bits}), got {torch_backends}")
    if shape.rows != 1 or shape.length % BLOCK_SIZE:
        raise ValueError(f"shape must be one decode row over a whole number of {BLOCK_SIZE}-token blocks, got {shape}")
    scale = 1.0 / math.sqrt(shape.head_dim)

    def make(set_seed):
        mx.random.seed(set_seed)
        q, k, v = _dense_qkv(shape)
        storage, table = _pool(k, v, shape, set_seed, bits)
        mx.eval(q, k, v, storage.keys, storage.values,
                *(a for a in (storage.key_scales, storage.key_biases, storage.value_scales, storage.value_biases)
                  if a is not None))
        # One frozen table per decode step, shared by every layer's call (impl.block_table): built here,
        # untimed, as a step builds it once before its layers run.
        return {"q": q, "k": k, "v": v, "storage": storage, "table": BlockTable.of(table)}

    inputs = _Inputs(make, seed, copies)
    name = "paged_decode" if bits is None else f"paged_decode_q{bits}"
    row = shape.head_dim * ITEMSIZE if bits is None else _quantized_row_bytes(shape.head_dim, bits)
    nbytes, flops = _decode_bytes(shape, row, table=True), _decode_flops(shape)
    dims = tuple(shape)

    def direct(arm):
        return _each_set(inputs, lambda x: lambda: paged_attention(x["q"], x["storage"], x["table"], shape.length,
                                                                   scale=scale, arm=arm))

    gather = _each_set(inputs, lambda x: lambda: paged_attention_gather(x["q"], x["storage"], x["table"],
                                                                        shape.length, scale=scale))
    sdpa = _each_set(inputs, lambda x: lambda: mx.fast.scaled_dot_product_attention(x["q"], x["k"], x["v"],
                                                                                    scale=scale))

    cases = [Case(name, "paged_attention", arm, dims, DTYPE, nbytes, flops, direct(arm)) for arm in arms]
    control = "gather_sdpa" if bits is None else "gather_dequantize_sdpa"
    cases.append(Case(name, control, "mlx", dims, DTYPE, nbytes, flops, gather))
    if bits is None and dense:
        cases.append(Case(name, "sdpa", "mlx", dims, DTYPE, nbytes, flops, sdpa,
                          note="contiguous K/V: a dense cache, no table"))
    if bits is None:
        for backend in torch_backends:
            cases.append(Case(name, f"sdpa_{backend}", "torch", dims, DTYPE, nbytes, flops,
                              _torch_sdpa(shape, backend, seed, inputs), note="torch, contiguous K/V, enable_gqa",
                              runtime="torch"))
    return Group(cases, inputs)


def _torch_sdpa(shape: DecodeShape, backend: str, seed: int, inputs: _Inputs):
    """A build for torch's SDPA on CUDA, bf16, contiguous K/V (``backend``: default, flash, cudnn, efficient),
    with as many input sets as the group's MLX cases (``inputs``), taken in turn."""

    def build():
        import torch
        from torch.nn import functional as F

        if not torch.cuda.is_available():
            raise RuntimeError("torch has no CUDA device here")
        generator = torch.Generator(device="cuda").manual_seed(seed)

        def normal(*dims):
            return (0.5 * torch.randn(*dims, device="cuda", generator=generator)).to(torch.bfloat16)

        sets = [tuple(normal(1, h, rows, shape.head_dim) for h, rows in
                      ((shape.hq, shape.rows), (shape.hkv, shape.length), (shape.hkv, shape.length)))
                for _ in inputs()]
        scale = 1.0 / math.sqrt(shape.head_dim)
        gqa = shape.hq != shape.hkv
        if backend == "default":
            context = None
        else:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                      "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
            context = chosen

        def launch_on(q, k, v):
            def call():  # asynchronous: perf.harness synchronizes
                if context is None:
                    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
                with sdpa_kernel(context):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)

            return call

        call = taking_turns([launch_on(*qkv) for qkv in sets])
        call()  # fails here (not in the timing) when the backend refuses the shape
        torch.cuda.synchronize()
        return call

    return build


def kvq4_group(shape: DecodeShape, arms: Sequence[str], *, seed: int = 0, copies: int = 1) -> Group:
    """``kvq4_decode`` cases and the bf16 ``dense_decode`` SDPA at ``shape`` (D 256, one row)."""
    _check_shape(shape, DecodeShape)
    arms = _check_arms(arms)
    seed, copies = _check_seed(seed, copies)
    if shape.rows != 1 or shape.head_dim != 256:
        raise ValueError(f"shape must be one decode row with head_dim 256 (the kernel's contract), got {shape}")
    scale = 1.0 / math.sqrt(shape.head_dim)

    def make(set_seed):
        mx.random.seed(set_seed)
        q, k, v = _dense_qkv(shape)
        keys = QuantizedKV(*mx.quantize(k, group_size=64, bits=4))
        values = QuantizedKV(*mx.quantize(v, group_size=64, bits=4))
        mx.eval(q, k, v, *keys[:3], *values[:3])
        return {"q": q, "k": k, "v": v, "keys": keys, "values": values}

    inputs = _Inputs(make, seed, copies)
    dims = tuple(shape)
    nbytes = _decode_bytes(shape, _quantized_row_bytes(256, 4), table=False)
    flops = _decode_flops(shape)

    def kernel(arm, body=None):
        return _each_set(inputs, lambda x: lambda: kvq4_decode(x["q"], x["keys"], x["values"], scale=scale,
                                                               body=body, arm=arm))

    def dequantize_then_sdpa(x):
        def call():
            k = mx.dequantize(*x["keys"][:3], group_size=64, bits=4)
            v = mx.dequantize(*x["values"][:3], group_size=64, bits=4)
            return mx.fast.scaled_dot_product_attention(x["q"], k, v, scale=scale)

        return call

    dequantize_sdpa = _each_set(inputs, dequantize_then_sdpa)
    sdpa = _each_set(inputs, lambda x: lambda: mx.fast.scaled_dot_product_attention(x["q"], x["k"], x["v"],
                                                                                    scale=scale))

    cases = [Case("kvq4_decode", "kvq4_decode", arm, dims, DTYPE, nbytes, flops, kernel(arm)) for arm in arms]
    cases += [Case("kvq4_decode", "kvq4_decode_seed", arm, dims, DTYPE, nbytes, flops, kernel(arm, "seed"),
                   note="the seed's body") for arm in arms]
    cases.append(Case("kvq4_decode", "dequantize_sdpa", "mlx", dims, DTYPE, nbytes, flops, dequantize_sdpa))
    cases.append(Case("dense_decode", "sdpa", "mlx", dims, DTYPE, _decode_bytes(shape, 256 * ITEMSIZE, table=False),
                      flops, sdpa, note="the bf16 cache kvq4 replaces"))
    return Group(cases, inputs)


def multi_query_group(shape: DecodeShape, arms: Sequence[str], *, seed: int = 0, copies: int = 1) -> Group:
    """``multi_query`` cases at ``shape`` (L = shape.rows query rows, the last L positions, causal)."""
    _check_shape(shape, DecodeShape)
    arms = _check_arms(arms)
    seed, copies = _check_seed(seed, copies)
    if not 1 <= shape.rows <= 8:
        raise ValueError(f"shape.rows must be in [1, 8] (the kernel's L), got {shape.rows}")
    scale = 1.0 / math.sqrt(shape.head_dim)
    L, n = shape.rows, shape.length

    def make(set_seed):
        mx.random.seed(set_seed)
        q, k, v = _dense_qkv(shape)
        mx.eval(q, k, v)
        return {"q": q, "k": k, "v": v}

    inputs = _Inputs(make, seed, copies)
    dims = tuple(shape)
    nbytes, flops = _decode_bytes(shape, shape.head_dim * ITEMSIZE, table=False), _decode_flops(shape)

    def kernel(arm):
        return _each_set(inputs, lambda x: lambda: multi_query_causal(x["q"], x["k"], x["v"], scale=scale, arm=arm))

    sdpa_causal = _each_set(inputs, lambda x: lambda: mx.fast.scaled_dot_product_attention(
        x["q"], x["k"], x["v"], scale=scale, mask="causal"))

    def rows_one_by_one(x):
        def call():
            return [mx.fast.scaled_dot_product_attention(x["q"][:, :, i:i + 1], x["k"][:, :, :n - L + i + 1],
                                                         x["v"][:, :, :n - L + i + 1], scale=scale)
                    for i in range(L)]

        return call

    sdpa_rows = _each_set(inputs, rows_one_by_one)

    cases = [Case("multi_query", "multi_query_causal", arm, dims, DTYPE, nbytes, flops, kernel(arm)) for arm in arms]
    cases.append(Case("multi_query", "sdpa_causal", "mlx", dims, DTYPE, nbytes, flops, sdpa_causal))
    cases.append(Case("multi_query", "sdpa_rows", "mlx", dims, DTYPE, nbytes, flops, sdpa_rows,
                      note=f"{L} single-row calls, one eval"))
    return Group(cases, inputs)


def argmax_group(shape: ArgmaxShape, arms: Sequence[str], *, seed: int = 0, copies: int = 1) -> Group:
    """``normalized_argmax`` cases at ``shape`` ([batch, vocab] bf16 logits)."""
    _check_shape(shape, ArgmaxShape)
    arms = _check_arms(arms)
    seed, copies = _check_seed(seed, copies)

    def make(set_seed):
        mx.random.seed(set_seed)
        logits = (4.0 * mx.random.normal((shape.batch, shape.vocab))).astype(BF16)
        mx.eval(logits)
        return {"logits": logits}

    inputs = _Inputs(make, seed, copies)
    dims = tuple(shape)
    nbytes = shape.batch * shape.vocab * ITEMSIZE + 4 * shape.batch
    flops = 5 * shape.batch * shape.vocab

    def kernel(arm):
        return _each_set(inputs, lambda x: lambda: normalized_argmax(x["logits"], arm=arm))

    native = _each_set(inputs, lambda x: lambda: normalized_argmax_native(x["logits"]))

    cases = [Case("normalized_argmax", "normalized_argmax", arm, dims, DTYPE, nbytes, flops, kernel(arm))
             for arm in arms]
    cases.append(Case("normalized_argmax", "logsumexp_sub_argmax", "mlx", dims, DTYPE, nbytes, flops, native))
    return Group(cases, inputs)
