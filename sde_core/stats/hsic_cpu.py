"""The CPU engine of the split-half HSIC (method §2, "Computation").

For one subset of n rows and K splits (m = n // 2 rows per half):

1. squared distances of the n rows — from the activations (rows centred on their mean first,
   one BLAS product ``X Xᵀ``) or gathered from a precomputed pool distance matrix;
2. ``E = G − 1 = expm1(−D² / (2σ²))``: the Gram matrix minus its constant part, exact to the
   last digit even where G ≈ 1 (``exp`` would keep only the digits of ``1 − G`` that survive
   rounding ``G`` to float64); ``Σ E`` gives the spread control of method §9;
3. double-centring in float64, ``Gc = H_n E H_n = H_n G H_n`` (exactly symmetric). Both
   estimators are invariant to it, and it removes the large common part of the kernel values
   that made the O(m²) identity cancel catastrophically on near-constant activations;
4. the row sums of Gc over every split's first half, ``R = E₁ Gc``, in one BLAS product for all
   splits (E₁: the K × n 0/1 indicator of S1);
5. one compiled loop per split: the pairs are optionally ordered by their S1 row (monotone
   gathers when Gc is larger than a core's cache), the upper triangles of the two m × m blocks
   are gathered and reduced to ``Σ K∘L`` — per-row partial sums in the gather precision
   (float64, or float32 when asked), float64 across rows — and the other eight sufficient sums
   come from R and the diagonal in float64.

Every kernel here is serial and releases the GIL; :func:`batch_sums` spreads subsets (or chunks
of one subset's splits) over worker threads (:mod:`sde_core.common.threads`), with BLAS held
to one thread per worker so nothing oversubscribes the cores.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from threadpoolctl import ThreadpoolController

from sde_core.common.threads import run_tasks
from sde_core.common.validation import (
    DISTANCE_TOLERANCE,
    direct_squared_distances,
    inner_product_error,
)

__all__ = [
    "N_SUMS",
    "CentredGram",
    "Precision",
    "batch_sums",
    "centred_gram_from_pool",
    "centred_gram_from_rows",
    "dropped_row",
    "first_half_row_sums",
    "offdiag_sum_from_rows",
    "pool_sq_distances_matrix",
    "single_threaded_blas",
    "split_sums",
    "sums_from_rows",
    "values_from_sums",
]

Precision = Literal["float64", "float32"]

#: Number of sufficient sums per split (the column layout of :func:`values_from_sums`).
N_SUMS = 9
#: Order each split's pairs by their S1 row when the gather matrix is larger than this: the
#: K-side gathers then walk each row left to right. Measured on this project's 2-core machines
#: (2 MiB L2 per core): +10 % at n = 400 (1.25 MiB Gram, cache-resident), −20 % at n = 1000.
SORT_PAIRS_MIN_BYTES = 2 * 1024 * 1024
# Reassociation lets LLVM vectorise the gather loop's reductions (AVX2/AVX-512 gathers).
_FASTMATH = {"reassoc", "nsz", "contract"}


# --------------------------------------------------------------------------------------------
# Sums -> HSIC values
# --------------------------------------------------------------------------------------------


def sums_from_rows(
    rk: np.ndarray, rl: np.ndarray, row_kl: np.ndarray, dk: np.ndarray, dl: np.ndarray
) -> np.ndarray:
    """The nine sufficient sums (layout of :func:`values_from_sums`) from per-row pieces.

    Args:
        rk, rl: ``(S, m)`` row sums of K and L. row_kl: ``(S, m)`` row sums of K∘L.
        dk, dl: ``(S, m)`` diagonals of K and L. All float64.

    Returns:
        ``(S, 9)`` float64 sums.
    """
    return np.stack(
        [
            row_kl.sum(1),
            rk.sum(1),
            rl.sum(1),
            (rk * rl).sum(1),
            dk.sum(1),
            dl.sum(1),
            (dk * dl).sum(1),
            (rk * dl).sum(1),
            (rl * dk).sum(1),
        ],
        axis=1,
    )


def values_from_sums(sums: np.ndarray, m: int, estimator: str) -> np.ndarray:
    """HSIC values from ``(..., 9)`` sufficient sums of two m×m kernel blocks K, L.

    Columns: Σ K∘L, 1ᵀK1, 1ᵀL1, (K1)ᵀ(L1), tr K, tr L, Σ K_ii L_ii, (K1)ᵀdiag L, (L1)ᵀdiag K.
    Biased: ``tr(KHLH)/(m-1)²`` via the O(m²) identity
    ``tr(KHLH) = Σ K∘L − (2/m)(K1)ᵀ(L1) + (1ᵀK1)(1ᵀL1)/m²``. Unbiased: Song et al. (2012) with
    the diagonals of K and L zeroed (K~, L~).
    """
    skl, sk, sl, rklr, tk, tl, tkl, rkd, rld = np.moveaxis(sums, -1, 0)
    if estimator == "biased":
        return (skl - 2.0 * rklr / m + sk * sl / (m * m)) / ((m - 1) ** 2)
    s_kl = skl - tkl
    s_k = sk - tk
    s_l = sl - tl
    r_kl = rklr - rkd - rld + tkl
    return (s_kl + s_k * s_l / ((m - 1) * (m - 2)) - 2.0 * r_kl / (m - 2)) / (m * (m - 3))


# --------------------------------------------------------------------------------------------
# Compiled kernels (serial, GIL released)
# --------------------------------------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _finish_sq_distances_rows(g: np.ndarray, lo: int, hi: int) -> None:  # pragma: no cover
    """Rows ``lo:hi`` of :func:`_finish_sq_distances` (their upper part and its mirror image).

    Row i reads only ``g[i, j > i]`` and the diagonal and writes ``g[i, j > i]`` and
    ``g[j > i, i]``, so disjoint row ranges may run concurrently.
    """
    n = g.shape[0]
    for i in range(lo, hi):
        sqi = g[i, i]
        for j in range(i + 1, n):
            v = (sqi + g[j, j]) - 2.0 * g[i, j]
            if v < 0.0:
                v = 0.0
            g[i, j] = v
            g[j, i] = v


def _finish_sq_distances(g: np.ndarray, threads: int = 1) -> None:
    """In place: inner products ``g = X Xᵀ`` -> squared distances (symmetric, ≥ 0, zero diagonal).

    Only the upper triangle of ``g`` is read, so the result is exactly symmetric even when the
    BLAS product is not.
    """
    n = g.shape[0]
    if threads <= 1:
        _finish_sq_distances_rows(g, 0, n)
    else:
        # Row i costs n − i: many small blocks keep the workers evenly loaded.
        edges = np.linspace(0, n, 16 * threads + 1).astype(int)
        run_tasks(
            lambda b: _finish_sq_distances_rows(g, edges[b], edges[b + 1]),
            range(edges.size - 1),
            threads,
        )
    np.fill_diagonal(g, 0.0)


@numba.njit(nogil=True, cache=True)
def _gather_block(
    d2: np.ndarray, pos: np.ndarray, order: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out = d2[pos][:, pos]`` without temporaries.

    ``order`` sorts ``pos``: each pool row is read left to right (the prefetcher follows) and the
    values are scattered into the cache-resident output row.
    """
    n = pos.shape[0]
    for i in range(n):
        row = d2[pos[i]]
        for jj in range(n):
            j = order[jj]
            out[i, j] = row[pos[j]]


