"""How well a score agrees with a known truth over a set of models (method §17): the
faithfulness AUC, Spearman's rank correlation, the concordance of paired changes, and a
percentile bootstrap interval over the models.

- ``rank_auc(pos, neg)``: ``P(X > Y) + ½·P(X = Y)`` for X a score of a positive and Y of a
  negative (the Mann–Whitney form, by midranks);
- ``spearman(x, y)``: the Pearson correlation of the midranks (ties averaged);
- ``concordance(dx, dy)``: the share of pairs whose changes ``dx`` and ``dy`` have the same
  sign, a zero ``dx`` counting ½;
- ``bootstrap_interval``: the 2.5% and 97.5% percentiles of a statistic recomputed on
  resamples of the models (with replacement; within strata when given), skipping resamples
  where it is undefined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from sde_core.errors import InputError

__all__ = ["bootstrap_interval", "concordance", "rank_auc", "spearman"]


def _vector(x: object, what: str) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64).ravel()
    if not np.isfinite(v).all():
        raise InputError(f"{what} must be finite numbers (drop the models without a score)")
    return v


def rank_auc(positives: object, negatives: object) -> float:
    """The AUC of a score separating ``positives`` from ``negatives`` (NaN when either is
    empty)."""
    x, y = _vector(positives, "positives"), _vector(negatives, "negatives")
    if x.size == 0 or y.size == 0:
        return float("nan")
    ranks = stats.rankdata(np.concatenate([x, y]), method="average")
    return float((ranks[: x.size].sum() - x.size * (x.size + 1) / 2.0) / (x.size * y.size))


def spearman(x: object, y: object) -> float:
    """Spearman's rank correlation of paired ``x`` and ``y`` (NaN when either is constant or
    there are fewer than three pairs)."""
    a, b = _vector(x, "x"), _vector(y, "y")
    if a.size != b.size:
        raise InputError(f"x and y must be paired: {a.size} against {b.size} values")
    if a.size < 3:
        return float("nan")
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = float(np.sqrt((ra**2).sum() * (rb**2).sum()))
    return float("nan") if denominator == 0.0 else float((ra * rb).sum() / denominator)


def concordance(dx: object, dy: object) -> float:
    """Share of pairs where ``dx`` has the sign of ``dy`` (``dx = 0`` counts ½; pairs with
    ``dy = 0`` are left out; NaN when none is left)."""
    a, b = _vector(dx, "dx"), _vector(dy, "dy")
    if a.size != b.size:
        raise InputError(f"dx and dy must be paired: {a.size} against {b.size} values")
    keep = b != 0
    if not keep.any():
        return float("nan")
    a, b = a[keep], b[keep]
    return float(np.mean(np.where(a == 0, 0.5, (np.sign(a) == np.sign(b)).astype(float))))


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    n: int,
    resamples: int = 2000,
    seed: int = 0,
    strata: Sequence[object] | None = None,
) -> tuple[float, float]:
    """95% percentile bootstrap interval of ``statistic(indices)`` over ``n`` models.

    Args:
        statistic: the statistic of the models at the given indices (may return NaN).
        n: the number of models. resamples: bootstrap resamples. seed: their seed.
        strata: one label per model; each resample keeps every stratum's size (e.g. the AUC's
            two classes).

    Returns:
        ``(lo, hi)``; NaN when fewer than half the resamples give a finite value.
    """
    if n < 1 or resamples < 1:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    groups = [np.arange(n)]
    if strata is not None:
        labels = np.asarray(list(strata), dtype=object)
        if labels.size != n:
            raise InputError(f"strata must give one label per model ({labels.size} for {n})")
        groups = [np.flatnonzero(labels == s) for s in dict.fromkeys(labels.tolist())]
    values = []
    for _ in range(resamples):
        index = np.concatenate([rng.choice(g, size=g.size, replace=True) for g in groups])
        value = statistic(index)
        if np.isfinite(value):
            values.append(value)
    if len(values) < resamples / 2:
        return float("nan"), float("nan")
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)
