"""Hypothesis strategies for direct paged attention: pools, block tables, poisoned slots.

A ``PagedCase`` is one call of ``impl.paged_attention.paged_attention``: q, a
storage object built directly from mx arrays (``ArrayPagedStorage``, the
``PagedStorage`` protocol, no ``impl.kv`` needed), a permuted block table, the
live length, the scale, plus the K/V the kernel should see, in logical order,
as NumPy (for the oracles)::

    @given(case=sts.paged_cases(quantized=False))
    def test_x(case): paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale)

* Head layouts MHA / GQA (group 2..8) / MQA; Dk in {64, 80, 96, 128, 256}, Dv
  usually Dk; block sizes {1, 8, 12, 16, 24, 32, 40, 64} (four not powers of
  two: the pool takes any); n in 1..8.
* Lengths straddle block edges (k*block_size + {-1, 0, 1}) and 64-token
  partition edges (k*64 + {-1, 0, 1}), or are uniform.
* The pool has spare blocks; the table is a random permutation of physical
  blocks (sometimes longer than needed). Every slot the kernel must not read
  (unused blocks, slots past ``length``) is poisoned with NaN: keys/values for
  dense pools, scales/biases for quantized ones, so a stray read shows as NaN.
* ``sentinel`` (half the cases): physical block 0 holds no live token, and the
  table's entries past the live ones name it. The compiled kernels read the
  table zero-padded to a power of two (``impl.block_table.BlockTable.padded``),
  so every padded or rounded entry then names a NaN block: a read through one
  is NaN (without the sentinel, only when the permutation leaves block 0 spare).
* ``repeats`` (0-2): the last live entries name the first ones' physical blocks
  again (their token rows copied there): one block read twice per call.
* ``peaks`` (half the cases, ``attention.plant_score_peaks``): an attention
  sink at token 0 and an outlier late, scores 220 and 100 (either the larger),
  every other score a few units: the partitions' maxima then lie more than
  float32 exp's range (88.7) apart, which a merge must survive.
* Quantized pools (affine, bits 4|8, group 32|64|128 dividing D) are quantized
  with ``reference.quant.quantize`` (MLX's CPU algorithm, device independent);
  the case's K/V are then dequantized as the kernel does on load:
  ``InT(scale * code + bias)``, rounded once to the pool dtype
  (``dequantize_on_load_ref``; MLX's own ``mx.dequantize`` rounds the product
  and the sum separately, so it may differ by one ULP of InT).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

from reference import quant as quant_ref
from reference.attention import UNIT_ROUNDOFF
from reference.sampling import round_to

from .attention import MX_DTYPES, head_counts, numpy_dtype, plant_score_peaks, score_peaks, to_mx

__all__ = [
    "PAGED_BITS",
    "PAGED_BLOCK_SIZES",
    "PAGED_DTYPES",
    "PAGED_GROUPS",
    "PAGED_HEAD_DIMS",
    "PAGED_PART",
    "ArrayPagedStorage",
    "PagedCase",
    "PagedQuantization",
    "build_paged_case",
    "dequantize_on_load_ref",
    "make_storage",
    "error_ratio_floor",
    "paged_oracles",
    "visible_score_max",
    "paged_cases",
    "paged_lengths",
]

PAGED_DTYPES = ("bfloat16", "float16", "float32")
PAGED_HEAD_DIMS = (64, 80, 96, 128, 256)
# 1, 12, 24 and 40: not powers of two (a token's block and slot are t / BS and t % BS, never a shift and a mask);
# 1 and 12 are not multiples of the kernel's 8-token batches either (a batch then spans blocks: past the live ones
# too, at the end of the sequence).
PAGED_BLOCK_SIZES = (1, 8, 12, 16, 24, 32, 40, 64)
PAGED_BITS = (4, 8)
PAGED_GROUPS = (32, 64, 128)
PAGED_PART = 64  # the kernel's partition length



@dataclass(frozen=True)
class PagedQuantization:
    bits: int
    group_size: int


@dataclass(frozen=True, eq=False)
class ArrayPagedStorage:
    """The ``impl.paged_attention.PagedStorage`` attributes over plain mx arrays."""

    keys: mx.array
    values: mx.array
    block_size: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype
    quantization: PagedQuantization | None = None
    key_scales: mx.array | None = None
    key_biases: mx.array | None = None
    value_scales: mx.array | None = None
    value_biases: mx.array | None = None


@dataclass(frozen=True, eq=False)
class PagedCase:
    dtype: str
    hq: int
    hkv: int
    n: int
    dk: int
    dv: int
    block_size: int
    length: int
    scale: float
    quant: PagedQuantization | None
    q: np.ndarray  # [1, Hq, n, Dk] in dtype
    k: np.ndarray  # [1, Hkv, length, Dk] in dtype: what the kernel reads (dequantized on load if quantized)
    v: np.ndarray  # [1, Hkv, length, Dv] in dtype
    table: list[int]
    storage: ArrayPagedStorage = field(repr=False)
    live: dict = field(repr=False, default_factory=dict)  # the stored token rows per plane, [length, Hkv, W]
    num_blocks: int = 0
    seed: int = 0

    def relaid(self, table: list[int], num_blocks: int | None = None, *, poison: bool = True) -> ArrayPagedStorage:
        """The same token rows stored at the blocks ``table`` names (in a pool of ``num_blocks``)."""
        return make_storage(self.live, dtype=self.dtype, table=table, num_blocks=num_blocks or self.num_blocks,
                            block_size=self.block_size, head_dim=self.dk, v_head_dim=self.dv, quant=self.quant,
                            poison=poison, rng=np.random.default_rng(self.seed + 1))

    def __repr__(self) -> str:
        return f"PagedCase({self.id}, seed={self.seed}, table={self.table})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis prints falsifying examples with this
        printer.text(repr(self))

    @property
    def q_mx(self) -> mx.array:
        return to_mx(self.q, self.dtype)

    @property
    def layout(self) -> str:
        return "mha" if self.hq == self.hkv else ("mqa" if self.hkv == 1 else "gqa")

    @property
    def id(self) -> str:
        q = f"-q{self.quant.bits}g{self.quant.group_size}" if self.quant else ""
        return (f"{self.dtype}{q}-{self.layout}-Hq{self.hq}-Hkv{self.hkv}-n{self.n}-Dk{self.dk}-Dv{self.dv}"
                f"-bs{self.block_size}-len{self.length}")


def dequantize_on_load_ref(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, *, bits: int,
                           group_size: int, dtype: str) -> np.ndarray:
    """The kernel's dequantization ``InT(scale * code + bias)``: exact in float64, rounded once to ``dtype``."""
    codes = quant_ref.unpack(packed, bits).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), group_size, axis=-1)
    b = np.repeat(biases.astype(np.float64), group_size, axis=-1)
    return round_to(s * codes + b, dtype).astype(numpy_dtype(dtype))


