"""How well the null check can fail: the power of its rates to detect a false-call rate above
their level (method §9, "Null check … and its gate").

A null-check rate counts false calls among ``m`` judged subsets; its 95% interval (and the
gate's one-sided bound) can only exclude the level α when enough subsets are judged. With
the calls independent (the binomial case; Korn–Graubard's interval reduces to Clopper–Pearson
there, and subsets that share a draw's panel can only lower the power further), the lower
Clopper–Pearson bound of ``k`` calls out of ``m`` exceeds α from some ``k*`` on, and the power
against a true rate ``r`` is ``P(Binomial(m, r) ≥ k*)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy import stats

__all__ = ["NullPower", "null_check_power", "subsets_for_power"]


@dataclass(frozen=True)
class NullPower:
    """The power of one null-check rate.

    Attributes:
        subsets: m, the judged subsets. first_call: k*, the fewest false calls whose lower
            bound exceeds the level (None when no count can). power: P(calls ≥ k*) at the
            true rate.
    """

    subsets: int
    first_call: int | None
    power: float


def _lower(k: int, m: int, one_sided: float) -> float:
    return 0.0 if k == 0 else float(stats.beta.ppf(1.0 - one_sided, k, m - k + 1))


def null_check_power(
    subsets: int, level: float = 0.05, true_rate: float = 0.10, one_sided: float = 0.975
) -> NullPower:
    """The power of a rate over ``subsets`` judged subsets to exclude ``level`` when the true
    false-call rate is ``true_rate``, its lower bound taken one-sided at ``one_sided``
    (0.975: the shown 95% interval; ``1 − α`` = 0.99: the gate at α = 0.01).

    Examples:
        >>> p = null_check_power(40)
        >>> p.first_call, round(p.power, 2)
        (6, 0.21)
    """
    if subsets < 1:
        return NullPower(int(subsets), None, 0.0)
    if _lower(subsets, subsets, one_sided) <= level:
        return NullPower(subsets, None, 0.0)
    lo, hi = 0, subsets  # the lower bound grows with k: the first k above the level
    while lo < hi:
        mid = (lo + hi) // 2
        if _lower(mid, subsets, one_sided) > level:
            hi = mid
        else:
            lo = mid + 1
    return NullPower(subsets, lo, float(stats.binom.sf(lo - 1, subsets, true_rate)))


def subsets_for_power(
    power: float = 0.8, level: float = 0.05, true_rate: float = 0.10, one_sided: float = 0.975
) -> int:
    """The fewest judged subsets m from which on the power is at least ``power`` for the next
    100 sizes too (the binomial power saw-tooths in m), searched up to 20,000.

    Examples:
        >>> subsets_for_power(), subsets_for_power(one_sided=0.99)
        (234, 289)
    """
    run, m = 0, 1
    while m < 20_000:
        run = run + 1 if null_check_power(m, level, true_rate, one_sided).power >= power else 0
        if run > 100:
            return m - 100
        m += 1
    return m
