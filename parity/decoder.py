"""A tiny decoder-only transformer and its greedy decode loop, for end-to-end decode parity.

A test helper (no tests here): ``parity/test_decode_e2e.py`` decodes the same
prompt through several KV caches and gates the per-step logits and tokens.

Model (``TinyDecoder``; weights fixed by ``DecoderConfig.seed``, drawn with
NumPy, rounded to float32, then to the model dtype)::

    x = embed[tokens]                                    # N(0, 1)
    for each layer:
        h = rms_norm(x);  q, k, v = h @ wq, h @ wk, h @ wv   # GQA: Hq query, Hkv kv heads
        q, k = rope(q, k, offset=cache.offset)              # mx.fast.rope, base 10000
        x = x + attention(q, k, v, cache) @ wo
        h = rms_norm(x);  x = x + (silu(h @ w_gate) * (h @ w_up)) @ w_down   # SwiGLU
    logits = rms_norm(x) @ head                          # head ~ N(0, logit_std^2 / dim)

Projections are N(0, 1 / fan_in), so every branch keeps unit RMS. The final
``rms_norm`` gives unit-RMS rows, so with the head drawn N(0, logit_std^2 /
dim) each logit is ~N(0, logit_std^2): with ``logit_std = 8`` over 512 tokens
the top logit stands about 3 sd (~24) above the mean and the next-token
distributions are peaked, not uniform (about 1 nat of entropy against
log(512) = 6.2; the tests check the first step), so most greedy choices are
decided by clear margins; the few near ties are what teacher forcing is for.
Every op runs in the model dtype (float32 or bfloat16), as an MLX model would.

Attention goes through the cache, the way the seed's model code does:

* caches whose ``attention_state`` is not None (``PagedKVCache`` with
  ``direct=True`` or a quantized pool) append and attend through the view:
  ``cache.append_and_fetch(k, v).attend(q, scale, mask, arm)``;
* the others (dense ``KVCache``, plain ``PagedKVCache(direct=False)``) fetch
  K/V with ``update_and_fetch`` and call ``mx.fast.scaled_dot_product_attention``.

``mask = cache.make_mask(n)`` before appending: "causal" for the prefill,
None for one decode token.

``decode`` prefills the prompt, then feeds one token per step. With
``forced`` it is teacher-forced: step t feeds ``forced[t - 1]`` instead of its
own previous choice, so every path sees the same prefix and its per-step
logits and greedy choices can be compared step by step even where a near tie
would flip a token (which would make free-running streams diverge). If a
teacher-forced path's own choice equals the forced token at every step, its
free-running stream is that same stream (by induction over the steps).

Probes inject a perturbation of a stated size so a test can measure how much
KL it causes in this very model and derive its KL limits from that:
``RoundingProbeCache`` wraps a cache and nudges its attention output by a
number of ULPs; ``QuantizationProbeCache`` is a dense cache that stores K/V
plus noise of half an affine quantization step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from impl.kv import KVCache, PagedKVCache, Quantization

__all__ = [
    "DecoderConfig", "Decode", "QuantizationProbeCache", "RoundingProbeCache", "TinyDecoder", "decode",
    "dense_caches", "entropy", "native_argmax", "paged_caches", "to_f64", "top2_margin",
    "top2_probability_gap", "ulp_at",
]

MODEL_DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16}


@dataclass(frozen=True)
class DecoderConfig:
    """Geometry and seed of the tiny decoder (defaults: the model the e2e tests use)."""

    vocab: int = 512
    dim: int = 128
    layers: int = 2
    q_heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    hidden: int = 256
    rope_base: float = 10_000.0
    logit_std: float = 8.0  # std of each logit (LM head N(0, logit_std^2 / dim) on unit-RMS rows)
    norm_eps: float = 1e-5
    seed: int = 0

    def __post_init__(self):
        for name in ("vocab", "dim", "layers", "q_heads", "kv_heads", "head_dim", "hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"q_heads={self.q_heads} must be a multiple of kv_heads={self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if not self.logit_std > 0:
            raise ValueError(f"logit_std must be positive, got {self.logit_std!r}")


@dataclass(frozen=True)
class Layer:
    attn_norm: mx.array
    wq: mx.array
    wk: mx.array
    wv: mx.array
    wo: mx.array
    mlp_norm: mx.array
    w_gate: mx.array
    w_up: mx.array
    w_down: mx.array


class TinyDecoder:
    """The model of the module docstring, in ``dtype`` (mx.float32 or mx.bfloat16)."""

    def __init__(self, config: DecoderConfig = DecoderConfig(), dtype=mx.float32):
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        if dtype not in MODEL_DTYPES.values():
            raise ValueError(f"dtype must be mx.float32 or mx.bfloat16, got {dtype}")
        self.config, self.dtype = config, dtype
        rng = np.random.default_rng(config.seed)
        c = config

        def weight(rows: int, cols: int, std: float) -> mx.array:
            return mx.array((rng.standard_normal((rows, cols)) * std).astype(np.float32)).astype(dtype)

        def ones(n: int) -> mx.array:
            return mx.ones((n,), dtype)

        self.embed = weight(c.vocab, c.dim, 1.0)
        q_width, kv_width = c.q_heads * c.head_dim, c.kv_heads * c.head_dim
        self.layers = [
            Layer(attn_norm=ones(c.dim), wq=weight(c.dim, q_width, c.dim ** -0.5),
                  wk=weight(c.dim, kv_width, c.dim ** -0.5), wv=weight(c.dim, kv_width, c.dim ** -0.5),
                  wo=weight(q_width, c.dim, q_width ** -0.5), mlp_norm=ones(c.dim),
                  w_gate=weight(c.dim, c.hidden, c.dim ** -0.5), w_up=weight(c.dim, c.hidden, c.dim ** -0.5),
                  w_down=weight(c.hidden, c.dim, c.hidden ** -0.5))
            for _ in range(c.layers)]
        self.final_norm = ones(c.dim)
        self.head = weight(c.dim, c.vocab, c.logit_std / math.sqrt(c.dim))
        self.scale = c.head_dim ** -0.5

    def __call__(self, tokens: mx.array, caches: Sequence, arm: str | None = None) -> mx.array:
        """Logits [vocab] (model dtype) after the last of ``tokens`` [n], appending them to ``caches``."""
        if len(caches) != self.config.layers:
            raise ValueError(f"caches must hold one cache per layer ({self.config.layers}), got {len(caches)}")
        c = self.config
        x = self.embed[tokens][None]  # [1, n, dim]
        for layer, cache in zip(self.layers, caches):
            h = mx.fast.rms_norm(x, layer.attn_norm, c.norm_eps)
            x = x + self.attention(layer, h, cache, arm)
            h = mx.fast.rms_norm(x, layer.mlp_norm, c.norm_eps)
            x = x + (silu(h @ layer.w_gate) * (h @ layer.w_up)) @ layer.w_down
        last = mx.fast.rms_norm(x[:, -1], self.final_norm, c.norm_eps)
        return (last @ self.head)[0]

    def attention(self, layer: Layer, h: mx.array, cache, arm: str | None) -> mx.array:
        c, n = self.config, h.shape[1]

        def heads(y: mx.array, count: int) -> mx.array:
            return y.reshape(1, n, count, c.head_dim).transpose(0, 2, 1, 3)

        q, k, v = heads(h @ layer.wq, c.q_heads), heads(h @ layer.wk, c.kv_heads), heads(h @ layer.wv, c.kv_heads)
        offset = cache.offset
        q = mx.fast.rope(q, c.head_dim, traditional=False, base=c.rope_base, scale=1.0, offset=offset)
        k = mx.fast.rope(k, c.head_dim, traditional=False, base=c.rope_base, scale=1.0, offset=offset)
        mask = cache.make_mask(n)  # before the append: it depends on the offset
        state = getattr(cache, "attention_state", None)
        if state is not None:
            out = state.append_and_fetch(k, v).attend(q, self.scale, mask, arm)
        else:
            keys, values = cache.update_and_fetch(k, v)
            out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale, mask=mask)
        return out.transpose(0, 2, 1, 3).reshape(1, n, c.q_heads * c.head_dim) @ layer.wo


def silu(x: mx.array) -> mx.array:
    return x * mx.sigmoid(x)


# --- decoding ---------------------------------------------------------------


def native_argmax(logits: mx.array) -> mx.array:
    """MLX's plain greedy choice: ``mx.argmax`` of the logits."""
    return mx.argmax(logits, axis=-1)


