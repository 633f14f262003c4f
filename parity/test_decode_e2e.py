"""End-to-end decode parity through a tiny model, kernel "decode_e2e".

``parity.decoder.TinyDecoder`` (2 layers, GQA 8/2, head dim 64, RMSNorm,
RoPE, SwiGLU, vocab 512, fixed seeded weights) greedily decodes ``STEPS`` =
129 tokens (one prefill, then 128 one-token steps) in float32 and bfloat16,
from a 20-token prompt (block size 16, and 5 for the gather path) and from a
6-token prompt (block size 4) whose prefill the direct kernel takes itself.
Each paged pool starts with room for the prompt and grows during decode.
Paths (gate ``case``):

* ``dense``: ``KVCache`` + ``mx.fast.scaled_dot_product_attention`` +
  ``mx.argmax``: the reference stream and logits.
* ``gather-*``: ``PagedKVCache(direct=False)``, whose ``update_and_fetch``
  gathers the blocks. Free-running; the seed's promise ("identical bytes to
  what a plain KVCache would have fetched, so the paged path is gated
  bit-exact, not KL-tolerated"): tokens ``gate.equal``, every step's logits
  ``gate.bit_exact``.
* ``direct-*``: ``PagedKVCache(direct=True)``: decode steps (and prefills of
  n <= 8) go through ``impl.paged_attention.paged_attention`` (per arm),
  greedy choices through ``impl.normalized_argmax.normalized_argmax`` (the
  product's sampler). Another summation order, so KL-gated against dense;
  greedy choices ``gate.equal`` on every step that is not a near tie.
* ``q{bits}g{group}-control`` / ``-direct``: affine KV4/KV8 pools through the
  control (gather + ``mx.dequantize`` + SDPA) and the direct kernel: KL
  against dense within the quantization bound, agreement recorded
  (``gate.finding``), and direct against control within the rounding bound.

Teacher forcing: every path except ``gather`` is fed the dense stream's
tokens, so a near tie that flips one greedy choice cannot make the streams
diverge; each step's logits and choice are compared with dense's at the same
prefix. A path whose teacher-forced choices all equal the dense stream would
have produced that stream free-running (induction over the steps).

KL limits come from probes of this very model (``parity.decoder``): the
largest per-step KL that a perturbation of a stated size causes, teacher-forced.

* rounding probe: every attention output element of the control path
  (dense, or the quantized pool's gather path) moved +- (one model-dtype ULP
  + (Dk + L) float32 ULPs) at its row's largest |o|: one rounding of the
  output plus the first-order bound of float32 summation over the Dk-term
  dot products and the L-term value sums, the deviation any correct kernel
  with a different summation order may show. Direct limit: ``KL_FACTOR`` (4)
  times the probe's KL: FlashAttention's factor 2 in amplitude, squared since
  KL ~ 0.5 Var_p(delta logits) is quadratic in the perturbation. On a
  quantized pool the probe also re-rounds later layers' K/V to neighbouring
  codes, as a direct kernel's rounding does.
* quantization probe: every stored K/V element of the dense model moved
  +- step/2 of its affine group (step = (max - min) / (2^bits - 1)):
  round-to-nearest's largest error on every element at once. Quantized limit:
  (sqrt(KL_quant) + sqrt(direct-vs-control limit))^2, the two perturbations
  added as amplitudes.

A deliberately broken direct path (the causal end off by one: the last key
dropped) must fail the direct KL gate; its failure goes to a private sink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx
import numpy as np
import pytest

from impl import arms as arm_registry
from impl.kv import DIRECT_MAX_QUERIES, PagedAttentionView, Quantization, pool_blocks_for
from impl.normalized_argmax import normalized_argmax
from parity.decoder import (Decode, DecoderConfig, QuantizationProbeCache, RoundingProbeCache, TinyDecoder, decode,
                            dense_caches, entropy, paged_caches, to_f64, top2_margin,
                            top2_probability_gap, ulp_at)
from parity.gates import GateFailure
from reference import metrics

KERNEL = "decode_e2e"
DTYPES = ["float32", "bfloat16"]
MX_DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16}
CONFIG = DecoderConfig()
STEPS = 129  # the prefill's token + 128 one-token decode steps


@dataclass(frozen=True)
class Scenario:
    """A prompt and the paged caches' geometry: the pool holds the prompt and must grow during decode."""

    prompt_len: int
    block_size: int
    capacity: int  # capacity_tokens of each PagedKVCache

    @property
    def id(self) -> str:
        return f"p{self.prompt_len}-bs{self.block_size}"

    @property
    def prompt(self) -> tuple[int, ...]:
        return prompt_tokens(self.prompt_len)

    @property
    def length(self) -> int:
        """Tokens in each cache at the end."""
        return self.prompt_len + STEPS - 1