@numba.njit(nogil=True, cache=True)
def _centre(e: np.ndarray, r: np.ndarray, mu: float) -> None:  # pragma: no cover - compiled
    """In place ``e_ij <- e_ij − (r_i + r_j) + μ`` (row means r, grand mean μ); symmetric."""
    n = e.shape[0]
    for i in range(n):
        ri = r[i]
        for j in range(n):
            e[i, j] = e[i, j] - (ri + r[j]) + mu


@numba.njit(nogil=True, cache=True)
def _first_half_indicator(idx: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[s, idx[s, :m]] = 1``, zero elsewhere: the (K, n) indicator of every split's S1."""
    m = idx.shape[1] // 2
    out[:] = 0.0
    for s in range(idx.shape[0]):
        for i in range(m):
            out[s, idx[s, i]] = 1.0


@numba.njit(nogil=True, cache=True, fastmath=_FASTMATH)
def _split_sums_kernel(
    gc: np.ndarray,
    gk: np.ndarray,
    zero: float,
    idx: np.ndarray,
    r1: np.ndarray,
    rowsum: np.ndarray,
    dropped: int,
    sort_pairs: bool,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The nine sufficient sums of every split (columns as in :func:`values_from_sums`).

    gc: (n, n) float64 centred Gram; gk: the same values in the gather precision (gc itself or
    a float32 copy); zero: 0 in that precision (per-row accumulator type); idx: (S, 2m) rows of
    S1 then S2; r1: (S, n) row sums of gc over each split's S1; rowsum: (n,) row sums of gc;
    dropped: the row left out when n is odd, else −1; out: (S, 9).
    """
    n = gc.shape[0]
    m = idx.shape[1] // 2
    a = np.empty(m, np.intp)
    b = np.empty(m, np.intp)
    slot = np.full(n, -1, np.intp)
    for s in range(idx.shape[0]):
        if sort_pairs:
            # Counting sort of the pairs by their S1 row (O(n)): pairs are interchangeable.
            for i in range(m):
                slot[idx[s, i]] = i
            c = 0
            for u in range(n):
                p = slot[u]
                if p >= 0:
                    a[c] = u
                    b[c] = idx[s, m + p]
                    c += 1
                    slot[u] = -1
        else:
            for i in range(m):
                a[i] = idx[s, i]
                b[i] = idx[s, m + i]
        skl = 0.0
        for i in range(m):
            ai = a[i]
            bi = b[i]
            rk = gk[ai]
            rl = gk[bi]
            acc = zero
            for j in range(i + 1, m):
                acc += rk[a[j]] * rl[b[j]]
            skl += 2.0 * acc + gc[ai, ai] * gc[bi, bi]
        sk = 0.0
        sl = 0.0
        rklr = 0.0
        tk = 0.0
        tl = 0.0
        tkl = 0.0
        rkd = 0.0
        rld = 0.0
        for i in range(m):
            ai = a[i]
            bi = b[i]
            kd = gc[ai, ai]
            ld = gc[bi, bi]
            ki = r1[s, ai]
            li = rowsum[bi] - r1[s, bi]
            if dropped >= 0:
                li -= gc[bi, dropped]
            sk += ki
            sl += li
            rklr += ki * li
            tk += kd
            tl += ld
            tkl += kd * ld
            rkd += ki * ld
            rld += li * kd
        out[s, 0] = skl
        out[s, 1] = sk
        out[s, 2] = sl
        out[s, 3] = rklr
        out[s, 4] = tk
        out[s, 5] = tl
        out[s, 6] = tkl
        out[s, 7] = rkd
        out[s, 8] = rld


# --------------------------------------------------------------------------------------------
# One subset: the centred Gram matrix
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CentredGram:
    """The double-centred Gaussian Gram matrix of one subset.

    Attributes:
        gc: ``(n, n)`` float64 ``H_n G H_n``, exactly symmetric.
        gather: the matrix the split loop gathers from: ``gc`` itself, or its float32 copy.
        rowsum: ``(n,)`` float64 row sums of ``gc`` (zero up to rounding).
        offdiag_sum: ``Σ_{i≠j} (G_ij − 1)`` before centring (kernel units; ≤ 0), for the spread.
    """

    gc: np.ndarray
    gather: np.ndarray
    rowsum: np.ndarray
    offdiag_sum: float


def _rows_sq_distances(x: np.ndarray, threads: int = 1, scale: float | None = None) -> np.ndarray:
    """``(n, n)`` squared distances of the rows of ``x``, centred on their mean first.

    With ``scale`` (``2σ²``), rows so far apart that the inner-product formula would lose the
    digits that matter at that scale (an outlier; :data:`DISTANCE_TOLERANCE`) are summed pair by
    pair instead.
    """
    xc = x - x.mean(axis=0)
    g = xc @ xc.T
    if (
        scale is not None
        and inner_product_error(np.diagonal(g), x.shape[1]) > DISTANCE_TOLERANCE * scale
    ):
        return direct_squared_distances(x)
    _finish_sq_distances(g, threads)
    return g


def _centred_from_sq(d2: np.ndarray, sigma: float, precision: Precision) -> CentredGram:
    """Steps 2–3 of the module docstring, in place on ``d2``."""
    np.multiply(d2, -0.5 / (sigma * sigma), out=d2)
    e = np.expm1(d2, out=d2)
    r = e.sum(axis=1)
    total = float(r.sum())
    n = e.shape[0]
    _centre(e, r / n, total / (n * n))
    gather = e if precision == "float64" else e.astype(np.float32)
    return CentredGram(gc=e, gather=gather, rowsum=e.sum(axis=1), offdiag_sum=total)


def centred_gram_from_rows(x: np.ndarray, sigma: float, precision: Precision) -> CentredGram:
    """The centred Gram matrix of the rows of ``x`` (``(n, d)`` float64) at bandwidth σ."""
    return _centred_from_sq(_rows_sq_distances(x, scale=2.0 * sigma * sigma), sigma, precision)


def centred_gram_from_pool(
    d2: np.ndarray, pos: np.ndarray, sigma: float, precision: Precision
) -> CentredGram:
    """The centred Gram matrix of rows ``pos`` (in subset order) of a pool distance matrix."""
    block = np.empty((pos.size, pos.size))
    _gather_block(d2, pos, np.argsort(pos, kind="stable"), block)
    return _centred_from_sq(block, sigma, precision)


def offdiag_sum_from_rows(x: np.ndarray, sigma: float) -> float:
    """``Σ_{i≠j} (G_ij − 1)`` for the rows of ``x`` (the spread control's only input)."""
    d2 = _rows_sq_distances(x, scale=2.0 * sigma * sigma)
    np.multiply(d2, -0.5 / (sigma * sigma), out=d2)
    return float(np.expm1(d2, out=d2).sum())


def pool_sq_distances_matrix(x: np.ndarray, threads: int) -> np.ndarray:
    """``(U, U)`` squared distances of the rows of ``x`` (centred first; exactly symmetric).

    One large product (BLAS with its own threads), then the finishing pass on ``threads``.
    """
    return _rows_sq_distances(x, threads)


# --------------------------------------------------------------------------------------------
# One subset: the splits
# --------------------------------------------------------------------------------------------


def dropped_row(idx: np.ndarray, n: int) -> int:
    """The row every split leaves out when n is odd (−1 when n is even)."""
    if n % 2 == 0:
        return -1
    return int(n * (n - 1) // 2 - int(idx[0].sum()))


def first_half_row_sums(cg: CentredGram, idx: np.ndarray) -> np.ndarray:
    """``(S, n)`` row sums of ``Gc`` over each split's S1: one product ``E₁ Gc`` for all splits."""
    indicator = np.empty((idx.shape[0], cg.gc.shape[0]))
    _first_half_indicator(idx, indicator)
    return indicator @ cg.gc


def split_sums(cg: CentredGram, idx: np.ndarray, dropped: int, r1: np.ndarray) -> np.ndarray:
    """``(S, 9)`` sufficient sums of the splits ``idx`` (``(S, 2m)`` intp rows of the subset).

    ``r1`` holds the splits' S1 row sums (:func:`first_half_row_sums`).
    """
    out = np.empty((idx.shape[0], N_SUMS))
    zero = cg.gather.dtype.type(0.0)
    sort_pairs = cg.gather.nbytes > SORT_PAIRS_MIN_BYTES
    _split_sums_kernel(cg.gc, cg.gather, zero, idx, r1, cg.rowsum, dropped, sort_pairs, out)
    return out


# --------------------------------------------------------------------------------------------
# Many subsets on worker threads
# --------------------------------------------------------------------------------------------


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """One controller for the process: inspecting the loaded BLAS libraries costs milliseconds."""
    return ThreadpoolController()


def single_threaded_blas() -> AbstractContextManager[object]:
    """Hold every loaded BLAS library to one thread (each worker thread runs its own products)."""
    return _blas_controller().limit(limits=1, user_api="blas")


def batch_sums(
    prepare: Callable[[int], CentredGram],
    splits_of: Callable[[int], np.ndarray],
    n_sub: int,
    n: int,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Sufficient sums of every split of every subset.

    Args:
        prepare: ``t -> CentredGram`` of subset t.
        splits_of: ``t -> (K, 2m)`` intp split rows of subset t (drawn on the worker thread).
        n_sub: T. n: rows per subset. threads: worker threads.

    Returns:
        ``(T, K, 9)`` float64 sums and ``(T,)`` off-diagonal sums of ``G − 1``.

    With at least as many subsets as threads, each task is one whole subset; otherwise the
    Gram matrices and the row sums of all splits are prepared first (one task per subset) and
    each subset's splits are cut into one chunk per thread. Either way every number is computed
    by the same operations on the same inputs, so the result does not depend on ``threads``.
    """

    def whole(t: int) -> tuple[np.ndarray, float]:
        cg = prepare(t)
        idx = splits_of(t)
        return split_sums(
            cg, idx, dropped_row(idx, n), first_half_row_sums(cg, idx)
        ), cg.offdiag_sum

    def ready(t: int) -> tuple[CentredGram, np.ndarray, np.ndarray]:
        cg = prepare(t)
        idx = splits_of(t)
        return cg, idx, first_half_row_sums(cg, idx)

    with single_threaded_blas():
        if n_sub >= threads:
            parts = run_tasks(whole, range(n_sub), threads)
            return np.stack([p[0] for p in parts]), np.array([p[1] for p in parts])
        prepared = run_tasks(ready, range(n_sub), threads)
        n_splits = prepared[0][1].shape[0]
        per = -(-threads // n_sub)
        bounds = np.linspace(0, n_splits, min(per, n_splits) + 1).astype(int)
        chunks = [
            (t, lo, hi) for t in range(n_sub) for lo, hi in itertools.pairwise(bounds) if hi > lo
        ]

        def part(c: tuple[int, int, int]) -> np.ndarray:
            t, lo, hi = c
            cg, idx, r1 = prepared[t]
            return split_sums(cg, idx[lo:hi], dropped_row(idx, n), r1[lo:hi])

        pieces = run_tasks(part, chunks, threads)
        sums = np.empty((n_sub, n_splits, N_SUMS))
        for (t, lo, hi), piece in zip(chunks, pieces, strict=True):
            sums[t, lo:hi] = piece
        return sums, np.array([p[0].offdiag_sum for p in prepared])
