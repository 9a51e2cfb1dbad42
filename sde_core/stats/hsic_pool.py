"""Squared distances of a pool of activations, computed once and reused across σ (method §2).

A subset's Gram matrix needs its rows' squared distances; they depend on the activations only,
not on σ, so :func:`pool_sq_distances` computes them once per (model, layer, pool) and a σ
change recomputes only ``expm1``, the centring and the split loop
(:func:`~sde_core.stats.hsic.split_half_batch_stats`, ``distances=``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_core.common.threads import resolve_threads
from sde_core.common.validation import as_float_matrix, inner_product_error
from sde_core.errors import InputError
from sde_core.stats.hsic_cpu import pool_sq_distances_matrix

__all__ = ["MAX_POOL_ROWS", "PoolDistances", "pool_positions", "pool_sq_distances"]

#: A pool distance matrix larger than this many rows (8 GiB of float64) is refused.
MAX_POOL_ROWS = 32_768


@dataclass(frozen=True)
class PoolDistances:
    """Squared Euclidean distances between rows of a pool, reusable across σ (method §2).

    With them, a σ change costs ``expm1``, the centring and the split loop per subset — no
    distances. Cache one per (model, layer, pool); memory is ``8·U²`` bytes (U = 6,000 rows:
    288 MB), independent of how many subsets or reference draws use it.

    Attributes:
        rows: ``(U,)`` sorted pool row indices covered.
        d2: ``(U, U)`` float64 squared distances (rows centred on their mean before the
            product; exactly symmetric, zero diagonal).
        pool_shape: ``(N, d)`` of the activations they were computed from (checked on use).
        error: absolute error bound of ``d2`` (inner-product formula); at a σ where it exceeds
            ``DISTANCE_TOLERANCE·2σ²`` (an outlier row far from the others) the distances are
            recomputed from the rows instead of being reused.
    """

    rows: np.ndarray
    d2: np.ndarray
    pool_shape: tuple[int, int]
    error: float = 0.0


def pool_sq_distances(
    acts: object, rows: object | None = None, *, threads: int | None = None
) -> PoolDistances:
    """Squared distances between ``rows`` of ``acts`` (default: all rows), for reuse across σ.

    Args:
        acts: ``(N, d)`` activations of a pool. rows: row indices to cover (e.g. the union of
            all subsets that will be evaluated: ``np.unique(subsets)``); repeats are ignored.
        threads: worker threads of the finishing pass (default: the usable CPUs).
    """
    arr = as_float_matrix(acts)
    n_threads = resolve_threads(threads)
    if rows is None:
        r = np.arange(arr.shape[0])
    else:
        r = np.unique(np.asarray(rows))
        if r.size == 0 or not np.issubdtype(r.dtype, np.integer):
            raise InputError(f"rows must be a non-empty array of integer row indices; got {rows!r}")
        if r[0] < 0 or r[-1] >= arr.shape[0]:
            raise InputError(
                f"rows must lie in [0, {arr.shape[0]}) (rows of acts); got range [{r[0]}, {r[-1]}]"
            )
    if r.size > MAX_POOL_ROWS:
        raise InputError(
            f"a distance matrix over {r.size} rows would take {8 * r.size**2 / 2**30:.0f} GiB; "
            f"cover at most {MAX_POOL_ROWS} rows (pass only the rows the subsets use)"
        )
    rows_of_pool = arr[r]
    d2 = pool_sq_distances_matrix(rows_of_pool, n_threads)
    centred = rows_of_pool - rows_of_pool.mean(axis=0)
    error = inner_product_error(np.einsum("ij,ij->i", centred, centred), arr.shape[1])
    return PoolDistances(rows=r.astype(np.int64), d2=d2, pool_shape=arr.shape, error=error)


def pool_positions(distances: object, shape: tuple[int, ...], sub: np.ndarray) -> np.ndarray:
    """``(T, n)`` positions of the subsets' rows ``sub`` in ``distances.rows``.

    Raises:
        InputError: ``distances`` is not a :class:`PoolDistances` of activations of ``shape``,
            or misses a subset row (the message says how to compute them).
    """
    if not isinstance(distances, PoolDistances):
        raise InputError(
            "distances must be a PoolDistances from pool_sq_distances; got "
            f"{type(distances).__name__}"
        )
    if tuple(distances.pool_shape) != tuple(shape):
        raise InputError(
            f"distances were computed for activations of shape {distances.pool_shape}, but acts "
            f"has shape {tuple(shape)}: recompute them with pool_sq_distances(acts)"
        )
    pos = np.searchsorted(distances.rows, sub)
    inside = (pos < distances.rows.size) & (
        distances.rows[np.minimum(pos, distances.rows.size - 1)] == sub
    )
    if not inside.all():
        missing = np.unique(sub[~inside])
        raise InputError(
            f"{missing.size} subset rows (e.g. {missing[:5].tolist()}) are not covered by the "
            "precomputed distances: compute them with pool_sq_distances(acts, rows) for rows "
            "including every subset's rows"
        )
    return pos
