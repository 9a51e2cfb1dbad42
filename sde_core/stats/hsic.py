"""Gaussian kernels, bandwidth rules and the split-half HSIC engine (method §2).

The split-half HSIC of a subset S with activations ``A`` (shape ``(n, d)``) is a vector of K
values: for each of K seeded random permutations, the first ``m = n // 2`` rows (S1) are paired
row-by-row with the next m rows (S2) and the HSIC between the two halves is computed with
Gaussian RBF kernels ``k(a, b) = exp(-||a - b||² / (2σ²))``.

Speed: the n×n Gram matrix ``G`` of S is computed once; each split only gathers the blocks
``G[a, a]`` and ``G[b, b]`` and reduces them with the O(m²) identity

    tr(K H L H) = Σ K∘L − (2/m)·(K1)ᵀ(L1) + (1ᵀK1)(1ᵀL1)/m²

inside one fused, parallel numba loop in float64 (no m×m products, no temporaries). A torch path
(any ``device``, meant for CUDA) follows method §2's float32 rule: the Gram matrix is built and
double-centred in float64, and only the centred matrix is cast to float32 for the gathers, with
the per-row partial sums accumulated in float64.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from threadpoolctl import ThreadpoolController

from sde_core.common.validation import (
    as_float_matrix,
    as_index_vector,
    check_int,
    check_sigma,
    is_torch_tensor,
    squared_distances,
)
from sde_core.errors import InputError

__all__ = [
    "MAX_SPLITS",
    "MEDIAN_MAX_ROWS",
    "BatchStats",
    "Estimator",
    "SigmaRule",
    "gaussian_gram",
    "hsic",
    "kernel_spread",
    "resolve_sigma",
    "split_half_batch_stats",
    "split_half_hsic",
    "split_half_hsic_batch",
    "split_permutations",
    "subset_seeds",
]

SigmaRule = Literal["sqrt_dim", "median"] | float
Estimator = Literal["biased", "unbiased"]

#: Upper bound on the number of random splits: beyond this the H distribution is resolved far
#: better than any decision needs and the run only wastes time.
MAX_SPLITS = 100_000
#: The median rule uses at most this many (seeded, sampled) rows.
MEDIAN_MAX_ROWS = 1000
_ESTIMATORS = ("biased", "unbiased")


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _check_estimator(estimator: str) -> None:
    if not isinstance(estimator, str) or estimator not in _ESTIMATORS:
        raise InputError(f"estimator must be one of {_ESTIMATORS}; got {estimator!r}")


def _check_splits(n_splits: int) -> int:
    n_splits = check_int(n_splits, "n_splits")
    if n_splits < 1:
        raise InputError(f"n_splits must be at least 1; got {n_splits}")
    if n_splits > MAX_SPLITS:
        raise InputError(
            f"n_splits={n_splits} is more than sensible (max {MAX_SPLITS}); 200 splits "
            "resolve the H distribution well — use fewer"
        )
    return n_splits


def _check_seed(seed: int) -> int:
    return check_int(seed, "seed", minimum=0)


def _min_rows(estimator: str) -> int:
    # Two rows per half for the biased estimator; the unbiased one divides by m(m-3).
    return 4 if estimator == "biased" else 8


def _check_subset_size(n: int, estimator: str, what: str = "subset") -> None:
    need = _min_rows(estimator)
    if n < need:
        raise InputError(
            f"{what} has {n} rows; the {estimator} split-half test needs at least {need} "
            f"({need // 2} per half): use a larger subset"
        )


# --------------------------------------------------------------------------------------------
# Kernels and bandwidth
# --------------------------------------------------------------------------------------------


def resolve_sigma(rule: SigmaRule, acts: object, *, seed: int = 0) -> float:
    """Turn a bandwidth rule into a numeric σ (same units as the activations).

    Args:
        rule: ``"sqrt_dim"`` (σ = √d), ``"median"`` (median pairwise Euclidean distance over at
            most :data:`MEDIAN_MAX_ROWS` seeded, sampled rows of ``acts``) or a positive number.
        acts: ``(n, d)`` activations the rule looks at (for ``"median"`` pass the pooled
            reference activations).
        seed: seed of the row sample used by the median rule.

    Returns:
        σ > 0 as a Python float.
    """
    if isinstance(rule, str):
        arr = as_float_matrix(acts)
        if rule == "sqrt_dim":
            return float(np.sqrt(arr.shape[1]))
        if rule == "median":
            if arr.shape[0] < 2:
                raise InputError("the median σ rule needs at least 2 rows of activations")
            if arr.shape[0] > MEDIAN_MAX_ROWS:
                rows = np.random.default_rng(seed).choice(
                    arr.shape[0], MEDIAN_MAX_ROWS, replace=False
                )
                arr = arr[np.sort(rows)]
            d2 = squared_distances(arr)
            iu = np.triu_indices(arr.shape[0], k=1)
            med = float(np.median(np.sqrt(d2[iu])))
            if med <= 0:
                raise InputError(
                    "the median pairwise distance of these activations is 0 (all rows equal): "
                    "the median σ rule is undefined — use 'sqrt_dim' or a number"
                )
            return check_sigma(med, "the median-rule σ of these activations")
        raise InputError(f"unknown σ rule {rule!r}: use 'sqrt_dim', 'median' or a positive number")
    return check_sigma(rule)


def gaussian_gram(x: object, sigma: float, y: object | None = None) -> np.ndarray:
    """Gaussian RBF Gram matrix ``exp(-||x_i - y_j||² / (2σ²))``.

    Args:
        x: ``(n, d)`` array. y: optional ``(p, d)`` array (default ``x``).
        sigma: bandwidth σ > 0.

    Returns:
        ``(n, p)`` float64 matrix (``(n, n)`` with unit diagonal when ``y`` is omitted).
    """
    s = check_sigma(sigma)
    xa = as_float_matrix(x, "x")
    if y is None:
        d2 = squared_distances(xa)
    else:
        ya = as_float_matrix(y, "y")
        if ya.shape[1] != xa.shape[1]:
            raise InputError(
                f"x and y must have the same number of columns; got {xa.shape[1]} and {ya.shape[1]}"
            )
        d2 = squared_distances(xa, ya)
    d2 *= -0.5 / (s * s)
    return np.exp(d2, out=d2)


def hsic(
    x: object,
    y: object,
    sigma_x: SigmaRule,
    sigma_y: SigmaRule | None = None,
    estimator: Estimator = "biased",
) -> float:
    """HSIC between paired rows ``x[i] ↔ y[i]`` with Gaussian kernels.

    Args:
        x: ``(m, p)`` array; y: ``(m, q)`` array with the same number of rows.
        sigma_x: bandwidth rule or value for x; sigma_y: for y (default: the rule of x applied
            to y, or the same value).
        estimator: ``"biased"`` — ``tr(KHLH)/(m-1)²`` (Gretton et al. 2005) — or
            ``"unbiased"`` — the U-statistic of Song et al. (2012).

    Returns:
        The HSIC estimate (float, kernel units²).
    """
    _check_estimator(estimator)
    xa, ya = as_float_matrix(x, "x"), as_float_matrix(y, "y")
    if xa.shape[0] != ya.shape[0]:
        raise InputError(
            f"x and y must have the same number of rows (paired samples); got {xa.shape[0]} "
            f"and {ya.shape[0]}"
        )
    m = xa.shape[0]
    need = _min_rows(estimator) // 2
    if m < need:
        raise InputError(f"the {estimator} HSIC needs at least {need} paired rows; got {m}")
    sx = resolve_sigma(sigma_x, xa)
    sy = resolve_sigma(sigma_x if sigma_y is None else sigma_y, ya)
    k = gaussian_gram(xa, sx)
    lm = gaussian_gram(ya, sy)
    sums = _sums_from_rows(
        k.sum(1)[None], lm.sum(1)[None], (k * lm).sum(1)[None], np.diag(k)[None], np.diag(lm)[None]
    )
    return float(_values_from_sums(sums, m, estimator)[0])


# --------------------------------------------------------------------------------------------
# Split-half engine
# --------------------------------------------------------------------------------------------


def _rng(seed: int | np.random.SeedSequence) -> np.random.Generator:
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    return np.random.default_rng(_check_seed(seed))


def split_permutations(n: int, n_splits: int, seed: int | np.random.SeedSequence = 0) -> np.ndarray:
    """The K random splits of a subset of n rows, as method §2 draws them.

    If n is odd one row is dropped at random (once, with the same RNG); each split is then a
    random permutation of the kept rows whose first ``m = n // 2`` entries form S1 and the next m
    form S2 (row i of S1 paired with row i of S2).

    Returns:
        ``(n_splits, 2m)`` int64 array of row indices into the subset.
    """
    n_splits = _check_splits(n_splits)
    n = check_int(n, "n (the subset's rows)", minimum=2)
    rng = _rng(seed)
    rows = np.arange(n, dtype=np.int64)
    if n % 2:
        rows = np.delete(rows, rng.integers(n))
    # One vectorised call: every row of the tile is shuffled independently.
    return rng.permuted(np.tile(rows, (n_splits, 1)), axis=1)


@numba.njit(parallel=True, fastmath=False, cache=True, nogil=True)
def _split_sums_kernel(
    gram: np.ndarray, idx: np.ndarray, unbiased: bool
) -> np.ndarray:  # pragma: no cover - compiled
    """Fused gather-and-reduce over splits.

    gram: (N, N) float64 symmetric; idx: (S, 2m) int64 rows of ``gram`` (S1 then S2).
    Returns (S, 9) sums: Σ K∘L, 1ᵀK1, 1ᵀL1, (K1)ᵀ(L1), tr K, tr L, Σ K_ii L_ii, (K1)ᵀdiag L,
    (L1)ᵀdiag K — the last four only when ``unbiased``. The symmetric upper triangle is visited
    once (off-diagonal terms counted twice).
    """
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


def _sums_from_rows(
    rk: np.ndarray, rl: np.ndarray, row_kl: np.ndarray, dk: np.ndarray, dl: np.ndarray
) -> np.ndarray:
    """The nine sufficient sums (layout of :func:`_split_sums_kernel`) from per-row pieces.

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


