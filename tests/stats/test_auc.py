"""The membership attack's AUC and DeLong's interval (``stats/auc.py``) against independent
references: scikit-learn's ROC AUC, SciPy's Mann–Whitney U, and DeLong's structural components
written out pair by pair as in DeLong, DeLong & Clarke-Pearson (1988)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.metrics import roc_auc_score

from sde_core.stats.auc import auc_difference, delong_auc


def _psi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ψ(x_i, y_j) = 1 if x_i > y_j, ½ if equal, 0 otherwise: the (m, n) kernel."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def _delong_by_pairs(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """AUC and DeLong's variance from the pairwise kernel (O(m·n), the paper's definition)."""
    psi = _psi(x, y)
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return float(psi.mean()), float(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size)


scores = st.lists(st.integers(-5, 5).map(float), min_size=2, max_size=30)


@settings(max_examples=80, deadline=None)
@given(x=scores, y=scores)
def test_auc_and_its_variance_match_the_references(x: list[float], y: list[float]) -> None:
    xs, ys = np.array(x), np.array(y)
    e = delong_auc(xs, ys)
    auc, var = _delong_by_pairs(xs, ys)
    assert e.value == pytest.approx(auc, abs=1e-12)
    assert e.se == pytest.approx(np.sqrt(var), abs=1e-12)
    u = stats.mannwhitneyu(xs, ys, alternative="two-sided").statistic
    assert e.value == pytest.approx(u / (xs.size * ys.size), abs=1e-12)
    labels = np.r_[np.ones(xs.size), np.zeros(ys.size)]
    assert e.value == pytest.approx(roc_auc_score(labels, np.r_[xs, ys]), abs=1e-12)
    assert 0.0 <= e.lo <= e.value <= e.hi <= 1.0


def test_paired_difference_matches_the_covariance_by_pairs() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.6, 1, 40), rng.normal(0, 1, 55)
    xb, yb = x + rng.normal(0, 0.7, 40), y + rng.normal(0, 0.7, 55)
    d = auc_difference(x, y, xb, yb)
    pa, pb = _psi(x, y), _psi(xb, yb)
    s10 = np.cov(np.vstack([pa.mean(1), pb.mean(1)]))
    s01 = np.cov(np.vstack([pa.mean(0), pb.mean(0)]))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / 40 + (
        s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]
    ) / 55
    assert d.value == pytest.approx(pa.mean() - pb.mean(), abs=1e-12)
    assert d.se == pytest.approx(np.sqrt(var), abs=1e-12)
    # the pairing narrows the interval against treating the two AUCs as independent
    independent = np.hypot(delong_auc(x, y).se, delong_auc(xb, yb).se)
    assert d.se < independent
    same = auc_difference(x, y, x, y)
    assert (same.value, same.se) == (0.0, 0.0)


def test_the_interval_covers_at_its_level() -> None:
    """Under a known shift, the 95% interval covers the true AUC Φ(δ/√2) about 95% of the
    time (400 seeded replications)."""
    rng = np.random.default_rng(0)
    truth = stats.norm.cdf(0.8 / np.sqrt(2))
    hits = 0
    for _ in range(400):
        e = delong_auc(rng.normal(0.8, 1, 60), rng.normal(0, 1, 80))
        hits += e.lo <= truth <= e.hi
    assert 0.91 <= hits / 400 <= 0.98


def test_bad_scores_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        delong_auc([1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        delong_auc([1.0, np.nan], [0.0, 1.0])
    with pytest.raises(ValueError, match="same rows"):
        auc_difference([1.0, 2.0], [0.0, 1.0], [1.0, 2.0, 3.0], [0.0, 1.0])
