"""The graph arm of multi-query causal decode: the partial and merge kernels in MLX ops.

``graph`` is the same algorithm in MLX ops: the same splits and BK-key
blocks, one block of every split per step, the same half roundings (Q * scale,
K, V, P) and -inf handling, float32 accumulation; its only liberty is the
order of float32 additions inside the 8x8 products (a matmul: its operands
are half values, exact in float32 and in the TF32 that MLX's CUDA backend uses
for float32 matmuls).
"""

from __future__ import annotations

import mlx.core as mx

from .launch import block_keys


def _half(x: mx.array) -> mx.array:
    """x rounded to half, held in float32 (the kernel's half(...) then its float use)."""
    return x.astype(mx.float16).astype(mx.float32)


def _graph(qs: mx.array, keys: mx.array, values: mx.array, splits: int) -> mx.array:
    """The partial + merge kernels in MLX ops (the module docstring says where they differ)."""
    _, h, L, d = qs.shape
    kvh, n = keys.shape[1], keys.shape[2]
    nq = (h // kvh) * L
    per = -(-n // splits)
    bk = block_keys(d)
    blocks = -(-per // bk)

    # Key of (split, block, slot): s * per + b * BK + j, live when below the split's end min(N, (s+1) * per).
    split_start = mx.arange(splits).reshape(splits, 1, 1) * per
    key = split_start + mx.arange(blocks).reshape(1, blocks, 1) * bk + mx.arange(bk).reshape(1, 1, bk)
    live = key < mx.minimum(split_start + per, n)  # [splits, blocks, bk]
    # A dead slot stages zeros (never read from the cache).
    gathered = mx.where(live, key, 0).reshape(-1)
    k = mx.where(live[..., None], _half(mx.take(keys[0], gathered, axis=1)).reshape(kvh, splits, blocks, bk, d), 0.0)
    v = mx.where(live[..., None], _half(mx.take(values[0], gathered, axis=1)).reshape(kvh, splits, blocks, bk, d), 0.0)

    # Query vector row = r * L + i of KV head hk is head hk * REP + r, query i.
    qf = _half(qs.astype(mx.float32)).reshape(kvh, 1, nq, d)  # [KVH, 1, NQ, D]
    qi = mx.arange(nq) % L
    limit = (n - L + qi).reshape(1, nq, 1)  # keys <= limit are visible to the row

    m = mx.full((kvh, splits, nq), -mx.inf, dtype=mx.float32)
    l = mx.zeros((kvh, splits, nq), dtype=mx.float32)
    o = mx.zeros((kvh, splits, nq, d), dtype=mx.float32)
    for b in range(blocks):
        s = qf @ k[:, :, b].swapaxes(-1, -2)  # [KVH, splits, NQ, bk]
        visible = live[None, :, b, None, :] & (key[None, :, b, None, :] <= limit[None])  # [1, splits, NQ, bk]
        s = mx.where(visible, s, -mx.inf)
        mnew = mx.maximum(m, s.max(axis=-1))
        corr = mx.where(mnew == -mx.inf, 1.0, mx.exp(m - mnew))
        w = mx.where(s == -mx.inf, 0.0, mx.exp(s - mnew[..., None]))
        l = l * corr + w.sum(axis=-1)
        m = mnew
        o = o * corr[..., None] + _half(w) @ v[:, :, b]  # P rounded to half for P . V

    # Merge the splits, skipping -inf partials.
    top = m.max(axis=1, keepdims=True)
    weight = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))
    num = (weight[..., None] * o).sum(axis=1)
    den = (weight * l).sum(axis=1)
    out = (num / den[..., None]).astype(qs.dtype)  # [KVH, NQ, D]
    return out.reshape(1, h, L, d)
