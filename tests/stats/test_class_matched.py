"""The class-matched permutation test (method §16): exact level under within-class
exchangeability, in both directions and with unequal class shares, and power against a
difference in spread (what training does to a class's outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from sde_core.stats.class_matched import matched_permutation_test

SMALL = {"subset_size": 8, "subsets": 3, "splits": 4, "permutations": 19, "sigma": 1.5}


def _rejections(shift_spread: float, reps: int, seed: int) -> tuple[int, int]:
    """How often p_lower and p_higher fall at or below 1/20 over ``reps`` independent data sets:
    two classes, A = 30 rows (class shares 2:1), B = 24 rows (shares 1:2), every row drawn from
    its class's distribution; A's rows scaled by ``shift_spread``."""
    low = high = 0
    rng = np.random.default_rng(seed)
    for r in range(reps):
        sa = np.repeat([0, 1], [20, 10])
        sb = np.repeat([0, 1], [8, 16])
        centre = np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
        xa = centre[sa] + shift_spread * rng.normal(size=(30, 3))
        xb = centre[sb] + rng.normal(size=(24, 3))
        acts = np.vstack([xa, xb])
        t = matched_permutation_test(
            acts, np.arange(30), np.arange(30, 54), sa, sb, seed=r, **SMALL
        )
        low += t.p_lower <= 0.05
        high += t.p_higher <= 0.05
    return low, high


@pytest.mark.slow
def test_the_level_is_exact_in_both_directions_when_the_rows_are_exchangeable_within_class():
    reps = 300
    low, high = _rejections(1.0, reps, seed=5)
    # P(p ≤ 1/20) = 1/20 exactly; a two-sided 99.9% binomial band around 15 of 300
    lo, hi = binom.ppf(0.0005, reps, 0.05), binom.ppf(0.9995, reps, 0.05)
    assert lo <= low <= hi and lo <= high <= hi, (low, high, lo, hi)


def test_a_flatter_set_is_found_lower_and_a_wider_one_higher():
    low, high = _rejections(0.3, 20, seed=9)
    assert low >= 12 and high == 0
    low, high = _rejections(3.0, 20, seed=9)
    assert low == 0 and high >= 12


def test_the_p_values_are_rank_p_values_and_bad_input_is_refused():
    rng = np.random.default_rng(0)
    acts = rng.normal(size=(60, 4))
    a, b = np.arange(30), np.arange(30, 60)
    t = matched_permutation_test(acts, a, b, np.zeros(30), np.zeros(30), seed=1, **SMALL)
    assert t.permutations == 19
    assert {round(t.p_lower * 20, 9) % 1, round(t.p_higher * 20, 9) % 1} == {0.0}
    assert t.p_lower + t.p_higher >= 1.0  # the observed value counts on both sides
    assert t.p_toward(-1) == t.p_lower and t.p_toward(1) == t.p_higher
    same = matched_permutation_test(acts, a, b, np.zeros(30), np.zeros(30), seed=1, **SMALL)
    assert same == t  # seeded
    with pytest.raises(ValueError, match="disjoint"):
        matched_permutation_test(acts, a, a, np.zeros(30), np.zeros(30), seed=1, **SMALL)
    with pytest.raises(ValueError, match="at least"):
        matched_permutation_test(acts, a[:5], b, np.zeros(5), np.zeros(30), seed=1, **SMALL)