def _values_from_sums(sums: np.ndarray, m: int, estimator: str) -> np.ndarray:
    """HSIC values from ``(S, 9)`` sufficient sums of two m×m kernel blocks K, L per row.

    Columns: Σ K∘L, 1ᵀK1, 1ᵀL1, (K1)ᵀ(L1), tr K, tr L, Σ K_ii L_ii, (K1)ᵀdiag L, (L1)ᵀdiag K.
    Biased: ``tr(KHLH)/(m-1)²`` via the O(m²) identity. Unbiased: Song et al. (2012) with the
    diagonals of K and L zeroed (K~, L~).
    """
    skl, sk, sl, rklr, tk, tl, tkl, rkd, rld = sums.T
    if estimator == "biased":
        return (skl - 2.0 * rklr / m + sk * sl / (m * m)) / ((m - 1) ** 2)
    s_kl = skl - tkl
    s_k = sk - tk
    s_l = sl - tl
    r_kl = rklr - rkd - rld + tkl
    return (s_kl + s_k * s_l / ((m - 1) * (m - 2)) - 2.0 * r_kl / (m - 2)) / (m * (m - 3))


def _torch_device(device: object, acts: object) -> object | None:
    """The torch device to use, or None for the numba float64 CPU path."""
    if device is None:
        if is_torch_tensor(acts) and acts.device.type != "cpu":  # type: ignore[attr-defined]
            return acts.device  # type: ignore[attr-defined]
        return None
    import torch

    try:
        dev = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"unknown device {device!r} ({exc}); use None, 'cpu' or 'cuda'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError("device 'cuda' requested but no CUDA GPU is available: use device=None")
    return dev


