"""Shape grids of the benchmarks: the shapes a decoder really has.

Decode attention shapes are ``DecodeShape(hq, hkv, rows, head_dim, length)``
(one sequence, B = 1): ``hq`` / ``hkv`` query / KV heads (GQA factor hq/hkv),
``rows`` query rows per call (1 for a decode step, L <= 8 for a speculative
verify), ``head_dim`` D (Dk = Dv), ``length`` N cached tokens. Argmax shapes
are ``ArgmaxShape(batch, vocab)``.

Head layouts: 32/8 (Llama-3-8B, Qwen2.5-7B-class GQA 4), 16/8 (Gemma-class,
GQA 2, D 256), 8/1 (MQA-like, GQA 8). Vocabularies: 32000 (Llama-2 / Mistral)
and 151936 (Qwen2). Paged pools use ``BLOCK_SIZE`` = 16 tokens per block
(vLLM's default) with a shuffled block table, as a long-running server's pool
ends up.

Grids:

* ``GPU_*``: the full grid for a GPU, N from 1k to 128k.
* ``H200_*``: the subset measured on the NVIDIA H200 (``perf/RESULTS.md``),
  chosen to fit a few minutes of device time: the two headline shapes
  (32/8/D128/N32k and 16/8/D256/N128k) and a few neighbours.
* ``CPU_*``: few, small shapes (N 1k-4k): the CPU is slow, and on the CPU the
  benchmarks are a smoke check of ratios, never a source of absolute numbers.
"""

from __future__ import annotations

from itertools import product
from typing import NamedTuple

from impl.checks import check_int

__all__ = [
    "ARGMAX_BATCHES",
    "BLOCK_SIZE",
    "CPU_ARGMAX",
    "CPU_KVQ4",
    "CPU_MULTI_QUERY",
    "CPU_PAGED",
    "CPU_PAGED_QUANTIZED",
    "DTYPE",
    "GPU_ARGMAX",
    "GPU_KVQ4",
    "GPU_LENGTHS",
    "GPU_MULTI_QUERY",
    "GPU_PAGED",
    "GPU_PAGED_QUANTIZED",
    "H200_ARGMAX",
    "H200_KVQ4",
    "H200_MULTI_QUERY",
    "H200_PAGED",
    "H200_PAGED_QUANTIZED",
    "HEAD_DIMS",
    "HEAD_LAYOUTS",
    "QUANT_GROUP",
    "VOCABS",
    "ArgmaxShape",
    "DecodeShape",
]

DTYPE = "bfloat16"  # every attention benchmark: a decoder's KV cache dtype
BLOCK_SIZE = 16
QUANT_GROUP = 64  # affine group size of the quantized pools (MLX's default)

HEAD_LAYOUTS = ((32, 8), (16, 8), (8, 1))
HEAD_DIMS = (128, 256)
GPU_LENGTHS = (1024, 4096, 32768, 131072)
VOCABS = (32000, 151936)
ARGMAX_BATCHES = (1, 8, 64)


def _dims(fields: tuple[str, ...], values: tuple) -> list[int]:
    """``values`` as Python ints, each checked a positive int (NumPy's too, never a bool) and named by its field:
    a zero or float dimension would otherwise surface much later, as a ZeroDivisionError or a bad case id."""
    return [check_int(name, value, minimum=1) for name, value in zip(fields, values)]


class _DecodeFields(NamedTuple):
    hq: int
    hkv: int
    rows: int
    head_dim: int
    length: int


class DecodeShape(_DecodeFields):
    """One decode attention shape (module docstring), its fields checked when it is made."""

    __slots__ = ()

    # A NamedTuple may not define __new__ in its own body, hence the subclass.
    def __new__(cls, hq, hkv, rows, head_dim, length):
        self = super().__new__(cls, *_dims(cls._fields, (hq, hkv, rows, head_dim, length)))
        if self.hq % self.hkv:
            raise ValueError(f"hq must be a multiple of hkv (query heads share KV heads), got hq={hq}, hkv={hkv}")
        if self.rows > self.length:
            raise ValueError(f"rows must be <= length (the rows are the last positions of the cache), "
                             f"got rows={rows}, length={length}")
        return self

    @classmethod
    def _make(cls, iterable):  # NamedTuple's _make, and _replace through it, would skip __new__'s checks
        return cls(*iterable)

    def __str__(self) -> str:
        return f"Hq{self.hq}-Hkv{self.hkv}-L{self.rows}-D{self.head_dim}-N{self.length}"


class _ArgmaxFields(NamedTuple):
    batch: int
    vocab: int


class ArgmaxShape(_ArgmaxFields):
    """One argmax shape: ``batch`` rows of ``vocab`` logits, its fields checked when it is made."""

    __slots__ = ()

    def __new__(cls, batch, vocab):
        return super().__new__(cls, *_dims(cls._fields, (batch, vocab)))

    @classmethod
    def _make(cls, iterable):  # as DecodeShape._make
        return cls(*iterable)

    def __str__(self) -> str:
        return f"B{self.batch}-V{self.vocab}"


def _decode(layouts, dims, lengths, rows=(1,)) -> tuple[DecodeShape, ...]:
    return tuple(DecodeShape(hq, hkv, r, d, n) for (hq, hkv), d, n, r in product(layouts, dims, lengths, rows))


# --- GPU: the full grid ------------------------------------------------------
GPU_PAGED = _decode(HEAD_LAYOUTS, HEAD_DIMS, GPU_LENGTHS)
GPU_PAGED_QUANTIZED = _decode(HEAD_LAYOUTS, HEAD_DIMS, (32768, 131072))
GPU_KVQ4 = _decode(HEAD_LAYOUTS, (256,), GPU_LENGTHS)  # the kernel is D 256 only
# multi-query: L rows share a threadgroup per KV head, NQ = (hq / hkv) * L <= 64
GPU_MULTI_QUERY = _decode(HEAD_LAYOUTS, HEAD_DIMS, (4096, 32768), rows=(4, 8))
GPU_ARGMAX = tuple(ArgmaxShape(b, v) for v, b in product(VOCABS, ARGMAX_BATCHES))

# --- the H200 subset (perf/RESULTS.md) ----------------------------------------
H200_PAGED = (
    DecodeShape(32, 8, 1, 128, 32768),  # headline 1
    DecodeShape(16, 8, 1, 256, 131072),  # headline 2
    DecodeShape(32, 8, 1, 128, 4096),
    DecodeShape(32, 8, 1, 128, 131072),
    DecodeShape(16, 8, 1, 256, 32768),
    DecodeShape(8, 1, 1, 128, 32768),
)
H200_PAGED_QUANTIZED = (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072))
H200_KVQ4 = (DecodeShape(16, 8, 1, 256, 131072), DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768))
H200_MULTI_QUERY = (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768),
                    DecodeShape(32, 8, 4, 128, 32768))
H200_ARGMAX = (ArgmaxShape(1, 32000), ArgmaxShape(64, 32000), ArgmaxShape(1, 151936), ArgmaxShape(64, 151936))

# --- CPU: a smoke check of ratios (small, few) --------------------------------
CPU_PAGED = (DecodeShape(32, 8, 1, 128, 1024), DecodeShape(16, 8, 1, 256, 4096))
CPU_PAGED_QUANTIZED = (DecodeShape(32, 8, 1, 128, 1024),)
CPU_KVQ4 = (DecodeShape(16, 8, 1, 256, 2048),)
CPU_MULTI_QUERY = (DecodeShape(32, 8, 4, 128, 1024),)
CPU_ARGMAX = (ArgmaxShape(1, 151936), ArgmaxShape(8, 32000))
