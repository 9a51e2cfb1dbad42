"""Benchmark of the split-half HSIC engine (method §2, "Computation").

In ONE run, for n ∈ {400, 1000} rows, K = 200 splits and d ∈ {10, 512}, time per subset:

* ``split_half_hsic`` on one subset (float64 and float32 gathers) and the previous engine
  (``bench/reference_hsic_v3.py``: uncentred Gram, numba ``prange``) on the same subset;
* ``split_half_batch_stats`` on T subsets of a 6,000-row pool — float64, float32, float64
  with the splits drawn once beforehand (``draw_batch_splits``, as a caller evaluating several
  models reuses them), float64 on one thread — and the previous engine's batch path;
* the textbook loop (per split, two Gram matrices and ``tr(K H L H)`` with m×m products) and
  hyppo's ``dHsic.statistic`` per split, on 10 splits, scaled to K, with their agreement (1e-9).

Prints the table with the speed-ups against the previous engine (same run, same inputs) and
the largest relative change of the values, and appends a dated section to
``bench/RESULTS.md``. With a CUDA GPU it also times the torch engine: one subset at n = 1000
and 4000, and the goal of 1,000 subsets × 200 splits at n = 1000 (d = 512) in under 1 s, with
its agreement with the CPU engine.

Run: ``make bench`` or ``.venv/bin/python bench/hsic_bench.py [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hyppo.d_variate import dHsic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_hsic_v3 as v3

from sde_core.common.threads import usable_cpus
from sde_core.stats.hsic import gaussian_gram, split_half_batch_stats, split_half_hsic
from sde_core.stats.hsic_splits import draw_batch_splits, split_permutations

RESULTS = Path(__file__).with_name("RESULTS.md")
POOL_ROWS = 6000


def best_of(
    fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Best time of ``repeats`` calls on ``clock``, in seconds (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def textbook(acts: np.ndarray, idx: np.ndarray, sigma: float) -> np.ndarray:
    m = idx.shape[1] // 2
    h = np.eye(m) - 1.0 / m
    out = np.empty(idx.shape[0])
    for k, row in enumerate(idx):
        kk, ll = gaussian_gram(acts[row[:m]], sigma), gaussian_gram(acts[row[m:]], sigma)
        out[k] = np.trace(kk @ h @ ll @ h) / (m - 1) ** 2
    return out


def hyppo_per_split(acts: np.ndarray, idx: np.ndarray, sigma: float) -> np.ndarray:
    m = idx.shape[1] // 2
    stat = dHsic(compute_kernel="gaussian", gamma=1.0 / (2 * sigma**2))
    return np.array([stat.statistic(acts[r[:m]], acts[r[m:]]) * m**2 / (m - 1) ** 2 for r in idx])


def cpu_case(n: int, d: int, n_splits: int, n_sub: int, repeats: int) -> dict[str, float]:
    """Per-subset seconds of every variant at one (n, d), plus agreement figures."""
    rng = np.random.default_rng(n + d)
    pool = rng.normal(size=(POOL_ROWS, d)) + np.repeat(rng.normal(size=(60, d)), 100, axis=0)
    sub = np.stack([rng.choice(POOL_ROWS, n, replace=False) for _ in range(n_sub)])
    sigma = float(np.sqrt(d))
    one = pool[sub[0]]
    splits = draw_batch_splits(n, n_splits, 0, n_sub)
    t: dict[str, float] = {}
    t["single f64"] = best_of(lambda: split_half_hsic(one, n_splits, sigma), repeats)
    t["single f32"] = best_of(
        lambda: split_half_hsic(one, n_splits, sigma, precision="float32"), repeats
    )
    t["single v3"] = best_of(lambda: v3.split_half_hsic_v3(one, n_splits, sigma), repeats)
    batch = {"n_splits": n_splits, "sigma": sigma}
    per = 1.0 / n_sub
    t["batch f64"] = per * best_of(lambda: split_half_batch_stats(pool, sub, **batch), repeats)
    t["batch f32"] = per * best_of(
        lambda: split_half_batch_stats(pool, sub, precision="float32", **batch), repeats
    )
    t["batch f64, splits drawn once"] = per * best_of(
        lambda: split_half_batch_stats(pool, sub, splits=splits, **batch), repeats
    )
    t["batch f64, 1 thread"] = per * best_of(
        lambda: split_half_batch_stats(pool, sub, threads=1, **batch), repeats
    )
    t["batch v3"] = per * best_of(
        lambda: v3.split_half_batch_stats_v3(pool, sub, n_splits, sigma), repeats
    )
    # CPU seconds of the whole process (all threads): the work, less sensitive to other jobs
    cpu = time.process_time
    t["cpu batch f64"] = per * best_of(lambda: split_half_batch_stats(pool, sub, **batch), 2, cpu)
    t["cpu batch v3"] = per * best_of(
        lambda: v3.split_half_batch_stats_v3(pool, sub, n_splits, sigma), 2, cpu
    )
    new = split_half_batch_stats(pool, sub, **batch).h
    old = v3.split_half_batch_stats_v3(pool, sub, n_splits, sigma)[0]
    f32 = split_half_batch_stats(pool, sub, precision="float32", **batch).h
    t["max rel change vs v3"] = float(np.max(np.abs(new - old) / np.abs(old)))
    t["float32 max err / SD"] = float(np.max(np.abs(f32 - new).max(1) / new.std(1)))
    idx = split_permutations(n, 10, 0)
    ours = split_half_hsic(one, n_splits, sigma)[:10]
    t0 = time.perf_counter()
    ref = textbook(one, idx, sigma)
    t["textbook (K splits)"] = (time.perf_counter() - t0) * n_splits / 10
    t0 = time.perf_counter()
    hyp = hyppo_per_split(one, idx, sigma)
    t["hyppo (K splits)"] = (time.perf_counter() - t0) * n_splits / 10
    assert np.allclose(ours, ref, rtol=1e-9) and np.allclose(ours, hyp, rtol=1e-9)
    return t


def cpu_section(sizes: list[int], dims: list[int], n_splits: int, repeats: int) -> list[str]:
    lines = [
        "Per subset, ms (× = previous engine ÷ this variant, same run and inputs):",
        "",
        "| n | d | single f64 | single f32 | single v3 | batch f64 | batch f32 | "
        "batch f64, splits once | batch f64, 1 thread | batch v3 | CPU ms, batch f64 | "
        "CPU ms, batch v3 | textbook | hyppo | max rel change vs v3 | f32 err / SD |",
        "|" + "---|" * 16,
    ]
    for n in sizes:
        for d in dims:
            n_sub = 24 if n <= 400 else 8
            t = cpu_case(n, d, n_splits, n_sub, repeats)

            def ms(key: str, ref: str | None = None, t: dict[str, float] = t) -> str:
                cell = f"{t[key] * 1e3:.1f}"
                return f"{cell} ({t[ref] / t[key]:.1f}×)" if ref else cell

            row = [
                ms("single f64", "single v3"),
                ms("single f32", "single v3"),
                ms("single v3"),
                ms("batch f64", "batch v3"),
                ms("batch f32", "batch v3"),
                ms("batch f64, splits drawn once", "batch v3"),
                ms("batch f64, 1 thread", "batch v3"),
                ms("batch v3"),
                ms("cpu batch f64", "cpu batch v3"),
                ms("cpu batch v3"),
                f"{t['textbook (K splits)'] * 1e3:.0f}",
                f"{t['hyppo (K splits)'] * 1e3:.0f}",
                f"{t['max rel change vs v3']:.1e}",
                f"{t['float32 max err / SD']:.1e}",
            ]
            print(f"n={n} d={d}: " + " | ".join(row), flush=True)
            lines.append(f"| {n} | {d} | " + " | ".join(row) + " |")
    return lines


def cuda_section(n_splits: int) -> list[str]:
    import torch

    lines = ["", "CUDA (torch engine):", "", "| case | time (ms) | note |", "|---|---|---|"]
    rng = np.random.default_rng(1)
    sync = torch.cuda.synchronize
    for n in (1000, 4000):
        acts = rng.normal(size=(n, 512))
        sec = best_of(lambda a=acts: (split_half_hsic(a, n_splits, device="cuda"), sync()), 3)
        lines.append(f"| one subset, n={n}, K={n_splits}, d=512, float32 | {sec * 1e3:.1f} | |")
    pool = rng.normal(size=(5000, 512))
    subsets = np.stack([rng.choice(5000, 1000, replace=False) for _ in range(1000)])
    sigma = float(np.sqrt(512))
    splits = draw_batch_splits(1000, n_splits, 0, 1000)
    for precision in ("float32", "float64"):
        t0 = time.perf_counter()
        h = split_half_batch_stats(
            pool, subsets, n_splits, sigma, device="cuda", precision=precision, splits=splits
        ).h
        sync()
        sec = time.perf_counter() - t0
        cpu = split_half_batch_stats(pool, subsets[:4], n_splits, sigma, device="cpu").h
        err = float(np.max(np.abs(h[:4] - cpu).max(1) / cpu.std(1)))
        lines.append(
            f"| 1,000 subsets × K={n_splits}, n=1000, d=512, {precision} (goal < 1 s) | "
            f"{sec * 1e3:.0f} | max error vs CPU {err:.1e} of the split SD |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n=400, d=10 only, fewer repeats")
    parser.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    n_splits = 200
    sizes = [400] if args.quick else [400, 1000]
    dims = [10] if args.quick else [10, 512]
    header = (
        f"## hsic_bench — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC\n\n"
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
        f"({usable_cpus()} usable worker threads), load average {os.getloadavg()[0]:.1f} at the "
        f"start; K={n_splits}; batch = T subsets of a {POOL_ROWS}-row pool (T = 24 at n = 400, "
        "8 at n = 1000); v3 = the previous engine (bench/reference_hsic_v3.py); textbook and "
        "hyppo timed on 10 splits and scaled to K; 'CPU ms' = process CPU time (all threads) per "
        "subset, the work done, which other jobs on the machine disturb less than wall time.\n"
    )
    print(header)
    lines = cpu_section(sizes, dims, n_splits, repeats=2 if args.quick else 4)
    try:
        import torch

        if torch.cuda.is_available():
            lines += cuda_section(n_splits)
        else:
            lines += ["", "CUDA: no GPU on this machine; the torch-engine section was skipped."]
    except ImportError:
        pass
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + header + "\n" + "\n".join(lines) + "\n")
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
