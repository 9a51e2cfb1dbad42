"""The Wilson score interval of one binomial proportion of independent trials.

It is the building block of the behaviour check's Newcombe interval for an accuracy gap
(:func:`sde_core.learning.metrics.newcombe_interval`, method §9). It is *not* the interval of
the OTR or the calibrated OTR: an evaluation's targets share their draw's references, so those
intervals treat the draws as clusters (Korn–Graubard,
:func:`sde_core.stats.replication.replicate_proportion`, method §12).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from sde_core.common.validation import check_int
from sde_core.errors import InputError
from sde_core.stats.checks import check_level

__all__ = [
    "wilson_interval",
]

_MAX_TRIALS = 2**53


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (k successes out of n).

    Examples:
        >>> tuple(round(v, 4) for v in wilson_interval(8, 10))
        (0.4902, 0.9433)
        >>> wilson_interval(0, 0)  # no trials: the whole unit interval
        (0.0, 1.0)
    """
    # at most 2**53 trials: every count is then exact in float64 (larger ones overflow)
    n = check_int(n, "n", minimum=0, maximum=_MAX_TRIALS)
    k = check_int(k, "k", minimum=0, maximum=_MAX_TRIALS)
    if k > n:
        raise InputError(f"need 0 ≤ k ≤ n for a proportion; got k={k}, n={n}")
    confidence = check_level(confidence, "confidence")
    if n == 0:
        return (0.0, 1.0)
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))