# MAIN: a 20-token prefill (n > 8: the control path even for direct caches) crossing block edge 16; decode
# crosses 32, 48, ..., 144 (64 and 128 are also kernel partition edges: up to 3 partitions to merge),
# growing the pool 2 -> 3 -> 5 -> 8 -> 12 blocks.
MAIN = Scenario(20, 16, 32)
# SHORT: a 6-token prefill that the direct kernel takes itself (n <= 8, causal), crossing block edge 4.
SHORT = Scenario(6, 4, 8)
SCENARIOS = [MAIN, SHORT, Scenario(20, 5, 32)]  # block size 5: odd, an edge every few steps
DIRECT_SCENARIOS = [MAIN, SHORT]
QUANTIZATIONS = [Quantization(4, 32), Quantization(4, 64), Quantization(8, 64)]
KL_FACTOR = 4.0  # FlashAttention's factor 2 in amplitude, squared (KL is quadratic in the perturbation)
# One ULP at 1 (2^-mantissa bits): the rounding probe moves outputs by one model-dtype ULP + Dk + L float32 ULPs.
EPSILON = {"float32": 2.0**-23, "bfloat16": 2.0**-7}
PROBE_SEED = 1000


def prompt_tokens(n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(7).integers(0, CONFIG.vocab, n))


def quant_id(q: Quantization) -> str:
    return f"q{q.bits}g{q.group_size}"


# --- runs (cached per worker: each is a deterministic function of its key) --


@lru_cache(maxsize=None)
def model(dtype: str) -> TinyDecoder:
    return TinyDecoder(CONFIG, MX_DTYPES[dtype])


@lru_cache(maxsize=None)
def reference(dtype: str, prompt_len: int) -> Decode:
    """The dense path, free-running: the reference stream."""
    m = model(dtype)
    return decode(m, prompt_tokens(prompt_len), STEPS, dense_caches(m))


def forced(dtype: str, prompt_len: int, caches: list, arm: str | None = None, sample=None) -> Decode:
    """A teacher-forced run fed the dense stream."""
    kwargs = {} if sample is None else {"sample": sample}
    return decode(model(dtype), prompt_tokens(prompt_len), STEPS, caches, arm=arm,
                  forced=reference(dtype, prompt_len).chosen, **kwargs)


def paged(dtype: str, scenario: Scenario, *, direct: bool, quantization: Quantization | None = None) -> list:
    return paged_caches(model(dtype), capacity_tokens=scenario.capacity, block_size=scenario.block_size,
                        direct=direct, quantization=quantization)


def step_kl(ref: Decode, run: Decode) -> np.ndarray:
    """KL(ref || run) of every step's next-token distribution (float64)."""
    return metrics.kl_divergence(ref.logits, run.logits)


@lru_cache(maxsize=None)
def control(dtype: str, scenario: Scenario, quantization: Quantization | None) -> Decode:
    """The numerical control of a path: dense (free-running), or a quantized pool's gather path (teacher-forced)."""
    if quantization is None:
        return reference(dtype, scenario.prompt_len)
    return forced(dtype, scenario.prompt_len, paged(dtype, scenario, direct=False, quantization=quantization))


def rounding_ulps(dtype: str, scenario: Scenario) -> float:
    """The rounding probe's size in model-dtype ULPs: one rounding + (Dk + L) float32 roundings."""
    return 1.0 + (CONFIG.head_dim + scenario.length) * EPSILON["float32"] / EPSILON[dtype]


@lru_cache(maxsize=None)
def rounding_probe(dtype: str, scenario: Scenario, quantization: Quantization | None) -> np.ndarray:
    """Per-step KL(control || control with every attention output nudged by ``rounding_ulps``)."""
    ulps = rounding_ulps(dtype, scenario)
    inner = (paged(dtype, scenario, direct=False, quantization=quantization) if quantization is not None
             else dense_caches(model(dtype)))
    caches = [RoundingProbeCache(cache, ulps, PROBE_SEED + i) for i, cache in enumerate(inner)]
    return step_kl(control(dtype, scenario, quantization), forced(dtype, scenario.prompt_len, caches))


