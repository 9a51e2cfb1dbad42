"""The split-half HSIC engine as it was before the kernel rework (ALGORITHM_VERSION 3).

Kept only so the benchmarks can time the new engine against the old one in the same run and
measure how far the numbers moved. It is the old code with three changes: no input
validation, no torch path, and ``cache=False`` (numba cannot cache functions of a module
loaded from a file path). Do not use it for results: on near-constant activations its
uncentred O(m²) identity loses every digit (method §2).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from threadpoolctl import ThreadpoolController

from sde_core.stats.hsic import gaussian_gram
from sde_core.stats.hsic_splits import split_permutations, subset_seeds

__all__ = ["split_half_batch_stats_v3", "split_half_hsic_v3", "split_sums_kernel_v3"]

_UNION_GRAM_MAX_ROWS = 1448


@numba.njit(parallel=True, fastmath=False, cache=False, nogil=True)
def split_sums_kernel_v3(gram: np.ndarray, idx: np.ndarray, unbiased: bool) -> np.ndarray:
    """The old fused gather-and-reduce over splits (numba prange, uncentred Gram)."""
    n_splits = idx.shape[0]
    m = idx.shape[1] // 2
    out = np.zeros((n_splits, 9))
    for s in numba.prange(n_splits):
        a = idx[s, :m]
        b = idx[s, m:]
        rk = np.zeros(m)
        rl = np.zeros(m)
        skl = 0.0
        tk = 0.0
        tl = 0.0
        tkl = 0.0
        for i in range(m):
            ai = a[i]
            bi = b[i]
            kd = gram[ai, ai]
            ld = gram[bi, bi]
            tk += kd
            tl += ld
            tkl += kd * ld
            rki = kd
            rli = ld
            acc = 0.0
            for j in range(i + 1, m):
                kij = gram[ai, a[j]]
                lij = gram[bi, b[j]]
                acc += kij * lij
                rki += kij
                rli += lij
                rk[j] += kij
                rl[j] += lij
            rk[i] += rki
            rl[i] += rli
            skl += 2.0 * acc
        skl += tkl
        sk = 0.0
        sl = 0.0
        rklr = 0.0
        for i in range(m):
            sk += rk[i]
            sl += rl[i]
            rklr += rk[i] * rl[i]
        out[s, 0] = skl
        out[s, 1] = sk
        out[s, 2] = sl
        out[s, 3] = rklr
        if unbiased:
            rkd = 0.0
            rld = 0.0
            for i in range(m):
                rkd += rk[i] * gram[b[i], b[i]]
                rld += rl[i] * gram[a[i], a[i]]
            out[s, 4] = tk
            out[s, 5] = tl
            out[s, 6] = tkl
            out[s, 7] = rkd
            out[s, 8] = rld
    return out


@numba.njit(parallel=True, cache=False, nogil=True)
def _offdiag_means_kernel(gram: np.ndarray, pos: np.ndarray) -> np.ndarray:
    n_sub, n = pos.shape
    out = np.empty(n_sub)
    for t in numba.prange(n_sub):
        total = 0.0
        for i in range(n):
            row = pos[t, i]
            for j in range(i + 1, n):
                total += gram[row, pos[t, j]]
        out[t] = 2.0 * total / (n * (n - 1))
    return out


def _values(sums: np.ndarray, m: int, estimator: str) -> np.ndarray:
    skl, sk, sl, rklr, tk, tl, tkl, rkd, rld = sums.T
    if estimator == "biased":
        return (skl - 2.0 * rklr / m + sk * sl / (m * m)) / ((m - 1) ** 2)
    s_kl, s_k, s_l = skl - tkl, sk - tk, sl - tl
    r_kl = rklr - rkd - rld + tkl
    return (s_kl + s_k * s_l / ((m - 1) * (m - 2)) - 2.0 * r_kl / (m - 2)) / (m * (m - 3))


@functools.cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


def _gram_single_blas(arr: np.ndarray, sigma: float) -> np.ndarray:
    with _controller().limit(limits=1, user_api="blas"):
        return gaussian_gram(arr, sigma)


def split_half_hsic_v3(
    acts: np.ndarray, n_splits: int, sigma: float, estimator: str = "biased", seed: int = 0
) -> np.ndarray:
    """Old ``split_half_hsic`` (numeric σ, CPU path)."""
    idx = split_permutations(acts.shape[0], n_splits, seed)
    sums = split_sums_kernel_v3(_gram_single_blas(acts, sigma), idx, estimator == "unbiased")
    return _values(sums, idx.shape[1] // 2, estimator)


def split_half_batch_stats_v3(
    acts: np.ndarray,
    subsets: np.ndarray,
    n_splits: int,
    sigma: float,
    estimator: str = "biased",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Old ``split_half_batch_stats``: ``(h (T, K), spread (T,))``."""
    n_sub, n = subsets.shape
    seeds = subset_seeds(seed, n_sub)
    local = np.stack([split_permutations(n, n_splits, sd) for sd in seeds])
    h = np.empty((n_sub, n_splits))
    mean_off = np.empty(n_sub)
    union = np.unique(subsets)
    if union.size <= _UNION_GRAM_MAX_ROWS:
        blocks = [
            (_gram_single_blas(acts[union], sigma), np.searchsorted(union, subsets), slice(None))
        ]
    else:
        blocks = (
            (_gram_single_blas(acts[subsets[t]], sigma), np.arange(n)[None, :], slice(t, t + 1))
            for t in range(n_sub)
        )
    for gram, pos, part in blocks:
        idx = np.take_along_axis(pos[:, None, :], local[part], axis=2).reshape(-1, local.shape[2])
        sums = split_sums_kernel_v3(gram, np.ascontiguousarray(idx), estimator == "unbiased")
        h[part] = _values(sums, idx.shape[1] // 2, estimator).reshape(-1, n_splits)
        mean_off[part] = _offdiag_means_kernel(gram, pos)
    return h, (1.0 - mean_off) ** 2 / (n / 2)