@dataclass(frozen=True)
class Decode:
    """One decode run.

    ``logits`` [steps, vocab] (model dtype): row t is the distribution of token
    t, after the prompt (t = 0) or after feeding token t - 1. ``chosen``
    [steps] int64: the path's own greedy choice at each step. ``fed`` [steps]:
    the tokens it generated (= ``chosen`` when free-running, = ``forced`` when
    teacher-forced). ``caches``: the caches after the run.
    """

    logits: mx.array
    chosen: np.ndarray
    fed: np.ndarray
    caches: list


def decode(model: TinyDecoder, prompt: Sequence[int], steps: int, caches: list, *, arm: str | None = None,
           forced: Sequence[int] | None = None, sample: Callable[[mx.array], mx.array] = native_argmax) -> Decode:
    """Greedy decoding of ``steps`` tokens after ``prompt`` through ``caches`` (one per layer).

    Step 0 prefills the whole prompt; steps 1..steps-1 feed one token each
    (the previous choice, or ``forced[t - 1]`` when teacher-forced).
    ``sample`` maps logits [vocab] to a token id (default ``mx.argmax``).
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if len(prompt) < 1:
        raise ValueError("prompt must hold at least one token")
    if forced is not None and len(forced) < steps - 1:
        raise ValueError(f"forced must hold at least steps - 1 = {steps - 1} tokens, got {len(forced)}")
    logits, chosen, fed = [], [], []
    feed = mx.array(list(prompt), dtype=mx.int32)
    for t in range(steps):
        row = model(feed, caches, arm)
        token = sample(row)
        mx.eval(row, token, *[a for cache in caches for a in cache.state()])
        logits.append(row)
        chosen.append(int(token.item()))
        teacher = forced is not None and t < len(forced)  # the last step's feed is never used
        fed.append(int(forced[t]) if teacher else chosen[-1])
        feed = mx.array([fed[-1]], dtype=mx.int32)
    return Decode(mx.stack(logits), np.array(chosen, np.int64), np.array(fed, np.int64), caches)


def dense_caches(model: TinyDecoder) -> list:
    """One dense ``KVCache`` per layer (the reference path)."""
    return [KVCache() for _ in range(model.config.layers)]


def paged_caches(model: TinyDecoder, *, capacity_tokens: int, block_size: int, direct: bool,
                 quantization: Quantization | None = None) -> list:
    """One ``PagedKVCache`` per layer."""
    return [PagedKVCache(capacity_tokens, block_size, direct=direct, quantization=quantization)
            for _ in range(model.config.layers)]


# --- metrics of a decode ----------------------------------------------------


def entropy(logits) -> np.ndarray:
    """Entropy (nats) of softmax(logits) per row, in float64."""
    z = np.asarray(to_f64(logits))
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -(np.exp(log_p) * log_p).sum(axis=-1)


def top2_margin(logits) -> np.ndarray:
    """Top logit minus the runner-up, per row (float64)."""
    z = np.sort(to_f64(logits), axis=-1)
    return z[..., -1] - z[..., -2]


def top2_probability_gap(logits) -> np.ndarray:
    """p(top token) - p(runner-up) under softmax(logits), per row (float64)."""
    z = to_f64(logits)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p = np.sort(p / p.sum(axis=-1, keepdims=True), axis=-1)
    return p[..., -1] - p[..., -2]


def to_f64(x) -> np.ndarray:
    if isinstance(x, mx.array):
        return np.array(x.astype(mx.float32)).astype(np.float64)
    return np.asarray(x, dtype=np.float64)


# --- probes -----------------------------------------------------------------

MANTISSA_BITS = {mx.float32: 23, mx.bfloat16: 7}  # explicit significand bits: one ULP at 1 is 2^-bits


def ulp_at(magnitude: np.ndarray, dtype) -> np.ndarray:
    """One ULP of ``dtype`` (float32 / bfloat16) at ``|magnitude|`` (float64; normal numbers)."""
    _, exponent = np.frexp(np.abs(magnitude))  # |m| = f * 2^e, f in [0.5, 1)
    return np.ldexp(1.0, exponent - 1 - MANTISSA_BITS[dtype])


class _NudgedView:
    """What ``RoundingProbeCache.append_and_fetch`` returns: the inner cache's attention, then nudged."""

    def __init__(self, probe: "RoundingProbeCache", inner_view=None, keys=None, values=None):
        self.probe, self.inner_view, self.keys, self.values = probe, inner_view, keys, values

    def attend(self, q, scale, mask=None, arm=None):
        if self.inner_view is not None:
            out = self.inner_view.attend(q, scale, mask, arm)
        else:
            out = mx.fast.scaled_dot_product_attention(q, self.keys, self.values, scale=scale, mask=mask)
        return self.probe.nudge(out)