def _torch_split_values(
    gram: object, idx: np.ndarray, m: int, estimator: str, device: object
) -> np.ndarray:
    """Split-half HSIC on a torch device following method §2's float32 rule.

    The Gram matrix is double-centred in float64 (both estimators are invariant to
    ``G -> H_n G H_n``), cast to float32 for the gathers and products, and each row's partial
    sums (m float32 terms) are accumulated across rows in float64.
    """
    import torch

    g = torch.as_tensor(gram, dtype=torch.float64, device=device)
    g = g - g.mean(0, keepdim=True)
    g = g - g.mean(1, keepdim=True)
    g32 = g.to(torch.float32)
    ix = torch.as_tensor(idx, device=device)
    # ~256 MiB of float32 temporaries per chunk.
    chunk = max(1, int(2**26 // (3 * m * m)))
    out = []
    for start in range(0, ix.shape[0], chunk):
        part = ix[start : start + chunk]
        a, b = part[:, :m], part[:, m:]
        k = g32[a[:, :, None], a[:, None, :]]
        lmat = g32[b[:, :, None], b[:, None, :]]
        pieces = [
            t.double().cpu().numpy()
            for t in (
                k.sum(2),
                lmat.sum(2),
                (k * lmat).sum(2),
                torch.diagonal(k, dim1=1, dim2=2),
                torch.diagonal(lmat, dim1=1, dim2=2),
            )
        ]
        out.append(_sums_from_rows(*pieces))
    return _values_from_sums(np.concatenate(out), m, estimator)


def _gram_on(arr: np.ndarray, sigma: float, device: object | None) -> object:
    """Gaussian Gram matrix in float64: numpy on the CPU path, a torch tensor on ``device``."""
    if device is None:
        return gaussian_gram(arr, sigma)
    import torch

    x = torch.as_tensor(arr, dtype=torch.float64, device=device)
    sq = (x * x).sum(1)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)).clamp_min_(0.0)
    d2.fill_diagonal_(0.0)
    return torch.exp(d2 * (-0.5 / (sigma * sigma)))


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """One controller for the process: inspecting the loaded BLAS libraries costs milliseconds."""
    return ThreadpoolController()