@lru_cache(maxsize=None)
def quantization_probe(dtype: str, scenario: Scenario, quantization: Quantization) -> Decode:
    """The dense model, teacher-forced, with step/2 noise on every stored K/V element."""
    caches = [QuantizationProbeCache(quantization, PROBE_SEED + i) for i in range(CONFIG.layers)]
    return forced(dtype, scenario.prompt_len, caches)


def direct_limit(dtype: str, scenario: Scenario, quantization: Quantization | None = None) -> tuple[float, str]:
    """KL limit of a direct path against its control (dense, or the same quantized pool's gather path)."""
    probe = float(rounding_probe(dtype, scenario, quantization).max())
    path = "dense model" if quantization is None else f"{quant_id(quantization)} control path"
    why = (f"{KL_FACTOR:g} x {probe:.3g}, the largest per-step KL of this {dtype} {path} (teacher-forced, {STEPS} "
           f"steps) when every attention output element of every layer and step moves +-"
           f"{rounding_ulps(dtype, scenario):.4g} {dtype} ULPs at its row's largest |o| (random signs): one {dtype} "
           f"rounding plus Dk + L = {CONFIG.head_dim + scenario.length} float32 roundings (the first-order bound of "
           "float32 summation over the score dot products and the value sums), what a correct kernel with another "
           f"summation order may deviate by. {KL_FACTOR:g} = FlashAttention's factor 2 in amplitude, squared: "
           "KL ~ 0.5 Var_p(delta logits) is quadratic in the perturbation")
    return KL_FACTOR * probe, why


def quantized_limit(dtype: str, scenario: Scenario, quantization: Quantization) -> tuple[float, str]:
    """KL limit of a quantized pool's path against the dense model."""
    quant = float(step_kl(reference(dtype, scenario.prompt_len), quantization_probe(dtype, scenario,
                                                                                     quantization)).max())
    rounding, _ = direct_limit(dtype, scenario, quantization)
    limit = (math.sqrt(quant) + math.sqrt(rounding)) ** 2
    why = (f"(sqrt(KL_q) + sqrt(KL_r))^2 = {limit:.3g}: KL_q = {quant:.3g}, the largest per-step KL of this {dtype} "
           f"model (teacher-forced) when every stored K/V element moves +- step/2 of its {quantization.bits}-bit "
           f"group of {quantization.group_size} (step = (max - min) / {2 ** quantization.bits - 1}), the largest "
           f"error of round-to-nearest affine quantization, on every element at once; KL_r = {rounding:.3g}, the "
           "rounding allowance of a direct kernel on this pool (the direct-vs-control limit). Added as amplitudes: "
           "sqrt(KL) ~ sqrt(0.5 Var_p(delta logits)) is a norm of the logit perturbation")
    return limit, why


def product_sampler(arm: str):
    """The product's greedy sampler on the product's path: normalized argmax on the same arm."""
    return lambda logits: normalized_argmax(logits, arm=arm)


