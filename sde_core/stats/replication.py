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
* :func:`replicate_ratio` — a ratio of two per-draw differences (the dependence score): the
  ratio of their means over draws with Fieller's interval (Student t, B − 1 degrees of
  freedom), unbounded when the denominator is not significantly different from zero; a mean of
  per-draw ratios would be dominated by the draws whose denominator happens to be small.
* :func:`replicate_mean` — an unbounded statistic: the mean over draws with a Student-t
  interval on B − 1 degrees of freedom.
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

from sde_core.common.validation import check_number
from sde_core.errors import InputError

__all__ = [
    "ReplicateEstimate",
    "korn_graubard_rows",
    "per_draw_values",
    "replicate_mean",
    "replicate_proportion",
    "replicate_range",
    "replicate_ratio",
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
        method: ``"korn-graubard"``, ``"t"``, ``"fieller"`` or ``"range"``.
    """

    value: float
    lo: float
    hi: float
    per_draw: tuple[float, ...]
    n_eff: float
    confidence: float
    method: str


def _confidence(confidence: float) -> float:
    return check_number(confidence, "confidence", gt=0.0, lt=1.0)


def per_draw_values(values: object, name: str) -> np.ndarray:
    """``values`` as a float array ``(B,)``, one finite value per draw.

    Raises:
        InputError: not a non-empty 1-D sequence, or a NaN/inf in it (``name`` says which).
    """
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

    Examples:
        >>> r = replicate_proportion([0.2, 0.3, 0.25], [20, 20, 20])
        >>> r.value, round(r.lo, 3), round(r.hi, 3), r.method
        (0.25, 0.06, 0.558, 'korn-graubard')
    """
    conf = _confidence(confidence)
    v = per_draw_values(values, "values")
    m = per_draw_values(trials, "trials")
    if m.shape != v.shape or np.any(m < 1):
        raise InputError("trials must hold one count ≥ 1 per draw, as many as values")
    if np.any(v < 0) or np.any(v > 1):
        raise InputError("a proportion's per-draw values must lie in [0, 1]")
    p, lo, hi, n_eff = korn_graubard_rows(v[None, :], m, conf)
    return ReplicateEstimate(
        value=float(p[0]),
        lo=float(lo[0]),
        hi=float(hi[0]),
        per_draw=tuple(float(x) for x in v),
        n_eff=float(n_eff[0]),
        confidence=conf,
        method="korn-graubard",
    )


def korn_graubard_rows(
    values: np.ndarray, trials: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`replicate_proportion`'s arithmetic for each row of ``values`` at once, unchecked:
    ``(pooled proportion, lower bound, upper bound, effective trials)`` of every row of the
    ``(R, B)`` per-draw proportions over the ``(B,)`` trials — the one place the Korn–Graubard
    interval is computed (the null check's power simulation asks it for thousands of rows)."""
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    m = np.asarray(trials, dtype=np.float64)
    total, b = float(m.sum()), m.size
    p = np.sum(m * v, axis=1) / total
    n_eff = np.full(p.shape, total)
    if b >= 2:
        w = m / total
        var = b / (b - 1) * np.sum((w * (v - p[:, None])) ** 2, axis=1)
        usable = (p > 0.0) & (p < 1.0) & (var > 0.0)
        n_eff = np.where(
            usable, np.minimum(total, p * (1.0 - p) / np.where(usable, var, 1.0)), n_eff
        )
    q = 1.0 - (1.0 - confidence) / 2.0
    if b >= 2 and total > 1:
        n_eff = n_eff * (float(stats.t.ppf(q, total - 1)) / float(stats.t.ppf(q, b - 1))) ** 2
    x = p * n_eff
    low_ok, high_ok = x > 0, x < n_eff
    lo = np.where(low_ok, stats.beta.ppf(1.0 - q, np.where(low_ok, x, 1.0), n_eff - x + 1.0), 0.0)
    hi_b = np.where(high_ok, n_eff - x, 1.0)
    hi = np.where(high_ok, stats.beta.ppf(q, x + 1.0, hi_b), 1.0)
    return p, lo, hi, n_eff


def replicate_mean(
    values: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> ReplicateEstimate:
    """Mean over draws with a Student-t interval on B − 1 degrees of freedom.

    With one draw the interval is undefined (NaN bounds).

    Examples:
        >>> r = replicate_mean([1.0, 2.0, 3.0])
        >>> r.value, round(r.lo, 3), round(r.hi, 3)
        (2.0, -0.484, 4.484)
    """
    conf = _confidence(confidence)
    v = per_draw_values(values, "values")
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
    """Median over draws with the range (min, max) of the draws, e.g. for p-values.

    Examples:
        >>> r = replicate_range([0.01, 0.2, 0.05])
        >>> r.value, r.lo, r.hi
        (0.05, 0.01, 0.2)
    """
    v = per_draw_values(values, "values")
    return ReplicateEstimate(
        value=float(np.median(v)),
        lo=float(v.min()),
        hi=float(v.max()),
        per_draw=tuple(float(x) for x in v),
        n_eff=float("nan"),
        confidence=float("nan"),
        method="range",
    )


def replicate_ratio(
    numerators: Sequence[float] | np.ndarray,
    denominators: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
) -> ReplicateEstimate:
    """Ratio of means over draws, ``R = mean(a_b) / mean(c_b)``, with Fieller's interval.

    Fieller's interval is the set of R with ``(ā − R·c̄)² ≤ t² · Var(ā − R·c̄)``, where the
    variance uses the draws' sample (co)variances divided by B and t is the Student-t quantile
    on B − 1 degrees of freedom. It is bounded only when the denominator's mean is significantly
    different from zero; otherwise the bounds are −inf and +inf (the scale of the ratio is not
    determined by the draws).

    Args:
        numerators, denominators: per-draw a_b and c_b (finite).
        confidence: nominal coverage (default 0.95).

    Returns:
        ``value`` = R (NaN when Σ c_b = 0), the interval (NaN bounds with one draw),
        ``per_draw`` = the per-draw ratios a_b / c_b (NaN where c_b = 0).
    """
    conf = _confidence(confidence)
    a = per_draw_values(numerators, "numerators")
    c = per_draw_values(denominators, "denominators")
    if a.shape != c.shape:
        raise InputError("give one numerator and one denominator per draw")
    with np.errstate(divide="ignore", invalid="ignore"):
        per_draw = tuple(float(x) for x in np.where(c != 0, a / np.where(c != 0, c, 1), np.nan))
    a_bar, c_bar = float(a.mean()), float(c.mean())
    value = a_bar / c_bar if c_bar != 0 else float("nan")
    b = a.size
    lo = hi = float("nan")
    if b >= 2:
        t2 = float(stats.t.ppf(1.0 - (1.0 - conf) / 2.0, b - 1)) ** 2 / b
        cov = np.cov(np.vstack([a, c]), ddof=1)
        s_aa, s_cc, s_ac = float(cov[0, 0]), float(cov[1, 1]), float(cov[0, 1])
        qa = c_bar * c_bar - t2 * s_cc
        qb = a_bar * c_bar - t2 * s_ac
        qc = a_bar * a_bar - t2 * s_aa
        if qa > 0:
            root = float(np.sqrt(max(qb * qb - qa * qc, 0.0)))
            lo, hi = (qb - root) / qa, (qb + root) / qa
        else:
            lo, hi = float("-inf"), float("inf")
    return ReplicateEstimate(
        value=value,
        lo=lo,
        hi=hi,
        per_draw=per_draw,
        n_eff=float("nan"),
        confidence=conf,
        method="fieller",
    )