def _cpu_gram(arr: np.ndarray, sigma: float, device: object | None) -> object:
    """:func:`_gram_on` with single-threaded BLAS on the CPU path.

    OpenBLAS worker threads keep spinning after a product and steal the cores from the fused
    kernel that follows (measured at n=1000, d=512 on 2 cores: 56 ms with multi-threaded BLAS,
    41 ms with one thread).
    """
    if device is not None:
        return _gram_on(arr, sigma, device)
    with _blas_controller().limit(limits=1, user_api="blas"):
        return _gram_on(arr, sigma, device)


def _split_values(
    gram: object, idx: np.ndarray, estimator: str, device: object | None
) -> np.ndarray:
    m = idx.shape[1] // 2
    if device is not None:
        return _torch_split_values(gram, idx, m, estimator, device)
    sums = _split_sums_kernel(gram, np.ascontiguousarray(idx), estimator == "unbiased")  # type: ignore[arg-type]
    return _values_from_sums(sums, m, estimator)


def split_half_hsic(
    acts: object,
    n_splits: int = 200,
    sigma: SigmaRule = "sqrt_dim",
    estimator: Estimator = "biased",
    seed: int | np.random.SeedSequence = 0,
    device: object | None = None,
) -> np.ndarray:
    """H(S, h): split-half HSIC of one subset over ``n_splits`` seeded random splits (method §2).

    Args:
        acts: ``(n, d)`` activations of the subset (numpy array or torch tensor).
        n_splits: K, the number of random splits (default 200).
        sigma: ``"sqrt_dim"`` (default), ``"median"`` (of this subset; pass a float to use the
            pooled references' median) or a positive float.
        estimator: ``"biased"`` (default) or ``"unbiased"``.
        seed: seed of the splits (an int or a :class:`numpy.random.SeedSequence`).
        device: None for the fused float64 CPU kernel; a torch device (``"cuda"``) for the
            float32-on-centred-Gram path.

    Returns:
        ``(n_splits,)`` float64 array of HSIC values.
    """
    _check_estimator(estimator)
    n_splits = _check_splits(n_splits)
    dev = _torch_device(device, acts)
    arr = as_float_matrix(acts)
    _check_subset_size(arr.shape[0], estimator)
    s = resolve_sigma(sigma, arr)
    idx = split_permutations(arr.shape[0], n_splits, seed)
    return _split_values(_cpu_gram(arr, s, dev), idx, estimator, dev)


