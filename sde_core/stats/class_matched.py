"""Do two sets of rows of the same classes look alike to a model? (class-matched test, method §16)

Class-wise forgetting makes the forget set D_f one class (or a few), so its subsets cannot be
judged against the mixed-class references of the paper (:mod:`sde_core.stats.class_mix`). The
class-matched comparison asks instead whether D_f's rows look to the model like *unseen rows of
the same classes* (the test set's rows of those classes).

:func:`matched_permutation_test` compares two row sets A and B through the SDE subset score
``s(S)`` (the mean split-half HSIC over K splits, method §2, §9): the statistic is the mean score
of ``m`` uniform subsets of A minus that of ``m`` uniform subsets of B. Its null distribution is
built by **permuting the rows between A and B within each class** (``strata``), keeping every
class's count in A and in B, and drawing fresh subsets for every permutation by the same scheme.
Under the null — within each class the rows of A and B are exchangeable for the model (a model
that never trained on either: its rows of D_f and of D_te of one class are then i.i.d.) — the
observed statistic and the M permuted ones are exchangeable, so the rank p-values
``(1 + #{null ≤ obs}) / (M + 1)`` (and ``≥``) are exact at every level, whatever the subsets'
overlap and the activations' distribution. The same function measures how training moves the
score *within* a class, with A = the training rows and B = the test rows of another class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_core.stats.hsic import Estimator, SigmaRule, resolve_sigma, split_half_hsic_batch

__all__ = [
    "MatchedTest",
    "matched_permutation_test",
]


@dataclass(frozen=True)
class MatchedTest:
    """One class-matched permutation test of row set A against row set B.

    Attributes:
        statistic: mean score of A's subsets minus mean score of B's (observed).
        z: ``(statistic − mean of the null) / sd of the null``: the difference in units of its
            null spread (negative: A scores lower than B).
        p_lower: ``(1 + #{null ≤ statistic}) / (M + 1)``: small when A scores lower than B.
        p_higher: ``(1 + #{null ≥ statistic}) / (M + 1)``: small when A scores higher.
        permutations: M.
    """

    statistic: float
    z: float
    p_lower: float
    p_higher: float
    permutations: int

    def p_toward(self, direction: int) -> float:
        """The one-sided p-value in ``direction`` (−1: A lower than B, +1: A higher)."""
        return self.p_lower if direction < 0 else self.p_higher


def _split_by_stratum(
    rows: np.ndarray, strata: np.ndarray, counts: dict[int, int], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A random re-assignment of ``rows`` into (A, B), ``counts[s]`` rows of stratum s to A."""
    a_parts, b_parts = [], []
    for s, k in counts.items():
        members = rng.permutation(rows[strata == s])
        a_parts.append(members[:k])
        b_parts.append(members[k:])
    return np.concatenate(a_parts), np.concatenate(b_parts)


def matched_permutation_test(
    acts: np.ndarray,
    a_rows: np.ndarray,
    b_rows: np.ndarray,
    a_strata: np.ndarray,
    b_strata: np.ndarray,
    *,
    subset_size: int,
    subsets: int,
    splits: int,
    permutations: int,
    sigma: float | SigmaRule,
    seed: int,
    estimator: Estimator = "biased",
    device: str = "cpu",
) -> MatchedTest:
    """Test whether rows A and rows B score alike, permuting within strata (module docstring).

    Args:
        acts: ``(N, d)`` activations that ``a_rows`` and ``b_rows`` index.
        a_rows, b_rows: disjoint row indices of the two sets.
        a_strata, b_strata: each row's stratum (its class), aligned with the rows.
        subset_size: n, rows per subset (at most the smaller set's size).
        subsets: m, subsets per side and per replicate.
        splits: K, split-half splits per subset.
        permutations: M (the smallest p-value is ``1 / (M + 1)``).
        sigma: the kernel bandwidth (a number; a rule is resolved on A ∪ B's rows).
        seed: seed of the permutations, subsets and splits.
        estimator: ``"biased"`` or ``"unbiased"``. device: the HSIC engine's device.

    Raises:
        ValueError: the sets overlap, are smaller than ``subset_size``, or the counts are bad.
    """
    a = np.asarray(a_rows, dtype=np.int64).reshape(-1)
    b = np.asarray(b_rows, dtype=np.int64).reshape(-1)
    sa = np.asarray(a_strata).reshape(-1)
    sb = np.asarray(b_strata).reshape(-1)
    if sa.size != a.size or sb.size != b.size:
        raise ValueError("each row needs its stratum")
    if np.intersect1d(a, b).size:
        raise ValueError("the two row sets must be disjoint")
    if min(a.size, b.size) < subset_size or subset_size < 4:
        raise ValueError(
            f"subset size {subset_size} needs at least that many rows on each side (and ≥ 4); "
            f"the sets have {a.size} and {b.size}"
        )
    if subsets < 1 or permutations < 1 or splits < 1:
        raise ValueError("subsets, permutations and splits must be positive")
    rng = np.random.default_rng([int(seed), 0xC1A55])
    pooled = np.concatenate([a, b])
    strata = np.concatenate([sa, sb])
    counts = {int(s): int(np.sum(sa == s)) for s in np.unique(strata)}
    replicates = [(a, b)] + [
        _split_by_stratum(pooled, strata, counts, rng) for _ in range(permutations)
    ]
    rows = np.stack(
        [
            rng.choice(side, subset_size, replace=False)
            for pa, pb in replicates
            for side in [pa] * subsets + [pb] * subsets
        ]
    )
    x = np.asarray(acts, dtype=np.float64)
    if not isinstance(sigma, (int, float)):
        sigma = resolve_sigma(sigma, x[pooled], seed=int(seed))
    h = split_half_hsic_batch(
        x, rows, n_splits=splits, sigma=float(sigma), estimator=estimator,
        seed=int(rng.integers(2**31 - 1)), device=device,
    )  # fmt: skip
    score = h.mean(axis=1).reshape(len(replicates), 2, subsets).mean(axis=2)
    stats = score[:, 0] - score[:, 1]
    obs, null = float(stats[0]), stats[1:]
    spread = float(null.std())
    z = (obs - float(null.mean())) / spread if spread > 0 else 0.0
    m = len(null)
    return MatchedTest(
        statistic=obs,
        z=float(z),
        p_lower=float((1 + np.sum(null <= obs)) / (m + 1)),
        p_higher=float((1 + np.sum(null >= obs)) / (m + 1)),
        permutations=m,
    )
