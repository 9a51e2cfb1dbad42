"""Gaussian kernels, bandwidth rules and the split-half HSIC engine (method §2).

The split-half HSIC of a subset S with activations ``A`` (shape ``(n, d)``) is a vector of K
values: for each of K seeded random permutations, the first ``m = n // 2`` rows (S1) are paired
row-by-row with the next m rows (S2) and the HSIC between the two halves is computed with
Gaussian RBF kernels ``k(a, b) = exp(-||a - b||² / (2σ²))``.

Computation (method §2, "Computation"): each subset's Gram matrix is computed once, as
``G − 1 = expm1(−D²/(2σ²))`` and double-centred in float64 (``Gc = H_n G H_n``; both estimators
are invariant to it); each split then gathers the two m×m blocks of ``Gc`` and reduces them with
the O(m²) identity

    tr(K H L H) = Σ K∘L − (2/m)·(K1)ᵀ(L1) + (1ᵀK1)(1ᵀL1)/m²

in a compiled loop. The engines live in :mod:`sde_core.stats.hsic_cpu` (numba, float64 by
default, subsets spread over worker threads) and :mod:`sde_core.stats.hsic_torch` (torch,
batched, float32 gathers on the centred float64 Gram by default — used automatically when a
CUDA GPU is available). This module validates input, chooses the engine and turns the sums into
HSIC values; the splits are drawn by :mod:`sde_core.stats.hsic_splits`.

Reuse across evaluations: :func:`~sde_core.stats.hsic_splits.draw_batch_splits` draws the
splits of many subsets once (they depend only on n, K and the seed, not on the model or σ), and
:func:`~sde_core.stats.hsic_pool.pool_sq_distances` computes the squared distances of a pool
once, so that a σ change recomputes only ``expm1``, the centring and the split loop.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sde_core.common.sigma import SQRT_DIM, parse_sigma
from sde_core.common.threads import resolve_threads, run_tasks
from sde_core.common.validation import (
    DISTANCE_TOLERANCE,
    as_float_matrix,
    as_index_vector,
    check_sigma,
    is_torch_tensor,
    squared_distances,
)
from sde_core.errors import InputError
from sde_core.stats.hsic_cpu import (
    Precision,
    batch_sums,
    centred_gram_from_pool,
    centred_gram_from_rows,
    offdiag_sum_from_rows,
    single_threaded_blas,
    sums_from_rows,
    values_from_sums,
)
from sde_core.stats.hsic_pool import PoolDistances, pool_positions
from sde_core.stats.hsic_splits import (
    BatchSplits,
    check_batch_splits,
    check_splits,
    split_permutations,
    subset_seeds,
)

__all__ = [
    "MEDIAN_MAX_ROWS",
    "Backend",
    "BatchStats",
    "Estimator",
    "PrecisionRule",
    "SigmaRule",
    "engine_device",
    "gaussian_gram",
    "hsic",
    "kernel_spread",
    "resolve_sigma",
    "split_half_batch_stats",
    "split_half_hsic",
    "split_half_hsic_batch",
]

#: A bandwidth in the one σ syntax of :mod:`sde_core.common.sigma` (a rule's text or σ itself).
SigmaRule = str | float
Estimator = Literal["biased", "unbiased"]
#: ``"auto"``: float64 on the numba CPU engine, float32 gathers on the torch engine.
PrecisionRule = Literal["auto", "float64", "float32"]
#: ``"auto"``: torch on a GPU (or for a GPU tensor), numba on the CPU.
Backend = Literal["auto", "numba", "torch"]

#: The median rule uses at most this many (seeded, sampled) rows.
MEDIAN_MAX_ROWS = 1000
_ESTIMATORS = ("biased", "unbiased")
_PRECISIONS = ("auto", "float64", "float32")
_BACKENDS = ("auto", "numba", "torch")


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _check_estimator(estimator: str) -> None:
    if not isinstance(estimator, str) or estimator not in _ESTIMATORS:
        raise InputError(f"estimator must be one of {_ESTIMATORS}; got {estimator!r}")


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
        rule: a σ in the syntax of :mod:`sde_core.common.sigma`: the √d rule (σ = √d), its
            multiple f·√d, the median rule (median pairwise Euclidean distance over at most
            :data:`MEDIAN_MAX_ROWS` seeded, sampled rows of ``acts``) or a positive number.
        acts: ``(n, d)`` activations the rule looks at (for the median rule pass the pooled
            reference activations).
        seed: seed of the row sample used by the median rule.

    Returns:
        σ > 0 as a Python float.

    Examples:
        >>> x = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
        >>> resolve_sigma("sqrt_dim", x), resolve_sigma("median", x), resolve_sigma(0.5, x)
        (1.4142135623730951, 5.0, 0.5)
        >>> resolve_sigma("2*sqrt_dim", x)
        2.8284271247461903
    """
    spec = parse_sigma(rule, "σ rule")
    if spec.kind == "value":
        return check_sigma(spec.number)
    arr = as_float_matrix(acts)
    factor = spec.sqrt_d_factor()
    if factor is not None:
        return check_sigma(factor * float(np.sqrt(arr.shape[1])), f"σ = {spec.text()}")
    if arr.shape[0] < 2:
        raise InputError("the median σ rule needs at least 2 rows of activations")
    if arr.shape[0] > MEDIAN_MAX_ROWS:
        rows = np.random.default_rng(seed).choice(arr.shape[0], MEDIAN_MAX_ROWS, replace=False)
        arr = arr[np.sort(rows)]
    d2 = squared_distances(arr)
    iu = np.triu_indices(arr.shape[0], k=1)
    med = float(np.median(np.sqrt(d2[iu])))
    if med <= 0:
        raise InputError(
            "the median pairwise distance of these activations is 0 (all rows equal): "
            "the median σ rule is undefined — use the √d rule or a number"
        )
    return check_sigma(med, "the median-rule σ of these activations")


