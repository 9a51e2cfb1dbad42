"""Point values and intervals over independent draws (method §12) against textbook formulas and
by simulated coverage."""

from __future__ import annotations

# Float tolerances in this file compare two float64 computations of the same inputs in one
# process (an implementation against a textbook or a second route): no float32 activation or
# machine-specific kernel lies between them, so their agreement is limited only by float64
# summation order and a tight relative tolerance is the conditioning. Results that cross
# machines are compared by sde_core.pipeline.reproduce (docs/method.md §13).
import numpy as np
import pytest
from scipy import stats

from sde_core.errors import InputError
from sde_core.stats.proportions import wilson_interval
from sde_core.stats.replication import (
    replicate_mean,
    replicate_proportion,
    replicate_range,
    replicate_ratio,
)


def test_one_draw_is_clopper_pearson():
    est = replicate_proportion([7 / 20], [20])
    lo = stats.beta.ppf(0.025, 7, 14)
    hi = stats.beta.ppf(0.975, 8, 13)
    assert est.value == pytest.approx(0.35)
    assert (est.lo, est.hi) == pytest.approx((lo, hi), rel=1e-12)
    assert est.n_eff == 20 and est.method == "korn-graubard"


def test_korn_graubard_by_hand():
    values, trials = np.array([0.5, 0.7, 0.6, 0.9, 0.8]), np.full(5, 20)
    p = values.mean()
    var = np.var(values, ddof=1) / 5  # equal weights: s² / B
    n_eff = p * (1 - p) / var * (stats.t.ppf(0.975, 99) / stats.t.ppf(0.975, 4)) ** 2
    x = p * n_eff
    est = replicate_proportion(values, trials)
    assert est.value == pytest.approx(p) and est.n_eff == pytest.approx(n_eff)
    assert est.lo == pytest.approx(stats.beta.ppf(0.025, x, n_eff - x + 1))
    assert est.hi == pytest.approx(stats.beta.ppf(0.975, x + 1, n_eff - x))
    assert est.per_draw == tuple(values)


def test_unanimous_draws_do_not_collapse_the_interval():
    """Every draw at OTR = 1.0: the interval is Clopper–Pearson on the capped, df-adjusted
    effective count (≈ 51 of 100), [0.93, 1] — it covers a many-seed mean of 0.995."""
    est = replicate_proportion([1.0] * 5, [20] * 5)
    assert est.value == 1.0 and est.hi == 1.0
    assert est.n_eff == pytest.approx(100 * (stats.t.ppf(0.975, 99) / stats.t.ppf(0.975, 4)) ** 2)
    assert 0.92 < est.lo < 0.94 and est.lo < 0.995
    zero = replicate_proportion([0.0] * 5, [20] * 5)
    assert zero.lo == 0.0 and 0.06 < zero.hi < 0.08


def test_unequal_draw_sizes_pool_the_trials():
    est = replicate_proportion([1.0, 0.5], [30, 10])
    assert est.value == pytest.approx(35 / 40)


def _simulate(p0: float, spread: float, rng: np.random.Generator, reps: int) -> tuple[float, float]:
    """Coverage of E[p̂] by the replicate interval and by a naive Wilson interval.

    Each draw's success probability varies around ``p0`` (the references, logit-normal with SD
    ``spread``), and the 20 targets of a draw are correlated among themselves (beta-binomial,
    intra-class correlation 0.2: they share rows).
    """
    logit = np.log(p0 / (1 - p0))
    truth_draws = 1 / (1 + np.exp(-(logit + spread * rng.normal(size=200_000))))
    truth = truth_draws.mean()
    rho = 0.2
    hit_kg = hit_naive = 0
    for _ in range(reps):
        pb = 1 / (1 + np.exp(-(logit + spread * rng.normal(size=5))))
        a, b = pb * (1 - rho) / rho, (1 - pb) * (1 - rho) / rho
        k = rng.binomial(20, rng.beta(a, b))
        est = replicate_proportion(k / 20, [20] * 5)
        hit_kg += est.lo <= truth <= est.hi
        lo, hi = wilson_interval(int(k.sum()), 100)
        hit_naive += lo <= truth <= hi
    return hit_kg / reps, hit_naive / reps


