"""Smoke check before the full run: each kernel body compiles with mx.fast.cuda_kernel and runs once."""

import mlx.core as mx
import numpy as np

from impl.normalized_argmax import normalized_argmax, normalized_argmax_native
from impl.paged_attention import paged_attention
from properties.strategies.paged import PagedQuantization, build_paged_case, paged_oracles

print("device", mx.default_device(), "mlx", mx.__version__, "cuda", mx.cuda.is_available())
logits = mx.random.normal((4, 2049)).astype(mx.bfloat16)
print("argmax cuda", normalized_argmax(logits, arm="cuda").tolist(), "native", normalized_argmax_native(logits).tolist())
for quant in (None, PagedQuantization(4, 64)):
    case = build_paged_case(np.random.default_rng(0), dtype="bfloat16", hq=8, hkv=2, n=4, dk=128, dv=128,
                            block_size=16, length=150, quant=quant)
    out = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="cuda")
    ref, _ = paged_oracles(case)
    err = np.abs(np.array(out.astype(mx.float32)) - ref).max()
    print("paged cuda", case.id, "max|out - oracle|", err)
    assert np.isfinite(err) and err < 0.05, err