@st.composite
def paged_lengths(draw, block_size: int, n: int, max_length: int) -> int:
    """A length >= n, often one off a block edge or a 64-token partition edge."""
    kind = draw(st.sampled_from(["block_edge", "partition_edge", "uniform"]))
    if kind == "uniform":
        return draw(st.integers(n, max(n, max_length)))
    unit = block_size if kind == "block_edge" else PAGED_PART
    multiple = draw(st.integers(1, max(1, max_length // unit)))
    return max(n, min(max_length, multiple * unit + draw(st.sampled_from([-1, 0, 1]))))


def _pool(live: np.ndarray, table: list[int], num_blocks: int, block_size: int, fill) -> np.ndarray:
    """Token rows ``live`` [length, Hkv, W] placed in a [num_blocks, Hkv, block_size, W] pool of ``fill``."""
    tokens = np.arange(live.shape[0])
    block, slot = np.asarray(table, dtype=np.int64)[tokens // block_size], tokens % block_size
    if isinstance(fill, np.ndarray):
        pool = fill.copy()
    else:
        pool = np.full((num_blocks, live.shape[1], block_size, live.shape[2]), fill, np.float64).astype(live.dtype)
    pool[block, :, slot] = live  # token t -> block table[t // bs], slot t % bs
    return pool


def make_storage(live: dict[str, np.ndarray], *, dtype: str, table: list[int], num_blocks: int, block_size: int,
                 head_dim: int, v_head_dim: int, quant: PagedQuantization | None = None, poison: bool = True,
                 rng: np.random.Generator | None = None) -> ArrayPagedStorage:
    """Pools holding ``live`` token rows (``keys``/``values`` and, quantized, the four scale/bias
    planes, each [length, Hkv, W]) at the slots ``table`` gives them; every other slot is NaN
    (``poison``; packed words get random bits, their scales/biases NaN) or 0."""
    rng = rng if rng is not None else np.random.default_rng(0)
    fill = np.nan if poison else 0.0
    planes = {}
    for name, rows in live.items():
        if rows.dtype == np.uint32:  # packed codes: garbage bits, the NaN scales expose a stray read
            garbage = rng.integers(0, 2**32, (num_blocks, rows.shape[1], block_size, rows.shape[2]), dtype=np.uint64)
            planes[name] = mx.array(_pool(rows, table, num_blocks, block_size, garbage.astype(np.uint32)))
        else:
            planes[name] = to_mx(_pool(rows, table, num_blocks, block_size, fill), dtype)
    return ArrayPagedStorage(block_size=block_size, head_dim=head_dim, v_head_dim=v_head_dim, dtype=MX_DTYPES[dtype],
                             quantization=quant, **planes)


def build_paged_case(rng: np.random.Generator, *, dtype: str, hq: int, hkv: int, n: int, dk: int, dv: int,
                     block_size: int, length: int, quant: PagedQuantization | None = None, spare_blocks: int = 2,
                     extra_table: int = 0, scale: float | None = None, amplitude: float = 1.0,
                     poison: bool = True, sentinel: bool = False, repeats: int = 0, peaks=(),
                     seed: int = 0) -> PagedCase:
    """A case from explicit parameters (``paged_cases`` draws them; parity tests pass them).

    ``sentinel``: physical block 0 holds no live token (NaN, as every unused block) and the table's ``extra_table``
    entries past the live ones name it: the block the kernels' zero-padded table (``BlockTable.padded``) points past
    the live entries, so a read of a padded or rounded entry is a NaN read. ``repeats`` (at most half the live
    blocks): for r < repeats, logical block ``needed - 1 - r`` names logical block r's physical block, its token rows
    those of block r (one physical block read twice; the oracle's K/V are what the pool holds). ``peaks``:
    ``(token, score)`` pairs,
    planted by ``attention.plant_score_peaks`` (every query's score against that token's key is about ``score``)."""
    np_dtype = numpy_dtype(dtype)
    needed = -(-length // block_size)
    base = 1 if sentinel else 0  # sentinel: block 0 is reserved
    num_blocks = needed + spare_blocks + base
    table = [base + int(b) for b in rng.permutation(num_blocks - base)[:needed]]
    if sentinel:
        table += [0] * extra_table
    else:
        table += [int(b) for b in rng.integers(0, num_blocks, extra_table)]

    q = (amplitude * rng.standard_normal((1, hq, n, dk))).astype(np_dtype)
    k_rows = rng.standard_normal((length, hkv, dk)).astype(np_dtype)
    v_rows = rng.standard_normal((length, hkv, dv)).astype(np_dtype)
    scale = float(dk ** -0.5 if scale is None else scale)
    if peaks:
        q, k_rows = plant_score_peaks(q, k_rows, peaks, scale=scale, token_axis=0, dtype=dtype)
    repeats = min(repeats, needed // 2)
    for r in range(repeats):  # logical block j reads the physical block of logical block r (rows copied there)
        j = needed - 1 - r
        table[j] = table[r]
        tokens = np.arange(j * block_size, min(length, (j + 1) * block_size))
        for rows in (k_rows, v_rows):
            rows[tokens] = rows[tokens - (j - r) * block_size]
    if quant is None:
        live = {"keys": k_rows, "values": v_rows}
        k_seen, v_seen = k_rows, v_rows
    else:
        live, seen = {}, []
        for plane, prefix, rows in (("keys", "key", k_rows), ("values", "value", v_rows)):
            packed, scales, biases = quant_ref.quantize(rows, group_size=quant.group_size, bits=quant.bits)
            live |= {plane: packed, f"{prefix}_scales": scales, f"{prefix}_biases": biases}
            seen.append(dequantize_on_load_ref(packed, scales, biases, bits=quant.bits,
                                               group_size=quant.group_size, dtype=dtype))
        k_seen, v_seen = seen
    storage = make_storage(live, dtype=dtype, table=table, num_blocks=num_blocks, block_size=block_size,
                           head_dim=dk, v_head_dim=dv, quant=quant, poison=poison, rng=rng)
    return PagedCase(dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv, block_size=block_size, length=length,
                     scale=scale, quant=quant, q=q,
                     k=np.ascontiguousarray(k_seen.transpose(1, 0, 2)[None]),
                     v=np.ascontiguousarray(v_seen.transpose(1, 0, 2)[None]), table=table, storage=storage,
                     live=live, num_blocks=num_blocks, seed=seed)


@st.composite
def paged_cases(draw, *, dtypes=PAGED_DTYPES, quantized: bool | None = False, head_dims=PAGED_HEAD_DIMS,
                block_sizes=PAGED_BLOCK_SIZES, max_length: int = 160, max_n: int = 8,
                max_group: int = 8) -> PagedCase:
    """A whole paged-attention case (module docstring). ``quantized``: False, True or None (either)."""
    dtype = draw(st.sampled_from(dtypes))
    is_quantized = draw(st.booleans()) if quantized is None else quantized
    hq, hkv = draw(head_counts(max_kv_heads=2, max_group=max_group))
    quant = None
    if is_quantized:
        bits = draw(st.sampled_from(PAGED_BITS))
        group = draw(st.sampled_from(PAGED_GROUPS))
        fits = [d for d in head_dims if d % group == 0]
        if not fits:  # e.g. group 128 with no head dim a multiple of it: take the smallest group
            group = PAGED_GROUPS[0]
            fits = [d for d in head_dims if d % group == 0]
        quant = PagedQuantization(bits, group)
        dk = draw(st.sampled_from(fits))
        dv = draw(st.one_of(st.just(dk), st.sampled_from(fits)))
    else:
        dk = draw(st.sampled_from(head_dims))
        dv = draw(st.one_of(st.just(dk), st.sampled_from(head_dims)))
    block_size = draw(st.sampled_from(block_sizes))
    n = draw(st.integers(1, max_n))
    length = draw(paged_lengths(block_size, n, max_length))
    seed = draw(st.integers(0, 2**32 - 1))
    peaks = draw(score_peaks(length, n))
    return build_paged_case(np.random.default_rng(seed), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                            block_size=block_size, length=length, quant=quant,
                            spare_blocks=draw(st.integers(0, 3)), extra_table=draw(st.integers(0, 2)),
                            amplitude=draw(st.sampled_from([0.5, 1.0, 4.0])), sentinel=draw(st.booleans()),
                            repeats=draw(st.sampled_from((0, 0, 1, 2))) if not peaks else 0, peaks=peaks,
                            seed=seed)


# --- oracles and thresholds shared by the properties and the parity gates ----



def paged_oracles(case: PagedCase) -> tuple[np.ndarray, np.ndarray]:
    """(float64 oracle, naive baseline in the case's dtype) on the K/V the kernel reads, causal."""
    from reference.attention import attention_ref

    ref = attention_ref(case.q, case.k, case.v, scale=case.scale, mask="causal")
    base = attention_ref(case.q, case.k, case.v, scale=case.scale, mask="causal", upcast=False, reorder_ops=True)
    return ref, base


def visible_score_max(case: PagedCase) -> float:
    """max |scale * q . k| over the (query, key) pairs the causal mask lets through, float64."""
    group = case.hq // case.hkv
    q = case.q.astype(np.float64)[0]  # [Hq, n, Dk]
    k = np.repeat(case.k.astype(np.float64)[0], group, axis=0)  # [Hq, length, Dk]
    scores = np.abs(q @ k.swapaxes(-1, -2)) * case.scale
    visible = np.arange(case.length)[None, :] <= (case.length - case.n + np.arange(case.n))[:, None]
    return float(np.max(np.where(visible, scores, 0.0)))


def error_ratio_floor(case: PagedCase, ref: np.ndarray) -> tuple[float, str]:
    """The error-ratio gate's floor for ``case`` and its derivation.

    bfloat16 / float16: one output ULP at max|ref| (the gate's default): the
    baseline rounds scores, probabilities and outputs to the dtype, so its
    error dwarfs the float32 kernel's and the factor 2 alone decides.

    float32: kernel and baseline both compute in float32, so their errors are
    draws of the same float32 noise and the factor 2 alone is a coin toss
    (measured over 1500 Hypothesis cases on the CPU graph arm: kernel error up
    to 3.0x the NumPy/BLAS baseline's). The floor adds one float32 rounding of
    each score (u * max|s|), which moves a softmax output by at most
    2 * max|ds| * max|v| (dp_j = p_j (ds_j - E_p ds)). That is a calibrated
    model, not a bound over every summation order: a score's D-term dot
    product may err by up to gamma_D * S_j (``attention_noise_floor``, the
    decode kernels' float32 floor), about D times more. Measured room: error /
    floor stayed <= 0.40 on the CPU graph arm and <= 0.32 on the H200 cuda arm
    (records/h200-cuda/). Why not the bound here: on this module's float32
    cases (their planted score peaks among them) it reaches 3e-3 (median) to
    3e-2 absolute (1000 cases per oracle property, CPU): an error the size of
    a 16-bit rounding (2^-9 relative) inside a float32 kernel would pass many
    of them. The model keeps the float32 gates the paged kernels' tightest. A
    correct kernel with another summation order could exceed it: its error
    measured against ``attention_noise_floor`` tells a rounding difference
    (within) from a bug (beyond).
    """
    from reference import metrics

    ulp_floor = metrics.rounding_noise_floor(ref, case.dtype)
    if case.dtype != "float32":
        return ulp_floor, ""
    s_max, v_max = visible_score_max(case), float(np.max(np.abs(case.v.astype(np.float64))))
    floor = ulp_floor + 2.0 * UNIT_ROUNDOFF["float32"] * s_max * v_max
    why = (f"FlashAttention's rule (factor 2 against the naive float32 baseline) with a float32 noise floor: "
           f"one output ULP at max|ref| ({ulp_floor:.3g}) + one float32 rounding of every score, "
           f"u=2^-24 times max|s|={s_max:.3g}, propagated through softmax as 2*max|ds|*max|v| "
           f"(max|v|={v_max:.3g}): floor {floor:.3g}")
    return floor, why