def gaussian_gram(x: object, sigma: float, y: object | None = None) -> np.ndarray:
    """Gaussian RBF Gram matrix ``exp(-||x_i - y_j||² / (2σ²))``.

    Args:
        x: ``(n, d)`` array. y: optional ``(p, d)`` array (default ``x``).
        sigma: bandwidth σ > 0.

    Returns:
        ``(n, p)`` float64 matrix (``(n, n)`` with unit diagonal when ``y`` is omitted).

    Examples:
        >>> print(gaussian_gram([[0.0], [1.0]], sigma=1.0).round(4))
        [[1.     0.6065]
         [0.6065 1.    ]]
    """
    s = check_sigma(sigma)
    xa = as_float_matrix(x, "x")
    if y is None:
        d2 = squared_distances(xa, scale=2.0 * s * s)
    else:
        ya = as_float_matrix(y, "y")
        if ya.shape[1] != xa.shape[1]:
            raise InputError(
                f"x and y must have the same number of columns; got {xa.shape[1]} and {ya.shape[1]}"
            )
        d2 = squared_distances(xa, ya, scale=2.0 * s * s)
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

    Both kernel matrices are double-centred in float64 before the O(m²) identity (method §2),
    so near-constant inputs keep their digits.

    Args:
        x: ``(m, p)`` array; y: ``(m, q)`` array with the same number of rows.
        sigma_x: bandwidth rule or value for x; sigma_y: for y (default: the rule of x applied
            to y, or the same value).
        estimator: ``"biased"`` — ``tr(KHLH)/(m-1)²`` (Gretton et al. 2005) — or
            ``"unbiased"`` — the U-statistic of Song et al. (2012).

    Returns:
        The HSIC estimate (float, kernel units²).

    Examples:
        Identical halves are strongly dependent, independent ones barely:

        >>> rng = np.random.default_rng(0)
        >>> a, b = rng.normal(size=(40, 3)), rng.normal(size=(40, 3))
        >>> round(hsic(a, a, "sqrt_dim"), 4), round(hsic(a, b, "sqrt_dim"), 4)
        (0.0469, 0.0067)
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
    k = centred_gram_from_rows(xa, sx, "float64").gc
    lm = centred_gram_from_rows(ya, sy, "float64").gc
    sums = sums_from_rows(
        k.sum(1)[None], lm.sum(1)[None], (k * lm).sum(1)[None], np.diag(k)[None], np.diag(lm)[None]
    )
    return float(values_from_sums(sums, m, estimator)[0])


