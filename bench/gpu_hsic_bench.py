"""The HSIC stage on the CPU and on a GPU: 1,000 subsets × 200 splits at n = 1,000 (issue 33).

One call of :func:`~sde_core.stats.hsic.split_half_batch_stats` — the evaluation's HSIC stage
(``stages.compute_h``) — on the same subsets of one activation matrix: the numba CPU engine
(every core of this process's affinity mask) and the torch kernel on CUDA (float32 gathers,
method §2), each after one untimed warm-up call (numba's JIT, CUDA's context). The two results
are compared (the largest difference over the splits, as a fraction of each subset's
across-split SD; method §2's bound is 1e-3). Target on a current data-centre GPU: < 1 s.

Usage (one command; the GPU row is skipped where torch sees no CUDA device)::

    python bench/gpu_hsic_bench.py [--subsets 1000] [--splits 200] [--n 1000] [--dim 10]
                                   [--rows 20000] [--cpu-subsets 1000] [--torch-cpu]

``--cpu-subsets`` times the CPU engine on fewer subsets and scales its time to ``--subsets``
(the engine is linear in the subsets; the table says so); ``--torch-cpu`` adds the torch
kernel on the CPU (the GPU arithmetic, for the equivalence check on a machine without one).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sde_core.stats.hsic import engine_device, split_half_batch_stats


def timed(
    acts: np.ndarray, subsets: np.ndarray, splits: int, **kw: object
) -> tuple[float, np.ndarray]:
    """Seconds of one call (after an untimed warm-up on two subsets) and its H ``(s, K)``."""
    split_half_batch_stats(acts, subsets[:2], n_splits=splits, sigma=1.0, seed=0, **kw)
    t0 = time.perf_counter()
    stats = split_half_batch_stats(acts, subsets, n_splits=splits, sigma=1.0, seed=0, **kw)
    return time.perf_counter() - t0, stats.h


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", type=int, default=1000)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--n", type=int, default=1000, help="rows per subset")
    p.add_argument("--dim", type=int, default=10, help="activation dimension d")
    p.add_argument("--rows", type=int, default=20000, help="rows of the activation matrix")
    p.add_argument("--cpu-subsets", type=int, default=None,
                   help="subsets timed on the CPU engine (scaled to --subsets)")  # fmt: skip
    p.add_argument("--torch-cpu", action="store_true", help="also the torch kernel on the CPU")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(args.rows, args.dim)) * 2.0
    acts = np.exp(logits - logits.max(1, keepdims=True))
    acts = (acts / acts.sum(1, keepdims=True)).astype(np.float32)  # softmax-like, as `output`
    subsets = np.stack([rng.choice(args.rows, args.n, replace=False) for _ in range(args.subsets)])
    rows: list[tuple[str, int, float, str]] = []
    cpu_count = min(args.cpu_subsets or args.subsets, args.subsets)
    seconds, h_cpu = timed(acts, subsets[:cpu_count], args.splits, device="cpu")
    scaled = seconds * args.subsets / cpu_count
    note = "" if cpu_count == args.subsets else f"timed on {cpu_count} subsets, scaled"
    rows.append(("numba CPU engine (float64)", cpu_count, scaled, note))

    def agreement(h: np.ndarray) -> str:
        k = min(len(h), len(h_cpu))
        sd = h_cpu[:k].std(axis=1)
        worst = float(np.max(np.abs(h[:k] - h_cpu[:k]).max(axis=1) / np.where(sd > 0, sd, 1)))
        return f"largest ΔH over the splits = {worst:.1e} of their SD (bound 1e-3)"

    if args.torch_cpu:
        seconds, h = timed(acts, subsets[:cpu_count], args.splits, device="cpu", backend="torch")
        rows.append(("torch kernel on the CPU (float32 gathers)", cpu_count,
                     seconds * args.subsets / cpu_count, agreement(h)))  # fmt: skip
    gpu = engine_device("auto") == "cuda"
    if gpu:
        import torch

        name = torch.cuda.get_device_name(0)
        seconds, h = timed(acts, subsets, args.splits, device="cuda")
        torch.cuda.synchronize()
        rows.append((f"torch kernel on CUDA ({name}, float32 gathers)", args.subsets, seconds,
                     agreement(h)))  # fmt: skip
    print(f"## HSIC stage: {args.subsets} subsets × {args.splits} splits at n = {args.n}, "
          f"d = {args.dim}\n")  # fmt: skip
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; torch sees CUDA: {'yes' if gpu else 'no'}\n")  # fmt: skip
    print("| engine | subsets timed | seconds for all | note |")
    print("|---|---|---|---|")
    for engine, timed_subsets, secs, text in rows:
        print(f"| {engine} | {timed_subsets} | {secs:.2f} | {text} |")
    if not gpu:
        print("\nNo CUDA device here: run the same command where torch sees one for the GPU row.")


if __name__ == "__main__":
    main()
