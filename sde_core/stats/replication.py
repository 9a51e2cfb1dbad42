"""Point values and intervals over independent replicate draws of an evaluation (method §12).

An evaluation repeats its reference draw B times (references, panels, splits, targets and
controls drawn afresh and independently for each draw). Every headline number is then a point
value over the draws with an interval whose width comes from the spread *between* draws, which
contains both sources of variance: the targets (and controls) a draw judges, and the one set of
references they are all judged against.

* :func:`replicate_proportion` — a proportion (OTR, calibrated OTR, over-unlearned rate; also
  used for F1): the pooled proportion with the Korn–Graubard (1998) interval for proportions
  from clustered samples — a Clopper–Pearson interval on an *effective* number of trials
  ``n* = p(1 − p) / v`` (``v`` the between-draw variance of the pooled proportion), capped at
  the real number of trials and shrunk by ``(t_{n−1} / t_{B−1})²`` for the few draws. When every
  draw agrees (``v = 0``, e.g. OTR = 1.0 in every draw) ``n*`` is the number of trials, so the
  interval never collapses to a point.
* :func:`replicate_mean` — an unbounded statistic (the dependence score): the mean over draws
  with a Student-t interval on B − 1 degrees of freedom.
* :func:`replicate_range` — a p-value (reference checks): the median over draws with the range
  of the draws (a description of the draws, not a confidence interval).

References: E. L. Korn and B. I. Graubard, "Confidence intervals for proportions with small
expected number of positive counts estimated from survey data", Survey Methodology 24 (1998)
193–201 (the ``method="beta"`` interval of R's ``survey::svyciprop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.errors import InputError

__all__ = [
    "ReplicateEstimate",
    "replicate_mean",
    "replicate_proportion",
    "replicate_range",
]


@dataclass(frozen=True)
class ReplicateEstimate:
    """A statistic summarised over B independent draws.

    Attributes:
        value: the point value (pooled proportion, mean or median over draws; see ``method``).
        lo, hi: the interval (NaN when it cannot be formed).
        per_draw: the statistic of each draw, in draw order.
        n_eff: the effective number of trials behind a proportion's interval (NaN otherwise).
        confidence: nominal coverage of the interval.
        method: ``"korn-graubard"``, ``"t"`` or ``"range"``.
    """

    value: float
    lo: float
    hi: float
    per_draw: tuple[float, ...]
    n_eff: float
    confidence: float
    method: str


def _confidence(confidence: float) -> float:
    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise InputError(f"confidence must lie in (0, 1); got {confidence!r}")
    return float(confidence)


def _per_draw(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D sequence (one value per draw)")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN/inf: every draw needs a finite value")
    return arr


def replicate_proportion(
    values: Sequence[float] | np.ndarray,
    trials: Sequence[int] | np.ndarray,
    confidence: float = 0.95,
) -> ReplicateEstimate:
    """Pooled proportion over draws with the Korn–Graubard interval (see the module docstring).

    Args:
        values: per-draw statistic in [0, 1] (e.g. k_b / m_b, the OTR of draw b).
        trials: per-draw number of trials m_b ≥ 1 (targets or controls judged in draw b).
        confidence: nominal coverage (default 0.95).

    Returns:
        ``value`` = Σ m_b·v_b / Σ m_b (for proportions: all successes over all trials), the
        interval, and ``n_eff`` the effective number of trials used for it.
    """
    conf = _confidence(confidence)
    v = _per_draw(values, "values")
    m = _per_draw(trials, "trials")
    if m.shape != v.shape or np.any(m < 1):
        raise InputError("trials must hold one count ≥ 1 per draw, as many as values")
    if np.any(v < 0) or np.any(v > 1):
        raise InputError("a proportion's per-draw values must lie in [0, 1]")
    total = float(m.sum())
    p = float(np.sum(m * v) / total)
    b = v.size
    n_eff = total
    if b >= 2 and 0.0 < p < 1.0:
        w = m / total
        var = b / (b - 1) * float(np.sum((w * (v - p)) ** 2))
        if var > 0:
            n_eff = min(total, p * (1.0 - p) / var)
    q = 1.0 - (1.0 - conf) / 2.0
    if b >= 2 and total > 1:
        n_eff *= (float(stats.t.ppf(q, total - 1)) / float(stats.t.ppf(q, b - 1))) ** 2
    x = p * n_eff
    lo = 0.0 if x <= 0 else float(stats.beta.ppf(1.0 - q, x, n_eff - x + 1.0))
    hi = 1.0 if x >= n_eff else float(stats.beta.ppf(q, x + 1.0, n_eff - x))
    return ReplicateEstimate(
        value=p,
        lo=lo,
        hi=hi,
        per_draw=tuple(float(x) for x in v),
        n_eff=float(n_eff),
        confidence=conf,
        method="korn-graubard",
    )


def replicate_mean(
    values: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> ReplicateEstimate:
    """Mean over draws with a Student-t interval on B − 1 degrees of freedom.

    With one draw the interval is undefined (NaN bounds).
    """
    conf = _confidence(confidence)
    v = _per_draw(values, "values")
    mean = float(v.mean())
    if v.size < 2:
        lo = hi = float("nan")
    else:
        half = float(stats.t.ppf(1.0 - (1.0 - conf) / 2.0, v.size - 1)) * float(
            v.std(ddof=1) / np.sqrt(v.size)
        )
        lo, hi = mean - half, mean + half
    return ReplicateEstimate(
        value=mean,
        lo=lo,
        hi=hi,
        per_draw=tuple(float(x) for x in v),
        n_eff=float("nan"),
        confidence=conf,
        method="t",
    )


def replicate_range(values: Sequence[float] | np.ndarray) -> ReplicateEstimate:
    """Median over draws with the range (min, max) of the draws, e.g. for p-values."""
    v = _per_draw(values, "values")
    return ReplicateEstimate(
        value=float(np.median(v)),
        lo=float(v.min()),
        hi=float(v.max()),
        per_draw=tuple(float(x) for x in v),
        n_eff=float("nan"),
        confidence=float("nan"),
        method="range",
    )
