"""Paired differences between models on common draws (method §15): against scipy's paired and
Welch t intervals, a hand-written ratio estimator, by simulation, and on evaluation tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sde_core.errors import InputError
from sde_core.pipeline.evaluation.comparisons import compare_models, reference_comparisons
from sde_core.stats.precision import paired_difference, unpaired_difference


def test_equal_trials_give_scipys_paired_and_welch_intervals():
    rng = np.random.default_rng(1)
    shared = rng.normal(0.6, 0.2, 12)  # the reference draw's effect, common to both models
    a = np.clip(shared + rng.normal(0.05, 0.03, 12), 0, 1)
    b = np.clip(shared + rng.normal(0.0, 0.03, 12), 0, 1)
    paired = paired_difference(a, b, [1000] * 12)  # many trials: the binomial floor is inert
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (paired.lo, paired.hi) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert paired.value == pytest.approx(float(np.mean(a - b)))
    unpaired = unpaired_difference(a, b, [1000] * 12)
    welch = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (unpaired.lo, unpaired.hi) == pytest.approx((welch.low, welch.high), rel=1e-10)
    assert paired.half_width < 0.5 * unpaired.half_width  # common variance cancels


def test_unequal_trials_use_the_pooled_ratio_estimator():
    a, b, m = [0.5, 0.75, 0.6, 0.9], [0.4, 0.5, 0.6, 0.7], [1000, 2000, 1500, 500]
    total = sum(m)
    pooled = sum(mi * (x - y) for mi, x, y in zip(m, a, b, strict=True)) / total
    var = (
        4
        / 3
        * sum((mi / total * ((x - y) - pooled)) ** 2 for mi, x, y in zip(m, a, b, strict=True))
    )
    half = stats.t.ppf(0.975, 3) * math.sqrt(var)
    d = paired_difference(a, b, m)
    assert (d.value, d.lo, d.hi) == pytest.approx((pooled, pooled - half, pooled + half))


def test_paired_interval_covers_under_shared_reference_noise():
    """1,000 simulated evaluations of two models on common draws (a shared draw effect, own
    noise): the paired interval covers the true difference at 0.95 ± 3 SE."""
    rng = np.random.default_rng(5)
    b_draws, true = 10, 0.08
    hits = 0
    for _ in range(1000):
        shared = rng.normal(0.5, 0.2, b_draws)
        a = shared + true + rng.normal(0, 0.04, b_draws)
        b = shared + rng.normal(0, 0.04, b_draws)
        d = paired_difference(a, b, [10_000] * b_draws)
        hits += d.lo <= true <= d.hi
    assert abs(hits / 1000 - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 1000)


def test_a_constant_difference_keeps_the_binomial_floor():
    """Two models that decide every target of every draw oppositely: no spread between draws,
    yet the interval keeps the binomial variance of the more variable rate."""
    d = paired_difference([1.0] * 5, [0.0] * 5, [20] * 5)
    p = 102 / 104  # Agresti–Coull
    half = stats.t.ppf(0.975, 4) * math.sqrt(p * (1 - p) / 100)
    assert d.value == 1.0 and d.half_width == pytest.approx(half)
    assert d.lo == pytest.approx(1.0 - half) and d.hi == 1.0  # clipped: a difference of rates


def test_bad_inputs_are_refused():
    with pytest.raises(InputError, match="same B ≥ 2"):
        paired_difference([0.5], [0.4], [10])
    with pytest.raises(InputError, match="same B ≥ 2"):
        paired_difference([0.5, 0.6], [0.4], [10, 10])
    with pytest.raises(InputError, match="NaN"):
        unpaired_difference([0.5, float("nan")], [0.4, 0.3], [10, 10])


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    models = pd.DataFrame(
        {
            "name": ["original", "retrained", "rl", "random"],
            "role": ["original", "retrained", "unlearned", "random"],
            "otr": [0.1, 0.95, 0.7, math.nan],  # the random model's rates are withheld
            "calibrated_otr": [0.0, 0.9, 0.5, math.nan],
            "over_unlearned_rate": [0.0, 0.0, 0.01, math.nan],
            "f1": [0.9, 0.8, 0.85, math.nan],
        }
    )
    rng = np.random.default_rng(2)
    rows = []
    for name, base, draws in (("original", 0.1, 5), ("retrained", 0.95, 5), ("rl", 0.7, 7),
                              ("random", 0.5, 5)):  # fmt: skip
        for b in range(draws):
            rows.append(
                {"model": name, "draw": b, "targets": 5000, "controls": 5000,
                 "otr": base + rng.normal(0, 0.05), "calibrated_otr": 0.5,
                 "over_unlearned_rate": 0.0, "f1": 0.8 + rng.normal(0, 0.01)}
            )  # fmt: skip
    return models, pd.DataFrame(rows)


def test_models_are_compared_on_their_common_draws_and_withheld_rates_are_not():
    models, draws = _tables()
    c = compare_models(models, draws, "rl", "retrained", "otr")
    assert c.paired is not None and c.paired.draws == 5  # rl ran 7 draws, retrained 5
    rl = draws[(draws.model == "rl") & (draws.draw < 5)]["otr"].to_numpy()
    re = draws[draws.model == "retrained"]["otr"].to_numpy()
    ci = stats.ttest_rel(rl, re).confidence_interval()
    assert (c.paired.lo, c.paired.hi) == pytest.approx((ci.low, ci.high))
    withheld = compare_models(models, draws, "random", "retrained", "otr")
    assert withheld.paired is None and "random's otr is withheld" in withheld.reason
    assert withheld.to_json()["ci"] is None


def test_reference_comparisons_pair_every_model_with_the_references_and_each_other():
    models, draws = _tables()
    out = reference_comparisons(models, draws)
    pairs = {(c.model, c.reference) for c in out}
    expected = {(m, "retrained") for m in ("original", "rl", "random")}
    expected |= {(m, "original") for m in ("retrained", "rl", "random")}
    # one unlearned model here: no pair among the unlearned ones; with two, they are paired
    two = models.assign(role=["original", "retrained", "unlearned", "unlearned"])
    assert ("rl", "random") in {(c.model, c.reference) for c in reference_comparisons(two, draws)}
    assert pairs == expected
    assert {c.metric for c in out} == {"otr", "calibrated_otr", "over_unlearned_rate", "f1"}
    doc = next(c for c in out if c.model == "rl" and c.reference == "original").to_json()
    assert set(doc) >= {"model", "reference", "metric", "difference", "ci"}
    assert doc["ci"][0] <= doc["difference"] <= doc["ci"][1]