@pytest.mark.parametrize(("p0", "spread"), [(0.5, 1.0), (0.8, 1.0), (0.97, 0.8), (0.995, 0.5)])
def test_simulated_coverage_of_clustered_proportions(p0, spread):
    """The situation of issue 13: correlated targets and one reference per draw. The replicate
    interval keeps close to 95% (≥ 0.90 here) where a binomial interval over all targets does
    not (it is below 0.85 whenever the draws really differ)."""
    kg, naive = _simulate(p0, spread, np.random.default_rng(int(p0 * 1000)), 800)
    assert kg >= 0.90, kg
    if p0 < 0.99:
        assert naive < 0.85, naive


def test_replicate_mean_is_the_t_interval():
    v = np.array([0.1, -0.2, 0.3, 0.05, 0.0])
    est = replicate_mean(v)
    lo, hi = stats.t.interval(0.95, 4, loc=v.mean(), scale=stats.sem(v))
    assert (est.value, est.lo, est.hi) == pytest.approx((v.mean(), lo, hi))
    single = replicate_mean([0.4])
    assert single.value == 0.4 and np.isnan(single.lo) and np.isnan(single.hi)


def test_fieller_interval_by_hand():
    a = np.array([0.9, 1.1, 1.0, 0.8, 1.2])
    c = np.array([2.0, 2.2, 1.9, 2.1, 1.8])
    est = replicate_ratio(a, c)
    assert est.value == pytest.approx(a.mean() / c.mean())
    t2 = stats.t.ppf(0.975, 4) ** 2 / 5
    cov = np.cov(a, c, ddof=1)
    for bound in (est.lo, est.hi):  # the bounds solve the Fieller quadratic
        lhs = (a.mean() - bound * c.mean()) ** 2
        rhs = t2 * (cov[0, 0] - 2 * bound * cov[0, 1] + bound**2 * cov[1, 1])
        assert lhs == pytest.approx(rhs)
    assert est.lo < est.value < est.hi
    assert est.per_draw == pytest.approx(tuple(a / c))


def test_fieller_interval_is_unbounded_without_a_scale():
    """A denominator not significantly different from zero: the ratio's scale is unknown."""
    est = replicate_ratio([0.5, 0.4, 0.6, 0.5, 0.5], [0.1, -0.1, 0.05, -0.02, 0.0])
    assert est.lo == -np.inf and est.hi == np.inf


def test_ratio_of_means_resists_one_small_denominator():
    """Mean of per-draw ratios is dominated by a draw with a tiny denominator; the ratio of
    means is not (the reason the dependence score uses it)."""
    a = np.array([0.5, 0.5, 0.5, 0.5, 0.5])
    c = np.array([1.0, 1.0, 1.0, 1.0, 0.01])
    est = replicate_ratio(a, c)
    assert est.value == pytest.approx(2.5 / 4.01)
    assert np.mean(est.per_draw) > 10


def test_replicate_range_is_median_and_range():
    est = replicate_range([0.2, 0.001, 0.03, 0.5, 0.004])
    assert (est.value, est.lo, est.hi) == (0.03, 0.001, 0.5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: replicate_proportion([], []), "non-empty"),
        (lambda: replicate_proportion([0.5, 0.2], [10]), "one count"),
        (lambda: replicate_proportion([1.5], [10]), r"\[0, 1\]"),
        (lambda: replicate_proportion([0.5], [0]), "one count"),
        (lambda: replicate_proportion([np.nan], [10]), "NaN"),
        (lambda: replicate_mean([0.1], confidence=1.0), "confidence"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(InputError, match=match):
        call()