class RoundingProbeCache:
    """Wraps a cache; its attention output gets ``+- ulps`` ULPs at the row's largest element, per element.

    Every output element o[h, i, :] moves by ``ulps * ULP(max_d |o[h, i, d]|)``
    up or down at random (computed in float64, rounded back to the model
    dtype: in bfloat16 a whole number of ULPs at the row max survives the
    rounding exactly, except where the move crosses into a binade of wider
    spacing). It models a correct attention kernel that differs from
    the inner cache's attention by rounding: an absolute error at the scale
    of the row, on every element at once. Storage, offsets and masks are the
    inner cache's (a dense ``KVCache`` or a quantized ``PagedKVCache`` whose
    later layers then store K/V computed from the nudged outputs, as the
    direct kernel's would be). Deterministic for a given ``seed``.
    """

    def __init__(self, inner, ulps: float, seed: int):
        if isinstance(ulps, bool) or not isinstance(ulps, (int, float)) or not ulps > 0:
            raise ValueError(f"ulps must be a positive number, got {ulps!r}")
        if not all(hasattr(inner, name) for name in ("offset", "make_mask", "update_and_fetch", "state")):
            raise TypeError(f"inner must be a KV cache, got {type(inner).__name__}")
        self.inner, self.ulps, self.rng = inner, float(ulps), np.random.default_rng(seed)

    @property
    def offset(self) -> int:
        return self.inner.offset

    @property
    def attention_state(self) -> "RoundingProbeCache":
        return self

    def make_mask(self, tokens: int, window: int | None = None):
        return self.inner.make_mask(tokens, window)

    def state(self) -> list[mx.array]:
        return self.inner.state()

    def append_and_fetch(self, keys, values) -> _NudgedView:
        if getattr(self.inner, "attention_state", None) is not None:
            return _NudgedView(self, inner_view=self.inner.append_and_fetch(keys, values))
        k, v = self.inner.update_and_fetch(keys, values)
        return _NudgedView(self, keys=k, values=v)

    def nudge(self, out: mx.array) -> mx.array:
        rows = to_f64(out)
        amplitude = self.ulps * ulp_at(np.abs(rows).max(axis=-1, keepdims=True), out.dtype)
        signs = np.where(self.rng.random(rows.shape) < 0.5, -1.0, 1.0)
        return mx.array((rows + signs * amplitude).astype(np.float32)).astype(out.dtype)


