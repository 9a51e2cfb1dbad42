"""The random splits of the split-half HSIC (method §2), drawn once and reused.

Each of a subset's K splits is a seeded random permutation of its rows whose first half is
paired row by row with its second half (:func:`split_permutations`). Subset t of a batch draws
with the t-th child of the base seed (:func:`subset_seeds`), so its splits depend only on n, K,
the seed and t — not on the model, the layer or σ: :func:`draw_batch_splits` draws them once
for every model of an evaluation (:class:`BatchSplits`, passed to
:func:`~sde_core.stats.hsic.split_half_batch_stats` as ``splits=``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_core.common.threads import resolve_threads, run_tasks
from sde_core.common.validation import check_int
from sde_core.errors import InputError

__all__ = [
    "MAX_SPLITS",
    "BatchSplits",
    "check_batch_splits",
    "check_splits",
    "draw_batch_splits",
    "split_permutations",
    "subset_seeds",
]

#: Upper bound on the number of random splits: beyond this the H distribution is resolved far
#: better than any decision needs and the run only wastes time.
MAX_SPLITS = 100_000


def check_splits(n_splits: int) -> int:
    """``n_splits`` as an int in [1, :data:`MAX_SPLITS`], or an InputError that says so."""
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

    Examples:
        >>> print(split_permutations(5, 2, seed=0))  # n odd: one row (4) is dropped for every split
        [[2 0 1 3]
         [3 2 1 0]]
    """
    n_splits = check_splits(n_splits)
    n = check_int(n, "n (the subset's rows)", minimum=2)
    rng = _rng(seed)
    rows = np.arange(n, dtype=np.int64)
    if n % 2:
        rows = np.delete(rows, rng.integers(n))
    # One vectorised call: every row of the tile is shuffled independently.
    return rng.permuted(np.tile(rows, (n_splits, 1)), axis=1)


def subset_seeds(seed: int, n_subsets: int) -> list[np.random.SeedSequence]:
    """Independent per-subset split seeds used by :func:`~.hsic.split_half_hsic_batch`.

    Child t depends only on ``seed`` and t, not on ``n_subsets``.
    """
    n_subsets = check_int(n_subsets, "n_subsets", minimum=0)
    return np.random.SeedSequence(_check_seed(seed)).spawn(n_subsets)


@dataclass(frozen=True)
class BatchSplits:
    """The K random splits of each of T subsets of n rows, drawn once (method §2).

    They depend only on n, K, the seed and the subset's position t — not on the model, the
    layer or σ — so a caller that evaluates several models or bandwidths on the same subsets
    draws them once (:func:`draw_batch_splits`) and passes them to
    :func:`~.hsic.split_half_batch_stats` (``splits=``) instead of redrawing them (~1 ms per subset
    at n = 400, K = 200).

    Attributes:
        n: rows per subset. n_splits: K. seed: the base seed (subset t uses
            ``subset_seeds(seed, T)[t]``).
        index: ``(T, K, 2m)`` row positions inside each subset (S1 then S2), uint16 when
            n ≤ 65,536 (else int32): T = 450, K = 200, n = 400 take 72 MB.
    """

    n: int
    n_splits: int
    seed: int
    index: np.ndarray

    def rows(self, t: int) -> np.ndarray:
        """``(K, 2m)`` split rows of subset t as platform integers."""
        return self.index[t].astype(np.intp)


def draw_batch_splits(
    n: int, n_splits: int, seed: int, n_subsets: int, *, threads: int | None = None
) -> BatchSplits:
    """Draw the splits :func:`~.hsic.split_half_batch_stats` would draw for ``n_subsets`` subsets.

    Row t equals ``split_permutations(n, n_splits, subset_seeds(seed, n_subsets)[t])``.
    """
    n_splits = check_splits(n_splits)
    n = check_int(n, "n", minimum=2)
    n_subsets = check_int(n_subsets, "n_subsets", minimum=1)
    seeds = subset_seeds(seed, n_subsets)
    dtype = np.uint16 if n <= 2**16 else np.int32
    index = np.empty((int(n_subsets), n_splits, n - n % 2), dtype=dtype)

    def draw(t: int) -> None:
        index[t] = split_permutations(int(n), n_splits, seeds[t])

    run_tasks(draw, range(int(n_subsets)), resolve_threads(threads))
    return BatchSplits(n=int(n), n_splits=n_splits, seed=int(seed), index=index)


def check_batch_splits(splits: object, n: int, n_splits: int, seed: int, n_sub: int) -> None:
    """An InputError unless ``splits`` were drawn for this n, K, seed and at least ``n_sub``
    subsets."""
    if not isinstance(splits, BatchSplits):
        raise InputError(
            f"splits must be a BatchSplits from draw_batch_splits; got {type(splits).__name__}"
        )
    got = (splits.n, splits.n_splits, splits.seed)
    if got != (n, n_splits, seed) or splits.index.shape[0] < n_sub:
        raise InputError(
            f"splits were drawn for n={splits.n}, n_splits={splits.n_splits}, "
            f"seed={splits.seed}, {splits.index.shape[0]} subsets but this call has n={n}, "
            f"n_splits={n_splits}, seed={seed}, {n_sub} subsets: draw them with "
            "draw_batch_splits(n, n_splits, seed, n_subsets)"
        )
