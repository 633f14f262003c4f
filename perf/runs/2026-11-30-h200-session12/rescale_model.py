"""Session 12, after call T10: why `argmax_fused_lse_misses_the_rescale` survived its first killer, and where it dies.

A NumPy model of the fused variant's online logsumexp (MLX's CUDA kernel: lse_threads(V) threads, chunk r * T + t of
4 columns per round, per thread a running max and normalizer), with and without the per-round rescale, on the lse
gate's rows (parity/test_normalized_argmax.py::lse_rows). exp here is NumPy's, not __expf: the model only says how
far the mutant's lse moves, which is far beyond any rounding where it moves at all. Run from the repository root:
    PYTHONPATH=. .venv/bin/python perf/runs/2026-11-30-h200-session12/rescale_model.py
"""

import numpy as np

from impl.normalized_argmax import lse_threads
from parity.test_normalized_argmax import lse_rows
from reference.sampling import round_to


def online_lse(rows: np.ndarray, rescale: bool) -> np.ndarray:
    count, vocab = rows.shape
    threads = lse_threads(vocab)
    rounds = -(-vocab // (4 * threads))
    x = np.full((count, rounds * threads * 4), -np.inf)
    x[:, :vocab] = rows
    x = x.reshape(count, rounds, threads, 4)
    top = np.full((count, threads), -np.finfo(np.float32).max)
    normalizer = np.zeros((count, threads))
    with np.errstate(all="ignore"):
        for r in range(rounds):
            chunk = x[:, r]
            previous, top = top, np.maximum(top, np.where(np.isnan(chunk), -np.inf, chunk).max(-1))
            if rescale:
                normalizer = normalizer * np.exp(previous - top)
            normalizer = normalizer + np.exp(chunk - top[..., None]).sum(-1)
        row_top = top.max(-1, keepdims=True)
        total = (normalizer * np.exp(top - row_top)).sum(-1)
        return np.where(np.isinf(row_top[:, 0]), row_top[:, 0], np.log(total) + row_top[:, 0])


if __name__ == "__main__":
    for dtype, vocab in (("bfloat16", 4100), ("float32", 4100), ("bfloat16", 32000), ("float32", 151936)):
        rows = lse_rows(vocab, dtype, np.random.default_rng(vocab)).astype(np.float64)
        good, bad = online_lse(rows, True), online_lse(rows, False)
        moved = ~((round_to(good, dtype) == round_to(bad, dtype)) | (np.isnan(good) & np.isnan(bad)))
        with np.errstate(invalid="ignore"):
            error = np.abs(good - bad)
        error = error[np.isfinite(error)]
        print(f"{dtype:9} V={vocab:6}: the mutant's rounded lse differs on {int(moved.sum())} of {len(rows)} rows; "
              f"|error| median {np.median(error):.3g}, max {error.max():.3g}")
