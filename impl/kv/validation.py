"""Argument checks shared by the caches. Each raises ValueError/TypeError naming the argument.

Every public mutator calls these before touching any state, so a refused call
leaves offset, block table, pool arrays and free list exactly as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from impl.checks import check_int

KV_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def check_array(name: str, value) -> mx.array:
    if not isinstance(value, mx.array):
        raise TypeError(f"{name} must be an mx.array, got {type(value).__name__}")
    return value


def check_dtype(name: str, dtype) -> mx.Dtype:
    if not isinstance(dtype, mx.Dtype):  # a str or NumPy dtype is the wrong kind (and mx.Dtype == None raises)
        raise TypeError(f"{name} must be an mx.Dtype (float32, float16 or bfloat16), got {type(dtype).__name__}")
    if dtype not in KV_DTYPES:
        raise ValueError(f"{name} must be one of float32, float16, bfloat16, got {dtype}")
    return dtype


@dataclass(frozen=True)
class KvGeometry:
    """What an append's K/V pair looks like: [batch, heads, tokens, head_dim] / [.., v_head_dim]."""

    batch: int
    num_kv_heads: int
    tokens: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype


def kv_geometry(keys, values) -> KvGeometry:
    """Validate one K/V pair on its own: 4-D, same batch/heads/tokens, same float dtype."""
    check_array("keys", keys)
    check_array("values", values)
    if keys.ndim != 4:
        raise ValueError(f"keys must be [batch, kv_heads, tokens, head_dim], got shape {tuple(keys.shape)}")
    if values.ndim != 4:
        raise ValueError(f"values must be [batch, kv_heads, tokens, v_head_dim], got shape {tuple(values.shape)}")
    b, h, n, d = keys.shape
    if tuple(values.shape[:3]) != (b, h, n):
        raise ValueError(f"values shape {tuple(values.shape)} does not match keys shape {tuple(keys.shape)} "
                         "in batch, kv heads or tokens")
    check_dtype("keys dtype", keys.dtype)
    if values.dtype != keys.dtype:
        raise ValueError(f"values dtype {values.dtype} differs from keys dtype {keys.dtype}")
    if h < 1:
        raise ValueError(f"keys must have at least one kv head, got shape {tuple(keys.shape)}")
    if d < 1 or values.shape[3] < 1:
        raise ValueError(f"head dims must be >= 1, got keys {d}, values {values.shape[3]}")
    return KvGeometry(b, h, n, d, values.shape[3], keys.dtype)


def check_same_geometry(geometry: KvGeometry, *, num_kv_heads: int, head_dim: int, v_head_dim: int,
                        dtype: mx.Dtype) -> None:
    """An append must match the geometry the cache was built with."""
    if geometry.num_kv_heads != num_kv_heads:
        raise ValueError(f"keys has {geometry.num_kv_heads} kv heads, the cache holds {num_kv_heads}")
    if geometry.head_dim != head_dim:
        raise ValueError(f"keys head_dim {geometry.head_dim} differs from the cache's head_dim {head_dim}")
    if geometry.v_head_dim != v_head_dim:
        raise ValueError(f"values head dim {geometry.v_head_dim} differs from the cache's v_head_dim {v_head_dim}")
    if geometry.dtype != dtype:
        raise ValueError(f"keys dtype {geometry.dtype} differs from the cache's dtype {dtype}")


def check_trim(tokens, offset: int) -> int:
    """``tokens`` as an int in [0, offset] (what a trim may drop), else an error naming it."""
    tokens = check_int("tokens", tokens, minimum=0)
    if tokens > offset:
        raise ValueError(f"tokens={tokens} exceeds the cache offset {offset}")
    return tokens