def _as_subsets(subsets: object, n_rows: int) -> np.ndarray:
    try:
        sub = np.asarray(subsets)
    except (TypeError, ValueError) as exc:
        raise InputError(f"subsets must be a (T, n) integer array; got {exc}") from None
    if sub.ndim != 2 or sub.shape[0] == 0 or sub.shape[1] == 0:
        raise InputError(
            f"subsets must be a non-empty (T, n) integer array of row indices (one row per "
            f"subset, all of size n); got shape {sub.shape}"
        )
    sub = as_index_vector(sub.ravel(), n_rows, "subsets (rows of acts)").reshape(sub.shape)
    for t, row in enumerate(sub):
        if np.unique(row).size != row.size:
            raise InputError(
                f"subset {t} repeats a row index; subsets are drawn without replacement"
            )
    return sub.astype(np.int64)


def subset_seeds(seed: int, n_subsets: int) -> list[np.random.SeedSequence]:
    """Independent per-subset split seeds used by :func:`split_half_hsic_batch`."""
    n_subsets = check_int(n_subsets, "n_subsets", minimum=0)
    return np.random.SeedSequence(_check_seed(seed)).spawn(n_subsets)


#: A Gram matrix over the union of all subsets' rows is shared when it stays cache-resident
#: (1448² float64 ≈ 16 MiB); beyond that the random gathers of the fused kernel would go to DRAM
#: (measured ~5× slower per pair), so each subset gets its own small Gram matrix instead.
_UNION_GRAM_MAX_ROWS = 1448


@dataclass(frozen=True)
class BatchStats:
    """Split-half HSIC and spread of many subsets, from one shared Gram matrix.

    Attributes:
        h: ``(T, K)`` split-half HSIC values (float64).
        spread: ``(T,)`` spread control ``(1 − mean off-diagonal kernel)² / (n/2)``.
    """

    h: np.ndarray
    spread: np.ndarray


