"""Random subsets of a pool of row indices, as an evaluation draws them (method §5, §9, §12).

Every helper takes the caller's :class:`numpy.random.Generator` and consumes it in a fixed
order, so a seeded caller draws the same subsets on every machine. Used by the evaluation's
subset plan (:func:`sde_core.pipeline.evaluation.plan.draw_subsets`) and by
:func:`sde_core.stats.null_check.null_calibration`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["disjoint_pairs", "independent_subsets", "random_halves"]


def independent_subsets(
    pool: np.ndarray | int, n: int, count: int, rng: np.random.Generator
) -> np.ndarray:
    """``count`` subsets of ``n`` rows of ``pool``, each without replacement, independent of
    each other (a row may appear in several subsets).

    Args:
        pool: ``(N,)`` row indices, or ``N`` for ``range(N)``. n: rows per subset (≤ N).
        count: number of subsets (0 gives an empty ``(0, n)`` array). rng: the generator.

    Returns:
        ``(count, n)`` int64 row indices.

    Examples:
        >>> independent_subsets(10, 3, 2, np.random.default_rng(0)).shape
        (2, 3)
    """
    if count == 0:
        return np.empty((0, n), dtype=np.int64)
    return np.stack([rng.choice(pool, n, replace=False) for _ in range(count)]).astype(np.int64)


def random_halves(pool: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random split of ``pool`` into (reference half, control half), each sorted; the
    reference half gets the extra row of an odd pool.

    Examples:
        >>> ref, ctl = random_halves(np.arange(5), np.random.default_rng(0))
        >>> ref.size, ctl.size, sorted(np.concatenate([ref, ctl]).tolist())
        (3, 2, [0, 1, 2, 3, 4])
    """
    perm = rng.permutation(pool)
    cut = pool.size - pool.size // 2
    return np.sort(perm[:cut]), np.sort(perm[cut:])


def disjoint_pairs(pool: np.ndarray, n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` pairs (A, B) of disjoint subsets of ``n`` rows of ``pool`` (2n ≤ pool size);
    the pairs are independent of each other.

    Returns:
        ``(count, 2, n)`` int64 row indices (``(0, 2, n)`` for ``count = 0``).

    Examples:
        >>> a, b = disjoint_pairs(np.arange(10), 3, 1, np.random.default_rng(0))[0]
        >>> len(set(a.tolist()) & set(b.tolist()))
        0
    """
    if count == 0:
        return np.empty((0, 2, n), dtype=np.int64)
    return np.stack(
        [pool[rng.permutation(pool.size)[: 2 * n]].reshape(2, n) for _ in range(count)]
    ).astype(np.int64)
