"""Reference validity by one-sided Mann-Whitney U tests of IT > OOT: the paper's split-level test
on the K split values of one S_IT and one S_OOT (method §3), and the subset-level test on the
scores of the reference panels (method §9).

The split-level test treats the K splits of one subset as independent samples, which they are
not; :func:`sde_core.stats.null_check.null_check` measures how often it fires on two disjoint
subsets of the *same* pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.stats.checks import as_sample, check_level

__all__ = [
    "ReferenceCheck",
    "reference_check",
    "reference_panel_check",
]


@dataclass(frozen=True)
class ReferenceCheck:
    """Validity of the references (method §3 or the subset-level panel of §9).

    Attributes:
        p_value: one-sided Mann-Whitney U p-value of ``IT > OOT``.
        valid: ``p_value < alpha``.
        statistic: the U statistic of the IT sample.
        alpha: the significance level used.
        effect: common-language effect size ``U / (n_it · n_oot)`` = P(IT > OOT).
    """

    p_value: float
    valid: bool
    statistic: float
    alpha: float
    effect: float


def _mwu_greater(it: np.ndarray, oot: np.ndarray, alpha: float) -> ReferenceCheck:
    res = stats.mannwhitneyu(it, oot, alternative="greater")
    p = float(res.pvalue)
    return ReferenceCheck(
        p_value=p,
        valid=bool(p < alpha),
        statistic=float(res.statistic),
        alpha=alpha,
        effect=float(res.statistic) / (it.size * oot.size),
    )


def reference_check(it_h: object, oot_h: object, alpha: float = 0.01) -> ReferenceCheck:
    """The paper's reference-validity test: one-sided Mann-Whitney U of H(S_IT) > H(S_OOT).

    Args:
        it_h, oot_h: ``(K,)`` split-half HSIC vectors of S_IT and S_OOT.
        alpha: significance level (default 0.01). With ``valid == False`` every decision of
            the evaluation must be reported as inconclusive.
    """
    return _mwu_greater(
        as_sample(it_h, "it_h", min_size=2),
        as_sample(oot_h, "oot_h", min_size=2),
        check_level(alpha),
    )


def reference_panel_check(
    it_scores: object, oot_scores: object, alpha: float = 0.01
) -> ReferenceCheck:
    """Subset-level reference validity: one-sided Mann-Whitney U on panel scores (method §9).

    Each panel subset contributes one score, so the test's samples are far less dependent than
    the split values of the split-level :func:`reference_check`.
    """
    return _mwu_greater(
        as_sample(it_scores, "it_scores", min_size=2),
        as_sample(oot_scores, "oot_scores", min_size=2),
        check_level(alpha),
    )