@numba.njit(parallel=True, cache=True, nogil=True)
def _offdiag_means_kernel(gram: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Mean off-diagonal entry of ``gram[pos[t]][:, pos[t]]`` for every row t of ``pos``."""
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


def _offdiag_means(gram: object, pos: np.ndarray) -> np.ndarray:
    if isinstance(gram, np.ndarray):
        return _offdiag_means_kernel(gram, np.ascontiguousarray(pos))
    import torch

    ix = torch.as_tensor(pos, device=gram.device)  # type: ignore[attr-defined]
    n = pos.shape[1]
    out = []
    for row in ix:
        block = gram[row[:, None], row[None, :]]  # type: ignore[index]
        out.append(float((block.sum() - torch.diagonal(block).sum()) / (n * (n - 1))))
    return np.array(out)


def _spread_from_means(mean_off: np.ndarray, n: int) -> np.ndarray:
    return (1.0 - mean_off) ** 2 / (n / 2)


def _gram_blocks(
    arr: np.ndarray, sub: np.ndarray, sigma: float, device: object | None
) -> Iterator[tuple[object, np.ndarray, slice]]:
    """Gram matrices covering the subsets: ``(gram, (t, n) row positions in it, subset slice)``.

    One Gram over the union of the subsets' rows when it has at most
    :data:`_UNION_GRAM_MAX_ROWS` rows, else one Gram per subset.
    """
    union = np.unique(sub)
    if union.size <= _UNION_GRAM_MAX_ROWS:
        yield _cpu_gram(arr[union], sigma, device), np.searchsorted(union, sub), slice(None)
        return
    local = np.arange(sub.shape[1])[None, :]
    # Small products: multi-threaded BLAS only adds hand-off cost and fights numba's threads.
    with _blas_controller().limit(limits=1, user_api="blas"):
        for t in range(sub.shape[0]):
            yield _gram_on(arr[sub[t]], sigma, device), local, slice(t, t + 1)


def split_half_batch_stats(
    acts: object,
    subsets: object,
    n_splits: int = 200,
    sigma: float = 1.0,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
) -> BatchStats:
    """Split-half HSIC *and* spread of many subsets of one activation matrix at once.

    Row t of ``h`` equals ``split_half_hsic(acts[subsets[t]], n_splits, sigma, estimator,
    seed=subset_seeds(seed, T)[t])``. When the subsets together touch at most
    ``_UNION_GRAM_MAX_ROWS`` rows, one Gram matrix over their union is built and every split of
    every subset is reduced in a single fused parallel pass; the spread control reads the same
    Gram matrix.

    Args:
        acts: ``(N, d)`` activations of a pool (e.g. D_f, D_r or D_te).
        subsets: ``(T, n)`` integer row indices into ``acts``, one row per subset.
        n_splits: K splits per subset. sigma: a numeric σ (resolve rules once beforehand with
            :func:`resolve_sigma` so all subsets share it). estimator, device: as in
            :func:`split_half_hsic`.
        seed: base seed; subset t uses the t-th spawned child seed.
    """
    _check_estimator(estimator)
    n_splits = _check_splits(n_splits)
    dev = _torch_device(device, acts)
    arr = as_float_matrix(acts)
    sub = _as_subsets(subsets, arr.shape[0])
    n_sub, n = sub.shape
    _check_subset_size(n, estimator)
    s = check_sigma(sigma)
    seeds = subset_seeds(seed, n_sub)
    local = np.stack([split_permutations(n, n_splits, sd) for sd in seeds])  # (T, K, 2m)
    h = np.empty((n_sub, n_splits))
    mean_off = np.empty(n_sub)
    for gram, pos, part in _gram_blocks(arr, sub, s, dev):
        idx = np.take_along_axis(pos[:, None, :], local[part], axis=2).reshape(-1, local.shape[2])
        h[part] = _split_values(gram, idx, estimator, dev).reshape(-1, n_splits)
        mean_off[part] = _offdiag_means(gram, pos)
    return BatchStats(h=h, spread=_spread_from_means(mean_off, n))


def split_half_hsic_batch(
    acts: object,
    subsets: object,
    n_splits: int = 200,
    sigma: float = 1.0,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
) -> np.ndarray:
    """The ``(T, n_splits)`` H values of :func:`split_half_batch_stats` (same arguments)."""
    return split_half_batch_stats(acts, subsets, n_splits, sigma, estimator, seed, device).h


def kernel_spread(acts: object, subsets: object | None = None, sigma: float = 1.0) -> np.ndarray:
    """Spread control of method §9: ``(1 − mean off-diagonal kernel value over S)² / (n/2)``.

    This pairing-free quantity is what the biased split-half HSIC mostly tracks; it is reported
    beside the subset score so a user can see what drives a verdict.

    Args:
        acts: ``(N, d)`` activations. subsets: ``(T, n)`` row indices (default: one subset made
            of all rows). sigma: numeric σ > 0.

    Returns:
        ``(T,)`` float64 array.
    """
    arr = as_float_matrix(acts)
    s = check_sigma(sigma)
    sub = (
        np.arange(arr.shape[0])[None, :] if subsets is None else _as_subsets(subsets, arr.shape[0])
    )
    n = sub.shape[1]
    if n < 2:
        raise InputError("the spread of a subset needs at least 2 rows")
    mean_off = np.empty(sub.shape[0])
    for gram, pos, part in _gram_blocks(arr, sub, s, None):
        mean_off[part] = _offdiag_means(gram, pos)
    return _spread_from_means(mean_off, n)
