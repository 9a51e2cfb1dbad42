"""The torch engine of the split-half HSIC (method §2): built for CUDA GPUs, runs on any device.

The arithmetic follows the CPU engine (:mod:`sde_core.stats.hsic_cpu`) step for step, batched
over groups of subsets so that a GPU sees few, large kernels:

1. per subset, squared distances of its rows (centred first) or gathered from a pool distance
   matrix; ``E = expm1(−D²/(2σ²))``; double-centring ``Gc = H_n E H_n`` — all in float64;
2. ``Gc`` is cast to the gather precision (float32 by default on a GPU, method §2's rule: only
   the double-centred matrix may be float32);
3. for a chunk of splits of every subset of the group at once, the two m × m blocks are
   gathered and ``Σ K∘L`` is reduced per row in the gather precision, then across rows in
   float64; the row sums of the blocks come from one float64 product ``E₁ Gc`` (E₁: the
   indicator of each split's S1), the diagonals from ``Gc`` in float64.

Torch is imported inside the functions only: the statistics layer must import without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sde_core.common.validation import DISTANCE_TOLERANCE
from sde_core.stats.hsic_cpu import Precision, dropped_row

__all__ = ["batch_sums_torch", "memory_budget"]

#: Bytes of temporaries per step on a CPU device (tests, debugging).
_CPU_BUDGET = 256 * 2**20
#: Upper bound on the bytes of temporaries per step on a GPU (a quarter of free memory below it).
_GPU_BUDGET_MAX = 8 * 2**30


def memory_budget(device: Any) -> int:
    """Bytes of temporaries one step may allocate on ``device``."""
    import torch

    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(min(_GPU_BUDGET_MAX, max(free // 4, 2**26)))
    return _CPU_BUDGET


def _centred_grams(d2: Any, sigma: float) -> tuple[Any, Any]:
    """(G, n, n) squared distances -> (centred Gram in float64, Σ E per subset)."""
    import torch

    e = torch.expm1(d2 * (-0.5 / (sigma * sigma)))
    n = e.shape[-1]
    r = e.sum(2)
    total = r.sum(1)
    rm = r / n
    gc = e - (rm[:, :, None] + rm[:, None, :]) + (total / (n * n))[:, None, None]
    return gc, total


def _rows_sq_distances(x: Any, scale: float) -> Any:
    """(G, n, d) float64 rows -> (G, n, n) squared distances (rows centred; exactly symmetric).

    Where the inner-product formula's error bound exceeds ``DISTANCE_TOLERANCE·scale`` (an
    outlier row far from the others), the distances are summed pair by pair instead.
    """
    import torch

    xc = x - x.mean(1, keepdim=True)
    g = xc @ xc.transpose(1, 2)
    sq = torch.diagonal(g, dim1=1, dim2=2)
    bound = 4.0 * float(np.finfo(np.float64).eps) * math.sqrt(max(x.shape[2], 1))
    if bound * float(sq.max()) > DISTANCE_TOLERANCE * scale:
        diff = x[:, :, None, :] - x[:, None, :, :]
        d2 = (diff * diff).sum(3)
        return 0.5 * (d2 + d2.transpose(1, 2))
    d2 = (sq[:, :, None] + sq[:, None, :]) - (g + g.transpose(1, 2))
    d2.clamp_min_(0.0)
    torch.diagonal(d2, dim1=1, dim2=2).zero_()
    return d2


def _group_sums(gc: Any, gk: Any, idx: Any, dropped: Any, budget: int) -> Any:
    """(G, K, 9) float64 sums of every split of a group of subsets (all tensors on one device)."""
    import torch

    n_grp, n_splits, two_m = idx.shape
    m = two_m // 2
    rowsum = gc.sum(2)
    diag = torch.diagonal(gc, dim1=1, dim2=2)
    gi = torch.arange(n_grp, device=gc.device)
    # k, l (the product is formed in place) and the row-sum product's indicator and result
    per_split = 2 * n_grp * m * m * gk.element_size() + 2 * n_grp * gc.shape[-1] * 8
    chunk = max(1, min(n_splits, budget // max(per_split, 1)))
    out = []
    for lo in range(0, n_splits, chunk):
        a = idx[:, lo : lo + chunk, :m]
        b = idx[:, lo : lo + chunk, m:]
        g4 = gi[:, None, None, None]
        k = gk[g4, a[..., :, None], a[..., None, :]]
        lmat = gk[g4, b[..., :, None], b[..., None, :]]
        skl = k.mul_(lmat).sum(-1).double().sum(-1)
        del k, lmat
        ind = torch.zeros(a.shape[0], a.shape[1], gc.shape[-1], dtype=gc.dtype, device=gc.device)
        ind.scatter_(2, a, 1.0)
        r1 = ind @ gc
        g3 = gi[:, None, None]
        ki = r1.gather(2, a)
        li = rowsum[g3, b] - r1.gather(2, b)
        odd = dropped >= 0
        if bool(odd.any()):
            li = li - torch.where(
                odd[:, None, None], gc[g3, b, dropped.clamp_min(0)[:, None, None]], 0.0
            )
        kd = diag[g3, a]
        ld = diag[g3, b]
        out.append(
            torch.stack(
                [
                    skl,
                    ki.sum(-1),
                    li.sum(-1),
                    (ki * li).sum(-1),
                    kd.sum(-1),
                    ld.sum(-1),
                    (kd * ld).sum(-1),
                    (ki * ld).sum(-1),
                    (li * kd).sum(-1),
                ],
                dim=-1,
            )
        )
    return torch.cat(out, dim=1)


def batch_sums_torch(
    acts: np.ndarray,
    sub: np.ndarray,
    splits_of: Callable[[int], np.ndarray],
    sigma: float,
    device: Any,
    precision: Precision,
    pool: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sufficient sums of every split of every subset on a torch device.

    Args:
        acts: ``(N, d)`` float64 activations of the pool. sub: ``(T, n)`` row indices.
        splits_of: ``t -> (K, 2m)`` split rows of subset t. sigma: numeric σ.
        device: a ``torch.device``. precision: gather precision.
        pool: optional ``(positions (T, n) into d2, d2 (U, U))`` precomputed squared distances.

    Returns:
        ``(T, K, 9)`` float64 sums and ``(T,)`` off-diagonal sums of ``G − 1`` (numpy).
    """
    import torch

    n_sub, n = sub.shape
    budget = memory_budget(device)
    # float64 n×n temporaries per subset: products, distances, E, Gc and its cast
    group = int(max(1, min(n_sub, budget // (6 * n * n * 8))))
    dtype = torch.float32 if precision == "float32" else torch.float64
    if pool is None:
        src = torch.as_tensor(acts, dtype=torch.float64, device=device)
    else:
        src = torch.as_tensor(pool[1], dtype=torch.float64, device=device)
    sums, totals = [], []
    for lo in range(0, n_sub, group):
        ts = range(lo, min(lo + group, n_sub))
        if pool is None:
            rows = torch.as_tensor(sub[lo : lo + group], device=device)
            d2 = _rows_sq_distances(src[rows], 2.0 * sigma * sigma)
        else:
            pos = torch.as_tensor(pool[0][lo : lo + group], device=device)
            d2 = src[pos[:, :, None], pos[:, None, :]]
        gc, total = _centred_grams(d2, sigma)
        del d2
        gk = gc.to(dtype)
        local = np.stack([splits_of(t) for t in ts])
        dropped = np.array([dropped_row(local[i], n) for i in range(len(ts))])
        idx = torch.as_tensor(local, dtype=torch.int64, device=device)
        dr = torch.as_tensor(dropped, dtype=torch.int64, device=device)
        sums.append(_group_sums(gc, gk, idx, dr, budget).cpu().numpy())
        totals.append(total.cpu().numpy())
        del gc, gk
    return np.concatenate(sums), np.concatenate(totals)