# --------------------------------------------------------------------------------------------
# Engine choice
# --------------------------------------------------------------------------------------------


@functools.cache
def _cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (torch is not imported when no GPU driver is loaded)."""
    if "torch" not in sys.modules and not os.path.exists("/proc/driver/nvidia"):
        return False
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the project
        return False
    return bool(torch.cuda.is_available())


def engine_device(device: str) -> str:
    """The device a setting's ``device`` runs on here: ``"auto"`` is ``"cuda"`` when torch sees
    a CUDA GPU and ``"cpu"`` otherwise; any other name is itself."""
    if device == "auto":
        return "cuda" if _cuda_available() else "cpu"
    return device


def _engine(device: object | None, backend: str, acts: object) -> object | None:
    """The torch device to run on, or None for the numba CPU engine.

    ``device`` None or ``"auto"``: the device of a GPU tensor, else a CUDA GPU when one is
    available, else the CPU. ``"cpu"`` runs the numba engine unless ``backend="torch"``.
    """
    if backend not in _BACKENDS:
        raise InputError(f"backend must be one of {_BACKENDS}; got {backend!r}")
    if device is None or (isinstance(device, str) and device == "auto"):
        if backend == "numba":
            return None
        if is_torch_tensor(acts) and acts.device.type != "cpu":  # type: ignore[attr-defined]
            device = acts.device  # type: ignore[attr-defined]
        elif _cuda_available():
            device = "cuda"
        else:
            device = "cpu"
    if isinstance(device, str) and device == "cpu" and backend != "torch":
        return None
    import torch

    try:
        dev = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError) as exc:
        raise InputError(
            f"unknown device {device!r} ({exc}); use None/'auto', 'cpu' or 'cuda'"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "device 'cuda' requested but no CUDA GPU is available: use device=None (auto) or 'cpu'"
        )
    if dev.type == "cpu" and backend != "torch":
        return None
    if backend == "numba":
        raise InputError(
            f"the numba backend runs on the CPU only; got device {device!r}: use "
            "backend='auto' or device='cpu'"
        )
    return dev


def _precision(precision: str, dev: object | None) -> Precision:
    if precision not in _PRECISIONS:
        raise InputError(f"precision must be one of {_PRECISIONS}; got {precision!r}")
    if precision == "auto":
        return "float64" if dev is None else "float32"
    return precision  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Split-half HSIC
# --------------------------------------------------------------------------------------------


def _run(
    arr: np.ndarray,
    sub: np.ndarray,
    splits_of: Callable[[int], np.ndarray],
    sigma: float,
    estimator: str,
    dev: object | None,
    precision: Precision,
    pool: tuple[np.ndarray, np.ndarray] | None,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(T, K)`` H values and ``(T,)`` off-diagonal sums of ``G − 1`` of every subset."""
    n_sub, n = sub.shape
    if dev is not None:
        from sde_core.stats.hsic_torch import batch_sums_torch

        sums, off = batch_sums_torch(arr, sub, splits_of, sigma, dev, precision, pool)
    elif pool is None:
        sums, off = batch_sums(
            lambda t: centred_gram_from_rows(arr[sub[t]], sigma, precision),
            splits_of,
            n_sub,
            n,
            threads,
        )
    else:
        pos, d2 = pool
        sums, off = batch_sums(
            lambda t: centred_gram_from_pool(d2, pos[t], sigma, precision),
            splits_of,
            n_sub,
            n,
            threads,
        )
    return values_from_sums(sums, n // 2, estimator), off


def split_half_hsic(
    acts: object,
    n_splits: int = 200,
    sigma: SigmaRule = SQRT_DIM,
    estimator: Estimator = "biased",
    seed: int | np.random.SeedSequence = 0,
    device: object | None = None,
    *,
    precision: PrecisionRule = "auto",
    backend: Backend = "auto",
    threads: int | None = None,
) -> np.ndarray:
    """H(S, h): split-half HSIC of one subset over ``n_splits`` seeded random splits (method §2).

    Args:
        acts: ``(n, d)`` activations of the subset (numpy array or torch tensor).
        n_splits: K, the number of random splits (default 200).
        sigma: a σ of :mod:`sde_core.common.sigma` (default the √d rule; the median rule
            looks at this subset: pass a float to use the pooled references' median).
        estimator: ``"biased"`` (default) or ``"unbiased"``.
        seed: seed of the splits (an int or a :class:`numpy.random.SeedSequence`).
        device: None or ``"auto"`` (default): a CUDA GPU when available (or the device of a GPU
            tensor), else the CPU; ``"cpu"``: the numba CPU engine; ``"cuda"``/a torch device:
            the torch engine there.
        precision: gather precision on the centred Gram: ``"auto"`` (float64 on the CPU
            engine, float32 on the torch engine), ``"float64"`` or ``"float32"``.
        backend: ``"auto"``, ``"numba"`` (CPU only) or ``"torch"`` (e.g. torch on the CPU).
        threads: CPU worker threads (default: the usable CPUs, see
            :func:`sde_core.common.threads.usable_cpus`).

    Returns:
        ``(n_splits,)`` float64 array of HSIC values.

    Examples:
        >>> acts = np.random.default_rng(0).normal(size=(20, 4))
        >>> h = split_half_hsic(acts, n_splits=3, seed=0, device="cpu")
        >>> h.shape, bool(np.all(h > 0))
        ((3,), True)
    """
    _check_estimator(estimator)
    n_splits = check_splits(n_splits)
    dev = _engine(device, backend, acts)
    prec = _precision(precision, dev)
    n_threads = resolve_threads(threads)
    arr = as_float_matrix(acts)
    _check_subset_size(arr.shape[0], estimator)
    s = resolve_sigma(sigma, arr)
    idx = split_permutations(arr.shape[0], n_splits, seed)
    sub = np.arange(arr.shape[0])[None, :]
    h, _ = _run(arr, sub, lambda t: idx, s, estimator, dev, prec, None, n_threads)
    return h[0]


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
    ordered = np.sort(sub, axis=1)
    repeats = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if repeats.any():
        raise InputError(
            f"subset {int(np.argmax(repeats))} repeats a row index; subsets are drawn without "
            "replacement"
        )
    return sub.astype(np.int64)


@dataclass(frozen=True)
class BatchStats:
    """Split-half HSIC and spread of many subsets.

    Attributes:
        h: ``(T, K)`` split-half HSIC values (float64).
        spread: ``(T,)`` spread control ``(1 − mean off-diagonal kernel)² / (n/2)``.
    """

    h: np.ndarray
    spread: np.ndarray


def _spread_from_offdiag(offdiag_sum: np.ndarray, n: int) -> np.ndarray:
    """``(1 − mean off-diagonal G)² / (n/2)`` from ``Σ_{i≠j} (G_ij − 1)``."""
    return (offdiag_sum / (n * (n - 1))) ** 2 / (n / 2)


def split_half_batch_stats(
    acts: object,
    subsets: object,
    n_splits: int = 200,
    sigma: float = 1.0,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
    *,
    precision: PrecisionRule = "auto",
    backend: Backend = "auto",
    splits: BatchSplits | None = None,
    distances: PoolDistances | None = None,
    threads: int | None = None,
) -> BatchStats:
    """Split-half HSIC *and* spread of many subsets of one activation matrix at once.

    Row t of ``h`` equals ``split_half_hsic(acts[subsets[t]], n_splits, sigma, estimator,
    seed=subset_seeds(seed, T)[t])``. On the CPU the subsets are spread over worker threads
    (one subset per task); on the torch engine they are processed in groups.

    Args:
        acts: ``(N, d)`` activations of a pool (e.g. D_f, D_r or D_te).
        subsets: ``(T, n)`` integer row indices into ``acts``, one row per subset.
        n_splits: K splits per subset. sigma: a numeric σ (resolve rules once beforehand with
            :func:`resolve_sigma` so all subsets share it). estimator, device, precision,
            backend, threads: as in :func:`split_half_hsic`.
        seed: base seed; subset t uses the t-th spawned child seed.
        splits: the same splits drawn beforehand by ``draw_batch_splits(n, n_splits, seed, T)``
            (:mod:`sde_core.stats.hsic_splits`; reuse across models and σ).
        distances: squared distances of the pool from
            :func:`~sde_core.stats.hsic_pool.pool_sq_distances` covering every subset row
            (reuse across σ: only ``expm1`` and the split loop are recomputed).
    """
    _check_estimator(estimator)
    n_splits = check_splits(n_splits)
    dev = _engine(device, backend, acts)
    prec = _precision(precision, dev)
    n_threads = resolve_threads(threads)
    arr = as_float_matrix(acts)
    sub = _as_subsets(subsets, arr.shape[0])
    n_sub, n = sub.shape
    _check_subset_size(n, estimator)
    s = check_sigma(sigma)
    if splits is None:
        seeds = subset_seeds(seed, n_sub)

        def splits_of(t: int) -> np.ndarray:
            return split_permutations(n, n_splits, seeds[t])

    else:
        check_batch_splits(splits, n, n_splits, seed, n_sub)
        splits_of = splits.rows
    pool = None
    if distances is not None:
        positions = pool_positions(distances, arr.shape, sub)
        if distances.error <= DISTANCE_TOLERANCE * 2.0 * s * s:
            pool = (positions, distances.d2)
    h, off = _run(arr, sub, splits_of, s, estimator, dev, prec, pool, n_threads)
    return BatchStats(h=h, spread=_spread_from_offdiag(off, n))


def split_half_hsic_batch(
    acts: object,
    subsets: object,
    n_splits: int = 200,
    sigma: float = 1.0,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
    *,
    precision: PrecisionRule = "auto",
    backend: Backend = "auto",
    splits: BatchSplits | None = None,
    distances: PoolDistances | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """The ``(T, n_splits)`` H values of :func:`split_half_batch_stats` (same arguments)."""
    return split_half_batch_stats(
        acts,
        subsets,
        n_splits,
        sigma,
        estimator,
        seed,
        device,
        precision=precision,
        backend=backend,
        splits=splits,
        distances=distances,
        threads=threads,
    ).h


def kernel_spread(
    acts: object,
    subsets: object | None = None,
    sigma: float = 1.0,
    *,
    threads: int | None = None,
) -> np.ndarray:
    """Spread control of method §9: ``(1 − mean off-diagonal kernel value over S)² / (n/2)``.

    This pairing-free quantity is what the biased split-half HSIC mostly tracks; it is reported
    beside the subset score so a user can see what drives a verdict.

    Args:
        acts: ``(N, d)`` activations. subsets: ``(T, n)`` row indices (default: one subset made
            of all rows). sigma: numeric σ > 0. threads: CPU worker threads.

    Returns:
        ``(T,)`` float64 array.
    """
    arr = as_float_matrix(acts)
    s = check_sigma(sigma)
    n_threads = resolve_threads(threads)
    sub = (
        np.arange(arr.shape[0])[None, :] if subsets is None else _as_subsets(subsets, arr.shape[0])
    )
    n = sub.shape[1]
    if n < 2:
        raise InputError("the spread of a subset needs at least 2 rows")
    with single_threaded_blas():
        off = run_tasks(
            lambda t: offdiag_sum_from_rows(arr[sub[t]], s), range(sub.shape[0]), n_threads
        )
    return _spread_from_offdiag(np.array(off), n)