# --- the model --------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_is_peaked(gate, dtype):
    """The LM head (logit sd 8, see parity.decoder) makes next-token distributions peaked, not uniform."""
    ref = reference(dtype, MAIN.prompt_len)
    h = entropy(ref.logits)
    ceiling = 0.5 * math.log(CONFIG.vocab)
    assert h[0] < ceiling, f"first-step entropy {h[0]:.3f} nats is not below log(vocab) / 2 = {ceiling:.3f}"
    distinct = len(set(ref.chosen.tolist()))
    assert distinct > STEPS // 2, f"the greedy stream loops ({distinct} distinct tokens): a weak decode test"
    gate.finding(f"tiny decoder ({dtype}): next-token entropy", {
        "first_step_nats": float(h[0]), "mean_nats": float(h.mean()), "max_nats": float(h.max()),
        "log_vocab": math.log(CONFIG.vocab), "distinct_tokens": distinct,
        "min_top2_margin": float(top2_margin(ref.logits).min())}, kernel=KERNEL)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_sdpa_is_the_unfused_graph(gate, dtype):
    """On the CPU, MLX 0.32's SDPA equals scores -> softmax(precise) -> @ V, each in the input dtype: recorded.

    So the dense bfloat16 reference rounds scores and probabilities to
    bfloat16 too, while the direct kernel keeps them in float32: in bfloat16
    the two differ by a few roundings on some elements (what the rounding
    probe's one-ULP-everywhere perturbation stands for). That explains the
    measured KL; no limit depends on it (they come from probes of this model),
    so an MLX whose CPU SDPA is fused (or otherwise rounded) is recorded, not failed.
    """
    if arm_registry.current_device_name() != "cpu":
        pytest.skip("a fact about MLX's CPU backend; this run uses the GPU")
    m, rng = model(dtype), np.random.default_rng(3)
    group = CONFIG.q_heads // CONFIG.kv_heads

    def draw(heads: int, tokens: int) -> mx.array:
        return mx.array(rng.standard_normal((1, heads, tokens, CONFIG.head_dim)).astype(np.float32)).astype(m.dtype)

    q, k, v = draw(CONFIG.q_heads, 1), draw(CONFIG.kv_heads, MAIN.length), draw(CONFIG.kv_heads, MAIN.length)
    fused = mx.fast.scaled_dot_product_attention(q, k, v, scale=m.scale)
    scores = (q * mx.array(m.scale, m.dtype)) @ mx.repeat(k, group, axis=1).swapaxes(-1, -2)
    graph = mx.softmax(scores, axis=-1, precise=True) @ mx.repeat(v, group, axis=1)
    a, b = metrics.to_numpy(fused), metrics.to_numpy(graph)
    bytes_a, bytes_b = (np.ascontiguousarray(x).view(np.uint8).reshape(x.shape + (-1,)) for x in (a, b))
    differ = int(np.count_nonzero(np.any(bytes_a != bytes_b, axis=-1)))
    gate.finding(f"MLX CPU SDPA ({dtype}) " + ("equals its unfused graph in the input dtype, bit for bit" if not differ
                                              else "differs from its unfused graph in the input dtype"),
                 {"mlx": mx.__version__, "elements differing": differ, "elements": int(a.size),
                  "max |fused - graph|": float(np.max(np.abs(metrics.as_f64(a) - metrics.as_f64(b)))),
                  "graph": "softmax(q * scale @ k^T, precise=True) @ v, each op in the input dtype"}, kernel=KERNEL)


# --- gather: bit-exact ------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_path_is_bit_exact_with_dense(gate, dtype, scenario):
    caches = paged(dtype, scenario, direct=False)
    run = decode(model(dtype), scenario.prompt, STEPS, caches)  # free-running: the stream itself must match
    check_growth(caches, scenario)
    ref, case = reference(dtype, scenario.prompt_len), f"gather-{scenario.id}"
    gate.equal(run.chosen, ref.chosen, kernel=KERNEL, case=case,
               what=f"free-running greedy stream of {STEPS} tokens, paged gather vs dense KVCache")
    gate.bit_exact(run.logits, ref.logits, kernel=KERNEL, case=case,
                   what="every step's logits: the gather fetches the bytes a dense KVCache would (seed 001)")


def check_growth(caches: list, scenario: Scenario) -> None:
    """The scenario's premise: the pool held the prompt without growing, then grew during decode."""
    initial = max(1, pool_blocks_for(scenario.capacity, scenario.block_size))
    assert pool_blocks_for(scenario.prompt_len, scenario.block_size) <= initial < caches[0].pool.num_blocks, \
        f"{scenario.id}: the pool must hold the prompt and grow during decode"
    blocks = pool_blocks_for(scenario.length, scenario.block_size)
    assert all(c.offset == scenario.length and len(c.block_table) == blocks for c in caches)


# --- direct: KL-gated -------------------------------------------------------


