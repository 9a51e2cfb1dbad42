"""Per-sample evidence from random subsets (method §18): which members of the forget set still
look like training data.

SDE scores subsets, never single samples. Every sample sits in many random target subsets,
so how much its presence raises a subset's in-training position says how much it contributes.
With ``N`` pool rows, subsets of ``n`` drawn uniformly without replacement and a subset
position that is the mean of its members' positions plus noise,
``z_k = (1/n) Σ_{i∈k} c_i + ε_k``, the difference of means

    e_i = mean(z_k : i ∈ k) − mean(z_k : i ∉ k)

has expectation ``N / (n (N − 1)) · (c_i − c̄)``, so

    a_i = z̄ + e_i · n (N − 1) / N

estimates the sample's own position ``c_i`` on the subsets' scale (1 = like training data,
0 = like unseen data, for the positions of :func:`sde_core.pipeline.evaluation.per_sample`).
Its 95% interval is Welch's for ``e_i`` scaled the same way. Each subset's position is taken
relative to its own draw's mean (``z_k − z̄_b + z̄``), so what a draw's references share
cancels; the interval still treats subsets as independent given their draw.

One sample moves a subset of 400 by ~1/400 of the gap between training and unseen data, so a
single sample's interval is wide at a few hundred subsets: the estimates rank samples and
separate groups (the validation of method §18), they do not certify one sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.common.validation import as_float_vector
from sde_core.errors import InputError

__all__ = ["SampleEvidence", "auc_with_interval", "per_sample_evidence"]


@dataclass(frozen=True)
class SampleEvidence:
    """Per-sample estimates of :func:`per_sample_evidence`, aligned with ``rows``.

    Attributes:
        rows: the pool's row indices. estimate: ``a_i``. low, high: its 95% interval (NaN
        where a sample is in fewer than 2 subsets or in all but one). subsets_in: how many
        subsets hold each row. subsets: how many subsets there are. subset_size: ``n``.
    """

    rows: np.ndarray
    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    subsets_in: np.ndarray
    subsets: int
    subset_size: int


def per_sample_evidence(
    members: np.ndarray,
    positions: np.ndarray,
    pool: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    level: float = 0.95,
) -> SampleEvidence:
    """Every pool row's attributed position from the subsets it is in (module docstring).

    Args:
        members: int ``(K, n)`` pool rows of each subset (distinct within a subset).
        positions: ``(K,)`` each subset's position (finite).
        pool: ``(N,)`` the rows the subsets were drawn from (every member must be one).
        groups: ``(K,)`` each subset's draw (its position is centred on the draw's mean);
            None: one group.
        level: the interval's confidence level.

    Raises:
        InputError: shapes disagree, a member is outside the pool, or fewer than 2 subsets.
    """
    sub = np.asarray(members)
    if sub.ndim != 2 or sub.shape[0] < 2 or not np.issubdtype(sub.dtype, np.integer):
        raise InputError(f"members must be an integer (K ≥ 2, n) array; got shape {sub.shape}")
    z = as_float_vector(positions, "positions", min_size=2)
    if z.size != sub.shape[0]:
        raise InputError(f"positions has {z.size} values for {sub.shape[0]} subsets")
    rows = np.unique(np.asarray(pool, dtype=np.int64))
    where = np.searchsorted(rows, sub)
    inside = (where < rows.size) & (rows[np.minimum(where, rows.size - 1)] == sub)
    if not inside.all():
        raise InputError("every subset member must be a row of the pool")
    k, n = sub.shape
    big_n = rows.size
    g = np.zeros(k, dtype=np.int64) if groups is None else np.asarray(groups).ravel()
    if g.size != k:
        raise InputError(f"groups has {g.size} values for {k} subsets")
    _, g_idx = np.unique(g, return_inverse=True)
    draw_mean = np.bincount(g_idx, weights=z) / np.bincount(g_idx)
    zc = z - draw_mean[g_idx] + z.mean()
    indicator = np.zeros((k, big_n), dtype=np.float64)
    np.put_along_axis(indicator, where, 1.0, axis=1)
    if np.any(indicator.sum(axis=1) != n):
        raise InputError("a subset lists a row twice")
    n_in = indicator.sum(axis=0)
    n_out = k - n_in
    s_in = zc @ indicator
    ss_in = (zc**2) @ indicator
    total, total_sq = zc.sum(), float((zc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = s_in / n_in
        mean_out = (total - s_in) / n_out
        var_in = (ss_in - n_in * mean_in**2) / (n_in - 1)
        var_out = (total_sq - ss_in - n_out * mean_out**2) / (n_out - 1)
        se2_in, se2_out = var_in / n_in, var_out / n_out
        se = np.sqrt(se2_in + se2_out)
        dof = (se2_in + se2_out) ** 2 / (se2_in**2 / (n_in - 1) + se2_out**2 / (n_out - 1))
        half = stats.t.ppf(0.5 + level / 2, dof) * se
    scale = n * (big_n - 1) / big_n
    estimate = zc.mean() + (mean_in - mean_out) * scale
    ok = (n_in >= 2) & (n_out >= 2)
    nan = np.full(big_n, np.nan)
    low = np.where(ok, estimate - half * scale, nan)
    high = np.where(ok, estimate + half * scale, nan)
    return SampleEvidence(
        rows, np.where(n_in >= 1, estimate, nan), low, high, n_in.astype(np.int64), k, n
    )


def auc_with_interval(
    positive: np.ndarray, negative: np.ndarray, *, level: float = 0.95
) -> tuple[float, float, float]:
    """The AUC ``P(X > Y) + P(X = Y) / 2`` of scores ``positive`` over ``negative`` (the
    Mann-Whitney statistic over ``len(X) · len(Y)``) and its Hanley-McNeil interval, clipped to
    [0, 1]: ``(auc, low, high)``."""
    x = as_float_vector(positive, "positive scores", min_size=1)
    y = as_float_vector(negative, "negative scores", min_size=1)
    u = stats.mannwhitneyu(x, y, alternative="two-sided").statistic
    auc = float(u) / (x.size * y.size)
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    var = (auc * (1 - auc) + (x.size - 1) * (q1 - auc**2) + (y.size - 1) * (q2 - auc**2)) / (
        x.size * y.size
    )
    half = float(stats.norm.ppf(0.5 + level / 2)) * float(np.sqrt(max(var, 0.0)))
    return auc, max(0.0, auc - half), min(1.0, auc + half)
