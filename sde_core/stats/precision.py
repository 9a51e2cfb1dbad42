"""A fixed-width interval for a mean over replicate draws: Stein's two-stage design (method §15).

An evaluation's headline rates are means over B independent replicate draws (method §12). To
reach a requested half-width W, the design is chosen in two stages, before the rest of the run:

1. a *pilot* of ``n0`` draws gives the per-draw values ``v_1 … v_n0`` and their sample standard
   deviation ``s0`` (with a floor, below);
2. the number of draws is fixed from the pilot alone,
   ``B = max(n0, ⌈(t_{n0−1} · s0 / W)²⌉)`` (t: the two-sided (1 − α) Student quantile), capped
   by a budget;
3. after all B draws, the interval is ``v̄_B ± t_{n0−1} · s0 · √(Σ w_b²)`` with ``v̄_B`` the
   pooled value over the B draws (weights ``w_b = m_b / Σ m``; ``√(Σ w_b²) = 1/√B`` for equal
   trials), clipped to [0, 1].

Under normal per-draw values the interval has exactly the nominal coverage whatever B the pilot
chose (Stein 1945): ``v̄_B`` given B is normal with variance σ²/B and independent of ``s0``,
so ``(v̄_B − μ)·√B / s0`` is Student-t with n0 − 1 degrees of freedom. B depends on the pilot
only, never on the draws after it, so looking at the partial results while the run proceeds
cannot bias the interval; a run stopped early by its budget keeps a valid (wider) interval.
Per-draw rates are means of T/B bounded decisions and close to normal for the sizes used
(coverage is measured, bench/RESULTS.md).

The **floor**: a pilot whose draws all agree (``s0 = 0``, e.g. OTR = 1 in every draw) would give
a zero-width interval. ``s0²`` is therefore at least the binomial variance of one draw,
``p̃(1 − p̃) / m̄`` with ``p̃ = (x + ½)/(M + 1)`` the pilot's successes x of M trials shrunk
away from 0 and 1 and ``m̄`` the mean trials per draw.

:func:`paired_difference` estimates the difference of one rate between two models judged on the
same draws (common random numbers: the same references, panels, targets and splits, method
§12): the per-draw differences are independent replicates, so their pooled mean has a Student-t
interval on B − 1 degrees of freedom (the paired t interval). Its variance is at least the
binomial variance of the more variable of the two pooled rates (``p̃(1 − p̃)/Σ m``, with the
Agresti–Coull ``p̃ = (x + 2)/(Σ m + 4)``): a rare event no draw saw, or a difference that
happens to be constant over the draws — one model deciding every target one way, the other the
other — would otherwise get a zero-width interval.
:func:`unpaired_difference` is the same difference treated as two independent samples (Welch,
each rate's variance floored the same way), what two separate evaluations would give; the
ratio of the two widths is what pairing buys.

References: C. Stein, "A two-sample test for a linear hypothesis whose power is independent of
the variance", Annals of Mathematical Statistics 16 (1945) 243–258.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.common.validation import check_number
from sde_core.errors import InputError
from sde_core.stats.replication import per_draw_values

__all__ = [
    "Difference",
    "PilotPlan",
    "paired_difference",
    "stein_draws",
    "stein_interval",
    "unpaired_difference",
]


@dataclass(frozen=True)
class PilotPlan:
    """What a pilot of ``n0`` draws fixes for one rate (Stein's first stage).

    Attributes:
        n0: pilot draws. sd: the pilot's per-draw standard deviation after the floor.
        t: the Student quantile on n0 − 1 degrees of freedom. half_width: the requested W.
        draws: the draws needed, ``max(n0, ⌈(t·sd/W)²⌉)`` (equal trials per draw).
    """

    n0: int
    sd: float
    t: float
    half_width: float
    draws: int


@dataclass(frozen=True)
class Difference:
    """A difference of one rate between two models over common draws.

    Attributes:
        value: the pooled difference (first minus second). lo, hi: its interval, clipped to
            [−1, 1]. half_width: the half-width before clipping.
        draws: the draws used. df: degrees of freedom. method: ``"paired-t"`` or ``"welch"``.
    """

    value: float
    lo: float
    hi: float
    half_width: float
    draws: int
    df: float
    method: str


def _weights(m: np.ndarray, size: int) -> np.ndarray:
    """Pooling weights ``m / Σ m`` of checked per-draw trial counts ``m`` (``(B,)``)."""
    if m.size != size or np.any(m < 1):
        raise InputError("trials must hold one count ≥ 1 per draw, as many as the values")
    return m / m.sum()


def _common_draws(
    first: object, second: object, trials: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, m, w)``: two models' checked per-draw rates on the same B ≥ 2 draws, the
    trials behind each draw and the pooling weights (each ``(B,)``)."""
    a, b = per_draw_values(first, "first"), per_draw_values(second, "second")
    if a.size != b.size or a.size < 2:
        raise InputError("a difference needs the same B ≥ 2 draws for both models")
    m = per_draw_values(trials, "trials")
    return a, b, m, _weights(m, a.size)


def _quantile(confidence: float, df: float) -> float:
    conf = check_number(confidence, "confidence", gt=0.0, lt=1.0)
    return float(stats.t.ppf(1.0 - (1.0 - conf) / 2.0, df))


def _pilot_sd(values: np.ndarray, trials: np.ndarray) -> float:
    """The pilot's per-draw SD, at least the binomial SD of one draw (module docstring)."""
    sd = float(values.std(ddof=1))
    successes = float(np.sum(values * trials))
    p = (successes + 0.5) / (float(trials.sum()) + 1.0)
    floor = math.sqrt(p * (1.0 - p) / float(trials.mean()))
    return max(sd, floor)


def stein_draws(
    pilot: Sequence[float] | np.ndarray,
    trials: Sequence[int] | np.ndarray,
    half_width: float,
    confidence: float = 0.95,
) -> PilotPlan:
    """Stein's first stage: the draws needed for a half-width ≤ ``half_width``.

    Args:
        pilot: ``(n0,)`` per-draw rates in [0, 1] of the pilot draws (n0 ≥ 2).
        trials: ``(n0,)`` trials behind each (targets judged in the draw).
        half_width: W, the requested half-width (in rate units, 0 < W < 1).
        confidence: nominal coverage (default 0.95).

    Raises:
        InputError: fewer than two pilot draws, values outside [0, 1], bad W.

    Examples:
        >>> plan = stein_draws([0.6, 0.8, 0.7, 0.9, 0.5], [20] * 5, 0.1)
        >>> plan.n0, round(plan.sd, 3), plan.draws
        (5, 0.158, 20)
    """
    v = per_draw_values(pilot, "pilot")
    m = per_draw_values(trials, "trials")
    if v.size < 2:
        raise InputError("a pilot needs at least two draws to estimate the spread between draws")
    if m.size != v.size or np.any(m < 1):
        raise InputError("trials must hold one count ≥ 1 per draw, as many as the values")
    if np.any(v < 0) or np.any(v > 1):
        raise InputError("a rate's per-draw values must lie in [0, 1]")
    w = check_number(half_width, "half_width", gt=0.0, lt=1.0)
    t = _quantile(confidence, v.size - 1)
    sd = _pilot_sd(v, m)
    needed = max(v.size, math.ceil((t * sd / w) ** 2 - 1e-12))
    return PilotPlan(n0=int(v.size), sd=sd, t=t, half_width=w, draws=int(needed))


def stein_interval(
    values: Sequence[float] | np.ndarray,
    trials: Sequence[int] | np.ndarray,
    plan: PilotPlan,
) -> tuple[float, float, float, float]:
    """Stein's second stage: ``(pooled value, lo, hi)`` over all draws, the pilot's first.

    Args:
        values: ``(B,)`` per-draw rates, the ``plan.n0`` pilot draws first (B ≥ n0).
        trials: ``(B,)`` trials behind each.
        plan: the pilot's :class:`PilotPlan` (its SD and quantile; B need not equal
            ``plan.draws``: a budget may have stopped the run earlier, or a larger B run).

    Returns:
        ``(value, lo, hi, half-width)``: the pooled rate ``Σ m_b v_b / Σ m_b``, the interval
        ``± plan.t · plan.sd · √(Σ w_b²)`` clipped to [0, 1], and that half-width (unclipped).
    """
    v = per_draw_values(values, "values")
    if v.size < plan.n0:
        raise InputError(f"{v.size} draws given, fewer than the pilot's {plan.n0}")
    w = _weights(per_draw_values(trials, "trials"), v.size)
    value = float(np.sum(w * v))
    half = plan.t * plan.sd * float(np.sqrt(np.sum(w * w)))
    return value, max(0.0, value - half), min(1.0, value + half), half


def _pooled(values: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Pooled mean and the variance of it over independent draws (the linearised variance of
    method §12: ``B/(B−1) Σ w_b² (v_b − v̄)²``; ``s²/B`` for equal weights)."""
    mean = float(np.sum(w * values))
    b = values.size
    var = b / (b - 1) * float(np.sum((w * (values - mean)) ** 2))
    return mean, var


def _binomial_floor(values: np.ndarray, trials: np.ndarray) -> float:
    """The variance of a pooled rate over ``Σ m`` independent trials, ``p̃(1 − p̃)/Σ m`` with
    the Agresti–Coull ``p̃ = (x + 2)/(Σ m + 4)``: what a rate measured on these trials carries
    at least, kept away from 0 for a rare event no draw happened to see."""
    total = float(trials.sum())
    p = (float(np.sum(values * trials)) + 2.0) / (total + 4.0)
    return p * (1.0 - p) / total


def paired_difference(
    first: Sequence[float] | np.ndarray,
    second: Sequence[float] | np.ndarray,
    trials: Sequence[int] | np.ndarray,
    confidence: float = 0.95,
) -> Difference:
    """Difference ``first − second`` of a rate over common draws, with the paired t interval.

    Args:
        first, second: ``(B,)`` the two models' per-draw rates on the same draws (B ≥ 2).
        trials: ``(B,)`` the trials behind each draw (weights of the pooled rate).
        confidence: nominal coverage (default 0.95).

    Examples:
        >>> d = paired_difference([0.8, 0.7, 0.9], [0.6, 0.6, 0.7], [20, 20, 20])
        >>> round(d.value, 3), round(d.lo, 3), round(d.hi, 3)
        (0.167, 0.023, 0.31)
    """
    a, b, m, w = _common_draws(first, second, trials)
    value, var = _pooled(a - b, w)
    var = max(var, _binomial_floor(a, m), _binomial_floor(b, m))
    df = float(a.size - 1)
    half = _quantile(confidence, df) * math.sqrt(var)
    lo, hi = max(-1.0, value - half), min(1.0, value + half)  # a difference of rates
    return Difference(value, lo, hi, half, int(a.size), df, "paired-t")


def unpaired_difference(
    first: Sequence[float] | np.ndarray,
    second: Sequence[float] | np.ndarray,
    trials: Sequence[int] | np.ndarray,
    confidence: float = 0.95,
) -> Difference:
    """The same difference as if the two models had been judged on independent draws: the
    variances of the two pooled rates add, Welch–Satterthwaite degrees of freedom."""
    a, b, m, w = _common_draws(first, second, trials)
    mean_a, var_a = _pooled(a, w)
    mean_b, var_b = _pooled(b, w)
    var_a, var_b = max(var_a, _binomial_floor(a, m)), max(var_b, _binomial_floor(b, m))
    var = var_a + var_b
    df = float(a.size - 1)
    if var > 0:
        df = var**2 / ((var_a**2 + var_b**2) / (a.size - 1))
    half = _quantile(confidence, df) * math.sqrt(var)
    value = mean_a - mean_b
    lo, hi = max(-1.0, value - half), min(1.0, value + half)
    return Difference(value, lo, hi, half, int(a.size), df, "welch")