class QuantizationProbeCache(KVCache):
    """A dense cache that stores K/V plus noise the size of an affine quantization step.

    Each group of ``group_size`` values along the head dim gets
    ``+- step / 2`` per element (random signs), ``step = (max - min) / (2^bits - 1)``
    of the group: the largest error round-to-nearest affine quantization
    makes, on every element at once (the real error is spread over
    [-step/2, step/2]). Deterministic for a given ``seed``.
    """

    def __init__(self, quantization: Quantization, seed: int):
        super().__init__()
        if not isinstance(quantization, Quantization):
            raise TypeError(f"quantization must be a Quantization, got {type(quantization).__name__}")
        self.quantization, self.rng = quantization, np.random.default_rng(seed)

    def noisy(self, x: mx.array) -> mx.array:
        q = self.quantization
        rows = to_f64(x)
        groups = rows.reshape(*rows.shape[:-1], -1, q.group_size)
        step = (groups.max(axis=-1, keepdims=True) - groups.min(axis=-1, keepdims=True)) / (2 ** q.bits - 1)
        signs = np.where(self.rng.random(groups.shape) < 0.5, -1.0, 1.0)
        return mx.array((groups + signs * step / 2).reshape(rows.shape).astype(np.float32)).astype(x.dtype)

    def update_and_fetch(self, keys, values):
        return super().update_and_fetch(self.noisy(keys), self.noisy(values))