@pytest.mark.parametrize("scenario", DIRECT_SCENARIOS, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_path_is_kl_close_to_dense(arm, gate, dtype, scenario, monkeypatch):
    import impl.paged_attention as kernel

    launches, original = [], kernel.paged_attention

    def counted(q, *args, **kwargs):
        launches.append(q.shape[2])
        return original(q, *args, **kwargs)

    monkeypatch.setattr(kernel, "paged_attention", counted)  # view.attend imports it at call time
    caches = paged(dtype, scenario, direct=True)
    run = forced(dtype, scenario.prompt_len, caches, arm=arm, sample=product_sampler(arm))
    check_growth(caches, scenario)
    case = f"direct-{scenario.id}"
    prefill = [scenario.prompt_len] * CONFIG.layers if scenario.prompt_len <= DIRECT_MAX_QUERIES else []
    gate.equal(np.array(launches), np.array(prefill + [1] * (CONFIG.layers * (STEPS - 1))), kernel=KERNEL,
               case=case, what=(f"query rows of each direct-kernel launch: one per layer and decode step, and the "
                                f"prefill's when n <= {DIRECT_MAX_QUERIES} (longer prefills take the control path)"))
    limit, why = direct_limit(dtype, scenario)
    gate.kl(reference(dtype, scenario.prompt_len).logits, run.logits, limit=limit, why=why, kernel=KERNEL, case=case)
    check_tokens(gate, dtype, scenario, run, case)


def check_tokens(gate, dtype: str, scenario: Scenario, run: Decode, case: str) -> None:
    """Teacher-forced greedy choices equal dense's on every step the KL limit leaves no room to flip.

    Pinsker: TV(p, q) <= sqrt(KL(p || q) / 2). Making the dense runner-up b
    at least as likely as the top token a moves at least (p_a - p_b) / 2 of
    probability, so a path within the KL limit can change the greedy choice
    only where p_a - p_b <= sqrt(2 * limit). Those steps (near ties, where
    rounding may legitimately flip the choice) are left out of the gate and
    reported; on the others a different choice means the sampler or the
    logits' order is wrong.
    """
    ref = reference(dtype, scenario.prompt_len)
    limit, _ = direct_limit(dtype, scenario)
    gap = top2_probability_gap(ref.logits)
    room = math.sqrt(2 * limit)
    decided = gap > room
    gate.equal(run.chosen[decided], ref.chosen[decided], kernel=KERNEL, case=case,
               what=(f"teacher-forced greedy choice vs the dense stream on the {int(decided.sum())} of {STEPS} steps "
                     f"whose dense top-2 probability gap exceeds sqrt(2 x KL limit) = {room:.3g} (Pinsker: a path "
                     "within the KL limit cannot swap the top two there); the other steps are near ties that "
                     "rounding may flip"))
    flipped = np.flatnonzero(run.chosen != ref.chosen)
    gate.finding(f"{case} ({dtype}): greedy agreement with dense, teacher-forced", {
        "agreement": float(np.mean(run.chosen == ref.chosen)), "steps": STEPS, "flipped_steps": flipped.tolist(),
        "dense_logit_margin_at_flips": top2_margin(ref.logits)[flipped].tolist(),
        "dense_probability_gap_at_flips": gap[flipped].tolist(), "near_tie_steps": int((~decided).sum()),
        "near_tie_gap": room, "kl_max": float(step_kl(ref, run).max())}, kernel=KERNEL)


@pytest.mark.parametrize("dtype", DTYPES)
def test_off_by_one_direct_path_fails_the_kl_gate(arm, make_gate, dtype, monkeypatch):
    """The direct gate's limit catches a causal end off by one (each decode query misses its own key)."""
    from impl.paged_attention import paged_attention

    limit, why = direct_limit(dtype, MAIN)  # probes first: they must not see the broken attend
    original = PagedAttentionView.attend

    def drops_last_key(self, q, scale, mask=None, arm=None):
        if self.uses_direct(q.shape[2], mask):
            return paged_attention(q, self, self.block_table, self.length - 1, scale=scale, arm=arm)
        return original(self, q, scale, mask, arm)

    monkeypatch.setattr(PagedAttentionView, "attend", drops_last_key)
    run = forced(dtype, MAIN.prompt_len, paged(dtype, MAIN, direct=True), arm=arm)
    records = []
    broken = make_gate(sink=records.append, kernel=KERNEL, arm=arm)
    with pytest.raises(GateFailure):
        broken.kl(reference(dtype, MAIN.prompt_len).logits, run.logits, limit=limit, why=why,
                  case=f"direct-{MAIN.id}-off-by-one")
    assert len(records) == 1 and not records[0]["passed"] and records[0]["measured"] > limit


# --- quantized pools --------------------------------------------------------


@pytest.mark.parametrize("quantization", QUANTIZATIONS, ids=quant_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_control_path(gate, dtype, quantization):
    run = control(dtype, MAIN, quantization)
    case = f"{quant_id(quantization)}-control"
    limit, why = quantized_limit(dtype, MAIN, quantization)
    gate.kl(reference(dtype, MAIN.prompt_len).logits, run.logits, limit=limit, why=why, kernel=KERNEL, case=case)
    record_agreement(gate, dtype, quantization, run, case)


@pytest.mark.parametrize("quantization", QUANTIZATIONS, ids=quant_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_direct_path(arm, gate, dtype, quantization):
    run = forced(dtype, MAIN.prompt_len, paged(dtype, MAIN, direct=True, quantization=quantization), arm=arm,
                 sample=product_sampler(arm))
    case = f"{quant_id(quantization)}-direct"
    limit, why = quantized_limit(dtype, MAIN, quantization)
    gate.kl(reference(dtype, MAIN.prompt_len).logits, run.logits, limit=limit, why=why, kernel=KERNEL, case=case)
    record_agreement(gate, dtype, quantization, run, case)
    # Against the seed's control on the same quantized pool only the kernel's rounding separates them (and
    # what it does downstream: a later layer's K/V may round to a neighbouring code, which the probe shares).
    limit, why = direct_limit(dtype, MAIN, quantization)
    gate.kl(control(dtype, MAIN, quantization).logits, run.logits, limit=limit,
            why=f"direct vs the control on the same pool: {why}", kernel=KERNEL, case=f"{case}-vs-control")


def record_agreement(gate, dtype: str, quantization: Quantization, run: Decode, case: str) -> None:
    ref, probe = reference(dtype, MAIN.prompt_len), quantization_probe(dtype, MAIN, quantization)
    kl, probe_kl = step_kl(ref, run), step_kl(ref, probe)
    gate.finding(f"{case} ({dtype}): KL and greedy agreement against the dense model, teacher-forced", {
        "agreement": float(np.mean(run.chosen == ref.chosen)), "steps": STEPS,
        "flipped_steps": np.flatnonzero(run.chosen != ref.chosen).tolist(),
        "kl_max": float(kl.max()), "kl_mean": float(kl.mean()), "probe_kl_max": float(probe_kl.max()),
        "probe_agreement": float(np.mean(probe.chosen == ref.chosen))}, kernel=KERNEL)


# --- the helpers themselves -------------------------------------------------


def test_rounding_probe_moves_each_element_by_the_stated_ulps():
    rng = np.random.default_rng(5)
    out = mx.array(rng.standard_normal((1, 8, 3, 64)).astype(np.float32)).astype(mx.bfloat16)
    probe = RoundingProbeCache(dense_caches(model("bfloat16"))[0], 1, seed=0)
    moved = np.abs(to_f64(probe.nudge(out)) - to_f64(out))
    want = ulp_at(np.abs(to_f64(out)).max(axis=-1, keepdims=True), mx.bfloat16)
    # Exact unless the move crosses into a binade whose spacing the moved value is not a multiple of: a bfloat16
    # value within one step of a power of two, ~2 / 128 of a binade's values (8-bit significand), so ~98% are
    # exact in expectation (this seed: 98.2%); 0.95 sits 10 standard deviations of a 1536-element draw below it.
    assert np.mean(moved == want) > 0.95 and np.all((moved >= want / 2) & (moved <= 2 * want))


def test_quantization_probe_noise_is_half_a_step():
    q = Quantization(4, 32)
    rows = mx.array(np.random.default_rng(6).standard_normal((1, 2, 5, 64)).astype(np.float32))
    noisy = to_f64(QuantizationProbeCache(q, seed=0).noisy(rows)).reshape(1, 2, 5, 2, 32)
    groups = to_f64(rows).reshape(1, 2, 5, 2, 32)
    step = (groups.max(axis=-1, keepdims=True) - groups.min(axis=-1, keepdims=True)) / 15
    # The noise is formed in float32 (u = 6e-8): a few roundings of values of the step's size; 1e-6 is 16 ulps.
    np.testing.assert_allclose(np.abs(noisy - groups), np.broadcast_to(step / 2, groups.shape), rtol=1e-6)


def test_decoder_refuses_bad_arguments():
    m = model("float32")
    with pytest.raises(ValueError, match="q_heads"):
        DecoderConfig(q_heads=6, kv_heads=4)
    with pytest.raises(ValueError, match="dtype"):
        TinyDecoder(CONFIG, mx.float16)
    with pytest.raises(ValueError, match="steps"):
        decode(m, MAIN.prompt, 0, dense_caches(m))
    with pytest.raises(ValueError, match="forced"):
        decode(m, MAIN.prompt, 4, dense_caches(m), forced=[1])
    with pytest.raises(ValueError, match="caches"):
        m(mx.array([1]), dense_caches(m)[:1])
    with pytest.raises(ValueError, match="ulps"):
        RoundingProbeCache(dense_caches(m)[0], 0, seed=0)
