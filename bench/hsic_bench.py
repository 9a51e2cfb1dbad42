"""Benchmark of the split-half HSIC engine (issue 2 acceptance).

In ONE run, for n = 1000 rows, K = 200 splits and d ∈ {10, 512}, time:

* ``sde_core.stats.hsic.split_half_hsic`` (Gram once + fused numba gather-and-reduce, float64),
* the textbook loop: per split, two Gram matrices and ``tr(K H L H)`` with explicit m×m products,
* hyppo's ``dHsic.statistic`` per split (its own Gram matrices, 1/m² normalisation),

print the speed-up ratios and an L3/bandwidth floor estimate (bytes the fused kernel must read
divided by the measured L3 read bandwidth, plus the Gram matrix time), and append a dated
section to ``bench/RESULTS.md``. With a CUDA GPU it also times the torch path for
n ∈ {1000, 4000} and the batch engine on 1,000 subsets at once.

Run: ``make bench`` or ``.venv/bin/python bench/hsic_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
from hyppo.d_variate import dHsic

from sde_core.stats.hsic import (
    _split_sums_kernel,
    gaussian_gram,
    split_half_hsic,
    split_half_hsic_batch,
    split_permutations,
)

RESULTS = Path(__file__).with_name("RESULTS.md")


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def textbook(acts: np.ndarray, idx: np.ndarray, sigma: float) -> np.ndarray:
    m = idx.shape[1] // 2
    h = np.eye(m) - 1.0 / m
    out = np.empty(idx.shape[0])
    for k, row in enumerate(idx):
        a, b = acts[row[:m]], acts[row[m:]]
        kk, ll = gaussian_gram(a, sigma), gaussian_gram(b, sigma)
        out[k] = np.trace(kk @ h @ ll @ h) / (m - 1) ** 2
    return out


def hyppo_per_split(acts: np.ndarray, idx: np.ndarray, sigma: float) -> np.ndarray:
    m = idx.shape[1] // 2
    stat = dHsic(compute_kernel="gaussian", gamma=1.0 / (2 * sigma**2))
    return np.array([stat.statistic(acts[r[:m]], acts[r[m:]]) * m**2 / (m - 1) ** 2 for r in idx])


@numba.njit(parallel=True, cache=True)
def _stream_sum(arr: np.ndarray, passes: int) -> float:  # pragma: no cover - compiled
    total = 0.0
    n = arr.shape[0]
    for _ in range(passes):
        for i in numba.prange(n):
            s = 0.0
            row = arr[i]
            for j in range(row.shape[0]):
                s += row[j]
            total += s
    return total


def l3_floor(n: int, n_splits: int, gram_seconds: float) -> tuple[float, float]:
    """(read bandwidth in GB/s of an n×n float64 matrix, floor estimate in seconds).

    The fused kernel reads the upper triangles of both m×m blocks per split:
    m² float64 values, i.e. ``K · m² · 8`` bytes from the (L3-resident) Gram matrix.
    """
    m = n // 2
    g = np.random.default_rng(0).random((n, n))
    _stream_sum(g, 1)
    passes = 50
    sec = best_of(lambda: _stream_sum(g, passes), 3)
    bandwidth = passes * g.nbytes / sec
    needed = n_splits * m * m * 8
    return bandwidth / 1e9, needed / bandwidth + gram_seconds


def cpu_section(n: int, n_splits: int, dims: list[int], repeats: int) -> list[str]:
    rng = np.random.default_rng(0)
    lines = [
        "| d | split_half_hsic (ms) | textbook (ms) | hyppo dHsic/split (ms) | "
        "× textbook | × hyppo | floor (ms) | ÷ floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in dims:
        acts = rng.normal(size=(n, d))
        sigma = float(np.sqrt(d))
        idx = split_permutations(n, n_splits, 0)
        split_half_hsic(acts, n_splits=n_splits)  # compile / warm caches
        ours = best_of(lambda a=acts: split_half_hsic(a, n_splits=n_splits), repeats)
        gram_t = best_of(lambda a=acts, s=sigma: gaussian_gram(a, s), repeats)
        g = gaussian_gram(acts, sigma)
        kernel_t = best_of(lambda g=g, i=idx: _split_sums_kernel(g, i, False), repeats)
        t0 = time.perf_counter()
        ref = textbook(acts, idx, sigma)
        text_t = time.perf_counter() - t0
        t0 = time.perf_counter()
        hyp = hyppo_per_split(acts, idx, sigma)
        hyppo_t = time.perf_counter() - t0
        got = split_half_hsic(acts, n_splits=n_splits)
        assert np.allclose(got, ref, rtol=1e-9) and np.allclose(got, hyp, rtol=1e-9)
        bw, floor = l3_floor(n, n_splits, gram_t)
        print(
            f"d={d:4d}: ours {ours * 1e3:7.1f} ms (Gram {gram_t * 1e3:.1f} + kernel "
            f"{kernel_t * 1e3:.1f}) | textbook {text_t * 1e3:8.0f} ms ({text_t / ours:5.0f}×) | "
            f"hyppo {hyppo_t * 1e3:8.0f} ms ({hyppo_t / ours:5.0f}×) | L3 read {bw:.1f} GB/s, "
            f"floor {floor * 1e3:.1f} ms ({ours / floor:.2f}× floor)"
        )
        lines.append(
            f"| {d} | {ours * 1e3:.1f} (Gram {gram_t * 1e3:.1f}, kernel {kernel_t * 1e3:.1f}) | "
            f"{text_t * 1e3:.0f} | {hyppo_t * 1e3:.0f} | {text_t / ours:.0f}× | "
            f"{hyppo_t / ours:.0f}× | {floor * 1e3:.1f} ({bw:.0f} GB/s) | {ours / floor:.2f}× |"
        )
    return lines


def cuda_section(n_splits: int) -> list[str]:
    import torch

    lines = [
        "",
        "CUDA (torch path, float32 on the centred Gram):",
        "",
        "| case | time (ms) |",
        "|---|---|",
    ]
    rng = np.random.default_rng(1)
    for n in (1000, 4000):
        acts = rng.normal(size=(n, 512))
        split_half_hsic(acts, n_splits=n_splits, device="cuda")
        sec = best_of(
            lambda a=acts: (
                split_half_hsic(a, n_splits=n_splits, device="cuda"),
                torch.cuda.synchronize(),
            ),
            3,
        )
        lines.append(f"| n={n}, K={n_splits}, d=512 | {sec * 1e3:.1f} |")
    pool = rng.normal(size=(5000, 512))
    subsets = np.stack([rng.choice(5000, 1000, replace=False) for _ in range(1000)])
    t0 = time.perf_counter()
    split_half_hsic_batch(
        pool, subsets, n_splits=n_splits, sigma=float(np.sqrt(512)), device="cuda"
    )
    torch.cuda.synchronize()
    lines.append(
        f"| 1,000 subsets × n=1000, K={n_splits} | {(time.perf_counter() - t0) * 1e3:.0f} |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d=10 only, fewer repeats")
    parser.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    n, n_splits = 1000, 200
    dims = [10] if args.quick else [10, 512]
    header = (
        f"## hsic_bench — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC\n\n"
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"numba threads {numba.get_num_threads()}; n={n}, K={n_splits}, float64.\n"
    )
    print(header)
    lines = cpu_section(n, n_splits, dims, repeats=3 if args.quick else 7)
    try:
        import torch

        if torch.cuda.is_available():
            lines += cuda_section(n_splits)
    except ImportError:
        pass
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + header + "\n" + "\n".join(lines) + "\n")
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
