"""The class-mix check of class-wise forgetting (method §16) against scipy's chi-square test."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2_contingency

from sde_core.stats.class_mix import class_mix_differs, class_mix_reason, class_mix_test


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 8))
def test_the_statistic_is_scipys_chi_square_of_homogeneity(seed: int, classes: int):
    rng = np.random.default_rng(seed)
    f = rng.integers(0, classes, rng.integers(5, 60))
    g = rng.integers(0, classes, rng.integers(5, 200))
    mix = class_mix_test(f, g, classes, "D_r")
    table = np.stack([np.bincount(f, minlength=classes), np.bincount(g, minlength=classes)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        assert mix.dof == 0 and mix.p_value == 1.0
        return
    ref = chi2_contingency(table, correction=False)
    assert mix.statistic == pytest.approx(ref.statistic, rel=1e-9, abs=1e-12)
    assert mix.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
    assert mix.dof == ref.dof
    assert 0.0 <= mix.distance <= 1.0


def test_one_forgotten_class_is_flagged_and_a_random_forget_set_is_not():
    rng = np.random.default_rng(0)
    train, test = rng.integers(0, 10, 6000), rng.integers(0, 10, 4000)
    one_class = np.flatnonzero(train == 3)
    reason = class_mix_reason(train, test, one_class, 10, [f"c{i}" for i in range(10)])
    assert "D_f vs D_r: χ² = " in reason and "D_f vs D_te" in reason and "c3 100% vs 0%" in reason
    assert "calibrated verdicts measure the class and are withheld" in reason
    assert "class-matched test of method §16" in reason
    flagged = sum(
        bool(class_mix_reason(train, test, rng.choice(6000, size, replace=False), 10))
        for size in (60, 600, 1200, 3000)
        for _ in range(25)
    )
    assert flagged == 0  # random forget sets of 1–50% of D_tr
    mix = class_mix_test(train[one_class], test, 10, "D_te")
    assert class_mix_differs(mix) and mix.distance == pytest.approx(1 - np.mean(test == 3))


def test_without_classes_or_labels_there_is_nothing_to_check():
    assert class_mix_reason(np.zeros(10, int), np.zeros(5, int), np.arange(3), 1) == ""
    assert class_mix_reason(np.linspace(0, 1, 10), np.zeros(5), np.arange(3), 2) == ""
    with pytest.raises(ValueError, match="labels must lie"):
        class_mix_test(np.array([0, 5]), np.array([0, 1]), 2, "D_r")
