"""Decision rule, reference checks, headline metrics and calibrated evidence (method §3–5, §9)."""

from __future__ import annotations

# Float tolerances in this file compare two float64 computations of the same inputs in one
# process (an implementation against a textbook or a second route): no float32 activation or
# machine-specific kernel lies between them, so their agreement is limited only by float64
# summation order and a tight relative tolerance is the conditioning. Results that cross
# machines are compared by sde_core.pipeline.reproduce (docs/method.md §13).
import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon
from sklearn.metrics import f1_score, precision_score, recall_score

from sde_core.errors import InputError, SDEError
from sde_core.stats.calibrated import calibrated_verdict, subset_scores
from sde_core.stats.headline import controlled_f1, dependence_score
from sde_core.stats.hsic import split_half_hsic_batch
from sde_core.stats.jsd import decide, histogram_edges, jsd
from sde_core.stats.null_check import (
    EXACT_MWU_MAX,
    null_calibration,
    null_check,
    pool_null_checks,
    split_test_p_values,
)
from sde_core.stats.outliers import panel_outliers
from sde_core.stats.over_unlearning import over_unlearning_test
from sde_core.stats.proportions import wilson_interval
from sde_core.stats.utest import reference_check, reference_panel_check

# ---------------------------------------------------------------- JSD


def test_jsd_matches_scipy_base2():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 300), rng.normal(0.7, 1.3, 250)
    edges = np.linspace(min(a.min(), b.min()), max(a.max(), b.max()), 31)
    pa = np.histogram(a, edges)[0] / a.size
    pb = np.histogram(b, edges)[0] / b.size
    expected = jensenshannon(pa, pb, base=2) ** 2  # scipy returns the JS *distance*
    assert jsd(a, b, bins=30) == pytest.approx(expected, rel=1e-12)
    assert jsd(a, b, bins=edges) == pytest.approx(expected, rel=1e-12)


def test_jsd_bounds():
    a = np.linspace(0, 1, 50)
    assert jsd(a, a) == 0.0
    assert jsd(a, a + 10) == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    vals = [jsd(rng.normal(size=40), rng.normal(size=40), 10) for _ in range(20)]
    assert all(0.0 <= v <= 1.0 for v in vals)


def test_histogram_edges_span_all_samples_and_handle_zero_range():
    e = histogram_edges([1.0, 2.0], [0.5], [3.0], bins=5)
    assert e[0] == 0.5 and e[-1] == 3.0 and e.size == 6
    flat = histogram_edges([2.0, 2.0], bins=4)
    assert flat[0] < 2.0 < flat[-1]


# ---------------------------------------------------------------- decision rule


@pytest.fixture(scope="module")
def refs():
    rng = np.random.default_rng(2)
    return rng.normal(1.0, 0.1, 200), rng.normal(0.0, 0.1, 200)


def test_decide_known_answers(refs):
    it, oot = refs
    rng = np.random.default_rng(3)
    near_it = decide(rng.normal(1.0, 0.1, 200), it, oot)
    near_oot = decide(rng.normal(0.0, 0.1, 200), it, oot)
    assert near_it.in_training and near_it.d_it < near_it.d_oot
    assert not near_oot.in_training and near_oot.d_oot < near_oot.d_it
    assert near_oot.label == "out-of-training"
    # Closer to OOT, but not identical: still out-of-training.
    assert not decide(rng.normal(0.3, 0.1, 200), it, oot).in_training


def test_decide_uses_common_bins_over_three_samples(refs):
    it, oot = refs
    t = np.full(200, 0.5)
    d = decide(t, it, oot, bins=30)
    edges = histogram_edges(t, it, oot, bins=30)
    assert d.d_it == pytest.approx(jsd(t, it, edges))
    assert d.d_oot == pytest.approx(jsd(t, oot, edges))


def test_tie_counts_as_in_training():
    it = np.zeros(50)
    oot = np.ones(50)
    t = np.r_[np.zeros(25), np.ones(25)]  # equally far from both references
    d = decide(t, it, oot)
    assert d.d_it == pytest.approx(d.d_oot)
    assert d.in_training


def test_reference_check_matches_scipy(refs):
    it, oot = refs
    res = reference_check(it, oot)
    expected = stats.mannwhitneyu(it, oot, alternative="greater").pvalue
    assert res.p_value == pytest.approx(expected)
    assert res.valid and res.alpha == 0.01 and res.effect == pytest.approx(1.0)
    assert not reference_check(oot, it).valid


# ---------------------------------------------------------------- headline metrics


def test_wilson_interval_textbook_values():
    # Textbook example: 81 of 263 at 95% -> (0.2553, 0.3662) (Newcombe 1998, Table I style).
    lo, hi = wilson_interval(81, 263)
    assert lo == pytest.approx(0.2553, abs=5e-4) and hi == pytest.approx(0.3662, abs=5e-4)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    # Closed form at k = 0: upper bound z²/(n + z²).
    z2 = 1.959963984540054**2
    assert wilson_interval(0, 10)[1] == pytest.approx(z2 / (10 + z2))
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_controlled_f1_matches_sklearn():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 100).astype(bool)
    p = np.where(rng.random(100) < 0.8, y, ~y)
    res = controlled_f1(y, p)
    assert res.f1 == pytest.approx(f1_score(y, p))
    assert res.precision == pytest.approx(precision_score(y, p))
    assert res.recall == pytest.approx(recall_score(y, p))
    assert res.tp + res.fp + res.fn + res.tn == 100
    assert controlled_f1([True, False], [False, False]).f1 == 0.0


def test_dependence_score_scale(refs):
    it, oot = refs
    assert dependence_score(it, it, oot) == pytest.approx(1.0)
    assert dependence_score(oot, it, oot) == pytest.approx(0.0)
    half = np.full((3, 10), 0.5 * (np.median(it) + np.median(oot)))
    assert dependence_score(half, it, oot) == pytest.approx(0.5)
    assert np.isnan(dependence_score(it, np.ones(5), np.ones(5)))


# ---------------------------------------------------------------- calibrated evidence


def test_calibrated_verdict_p_values():
    it = np.arange(10, 30, dtype=float)  # 20 in-training scores
    oot = np.arange(0, 20, dtype=float)  # 20 out-of-training scores
    high = calibrated_verdict(100.0, it, oot)
    assert high.p_in == pytest.approx(1 / 21) and high.verdict == "in-training"
    # Below every IT score but inside the OOT panel: forgotten, like unseen data.
    out = calibrated_verdict(5.0, it, oot)
    assert out.p_out == pytest.approx(1 / 21) and out.verdict == "out-of-training"
    assert out.p_over == pytest.approx((1 + 6) / 21)
    # Below the OOT panel as well: less dependent than unseen data (method §12).
    low = calibrated_verdict(-5.0, it, oot)
    assert low.p_out == pytest.approx(1 / 21) and low.p_over == pytest.approx(1 / 21)
    assert low.verdict == "over-unlearned"
    mid = calibrated_verdict(15.0, it, oot)
    assert mid.p_in == pytest.approx((1 + 5) / 21)
    assert mid.p_out == pytest.approx((1 + 6) / 21)
    assert mid.verdict == "inconclusive"


def test_panel_check():
    chk = reference_panel_check(np.arange(10, 20), np.arange(0, 10))
    assert chk.valid and chk.p_value == pytest.approx(
        stats.mannwhitneyu(np.arange(10, 20), np.arange(0, 10), alternative="greater").pvalue
    )


def test_calibrated_verdict_type_one_error_on_independent_null_data():
    """hyppo-style calibration: on null data the false "in-training" rate is ≈ α.

    Each replicate draws a fresh target and a fresh panel of R = 20 out-of-training subsets
    of independent Gaussian activations from the same distribution (the target was never
    trained on), computes split-half HSIC scores with the batch engine and records whether
    the calibrated verdict wrongly says "in-training". Exact level: 1/21 ≈ 0.048.
    """
    reps, panel, n, alpha = 300, 20, 24, 0.05
    rng = np.random.default_rng(12)
    pool = rng.normal(size=(reps * (panel + 1) * n, 4))
    subsets = np.arange(pool.shape[0]).reshape(reps * (panel + 1), n)
    h = split_half_hsic_batch(pool, subsets, n_splits=20, sigma=2.0, seed=1)
    scores = subset_scores(h).reshape(reps, panel + 1)
    it_panel = np.full(panel, 1e9)  # in-training side irrelevant for the in-training error
    false_in = [
        calibrated_verdict(s[0], it_panel, s[1:], alpha=alpha).verdict == "in-training"
        for s in scores
    ]
    rate = float(np.mean(false_in))
    assert rate <= alpha + 0.03
    assert rate > 0.01  # and the test is not vacuous


def test_null_calibration_shows_split_level_false_positives():
    """method §9 finding: the split-level U-test fires on disjoint subsets of one pool; the
    calibrated test, judged on subsets outside the panel, does not."""
    rng = np.random.default_rng(5)
    pool = rng.normal(size=(2000, 6))
    res = null_calibration(
        pool, subset_size=60, sigma=np.sqrt(6), n_pairs=30, panel_size=30, n_splits=100, seed=3
    )
    assert res.n_pairs == 30 and res.split_p_values.shape == (30,)
    assert res.calibrated_p_in.shape == (60,) and res.calibrated_p_over.shape == (60,)
    assert res.split_test_fpr > 0.2  # far above its nominal 1%
    assert res.calibrated_fpr <= 0.15
    assert np.all((res.calibrated_p_in > 0) & (res.calibrated_p_in <= 1))


@pytest.mark.parametrize("splits", [2, 5, EXACT_MWU_MAX, EXACT_MWU_MAX + 1, 20, 200])
@pytest.mark.parametrize("ties", [False, True])
def test_split_test_p_values_are_scipys_pair_by_pair(splits: int, ties: bool):
    """One call over every pair (more than EXACT_MWU_MAX splits) or pair by pair (at most):
    the p-values are scipy's own pair-by-pair ones, bit for bit, with and without ties, also
    where some pairs tie and others do not (scipy would pick its method from the whole array)."""
    rng = np.random.default_rng(splits + 100 * ties)
    h = rng.normal(size=(37, 2, splits))
    if ties:
        h[::2] = np.round(h[::2], 1)  # ties in every other pair only
        h[3, 1] = h[3, 0]  # one pair identical
    expected = np.array(
        [stats.mannwhitneyu(a, b, alternative="greater").pvalue for a, b in h], dtype=np.float64
    )
    got = split_test_p_values(h)
    assert got.shape == (37,) and got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)
    single = split_test_p_values(h[:1])
    assert single.shape == (1,) and single[0] == expected[0]


def test_null_check_rate_is_near_alpha_on_exchangeable_data():
    """Fresh subsets outside the panel, from the same pool: false "in-training" at ≈ α.

    One panel per replicate (its own random position moves every verdict of that replicate),
    so the rate is averaged over 80 independent replicates of 4 pairs each; the exact level of
    ``p_in < 0.05`` with R = 20 is 1/21 ≈ 0.048.
    """
    rng = np.random.default_rng(21)
    pool = rng.normal(size=(40_000, 4))
    checks = [
        null_calibration(pool, 24, 2.0, n_pairs=4, panel_size=20, n_splits=20, seed=s)
        for s in range(80)
    ]
    pooled = pool_null_checks(checks)
    assert pooled.n_pairs == 320
    assert pooled.calibrated_fpr <= 0.05 + 0.03
    assert pooled.over_unlearned_fpr <= 0.05 + 0.03
    assert pooled.calibrated_fpr > 0.01  # and it is not vacuous


def test_null_check_fails_on_a_non_exchangeable_panel():
    """A panel that does not represent unseen data (it comes from a tighter part of the data
    than the fresh subsets) must show up as a rate far above α — the old panel-internal check
    could not (its rate was 1/21 for any data)."""
    rng = np.random.default_rng(22)
    tight = rng.normal(size=(20 * 24, 4))  # the panel's part of the data
    wide = 1.3 * rng.normal(size=(40 * 24, 4))  # where the null pairs come from
    panel_h = split_half_hsic_batch(tight, np.arange(tight.shape[0]).reshape(20, 24), 20, 2.0)
    pair_h = split_half_hsic_batch(wide, np.arange(wide.shape[0]).reshape(40, 24), 20, 2.0, seed=1)
    res = null_check(pair_h.reshape(20, 2, 20), subset_scores(panel_h))
    assert res.n_pairs == 20
    assert res.calibrated_fpr >= 0.5
    # Reversed (the panel wider than the fresh subsets), the over-unlearned rate fires instead.
    rev = null_check(panel_h.reshape(10, 2, 20), subset_scores(pair_h))
    assert rev.over_unlearned_fpr >= 0.5 and rev.calibrated_fpr <= 0.05


def test_over_unlearning_test_known_answers():
    rng = np.random.default_rng(23)
    panels = [rng.normal(size=20) for _ in range(5)]
    below = [p.min() - 1 - rng.random(4) for p in panels]  # every target below its panel
    res = over_unlearning_test(below, panels)
    assert res.draw_p_values == pytest.approx((1 / 21,) * 5)
    assert res.p_value == pytest.approx(stats.chi2.sf(-2 * 5 * np.log(1 / 21), 10))
    assert res.p_value < 0.001
    # Exchangeable targets: the combined test rarely fires (it is conservative).
    fired = 0
    for _ in range(300):
        panels = [rng.normal(size=20) for _ in range(5)]
        targets = [rng.normal(size=4) for _ in range(5)]
        fired += over_unlearning_test(targets, panels).p_value < 0.05
    assert fired / 300 <= 0.05 + 0.02


# ---------------------------------------------------------------- bad input

GRID40 = np.arange(80.0).reshape(40, 2)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: jsd([1.0, np.nan], [1.0]), "NaN"),
        (lambda: jsd([[1.0]], [1.0]), "1-D"),
        (lambda: jsd([1.0, 2.0], [1.5], bins=1), "bins"),
        (lambda: jsd([1.0, 2.0], [1.5], bins=[0.0, 0.0, 1.0]), "increasing"),
        (lambda: jsd([1.0, 2.0], [1.5], bins=[1.2, 1.8]), "span"),
        (lambda: decide([], [1.0], [0.0]), "at least 1"),
        (lambda: reference_check([1.0], [0.0, 1.0]), "at least 2"),
        (lambda: reference_check([1.0, 2.0], [0.0, 1.0], alpha=1.5), "alpha"),
        (lambda: wilson_interval(5, 3), "k ≤ n"),
        (lambda: controlled_f1([], []), "non-empty"),
        (lambda: controlled_f1([0.3, 0.5], [True, False]), "booleans"),
        (lambda: controlled_f1([True], [True, False]), "length"),
        (lambda: calibrated_verdict(np.nan, [1.0], [0.0]), "NaN"),
        (lambda: subset_scores(np.ones((0, 3))), "shape"),
        (lambda: null_calibration(np.ones((10, 2)), 6, 1.0), "disjoint subsets"),
        (lambda: null_calibration(GRID40, 6, 1.0, n_pairs=0), "n_pairs"),
        (lambda: null_calibration(GRID40, 6, 1.0, panel_size=2), "panel_size"),
        (lambda: null_check(np.ones((2, 5)), np.arange(20.0)), "P, 2, K"),
        (lambda: null_check(np.ones((2, 2, 5)), np.arange(10.0)), "never fail"),
        (lambda: null_check(np.full((1, 2, 3), np.nan), np.arange(20.0)), "NaN"),
        (lambda: over_unlearning_test([], []), "every draw"),
        (lambda: pool_null_checks([]), "at least one"),
    ],
)
def test_bad_input_raises_sde_error(call, match):
    with pytest.raises(SDEError, match=match) as info:
        call()
    assert isinstance(info.value, InputError)


def test_panel_outliers_name_the_member_and_the_verdict_it_blocks():
    rng = np.random.default_rng(11)
    it, oot = 1.0 + 0.01 * rng.normal(size=20), 0.01 * rng.normal(size=20)
    assert panel_outliers(it, oot) == ()  # an ordinary panel
    high = oot.copy()
    high[4] = 1.0  # one "unseen" member at the training level
    (found,) = panel_outliers(it, high)
    assert (found.side, found.member, found.blocks) == ("oot", 4, "in-training") and found.z > 8
    low_it = it.copy()
    low_it[0] = 0.0
    (found,) = panel_outliers(low_it, oot)
    assert (found.side, found.blocks) == ("it", "out-of-training")
    low_oot = oot.copy()
    low_oot[1] = -1.0
    assert [o.blocks for o in panel_outliers(it, low_oot)] == ["over-unlearned"]
    high_it = it.copy()
    high_it[3] = 5.0  # a high IT member blocks nothing
    assert panel_outliers(high_it, oot) == ()
    flat = np.zeros(20)
    flat[2] = 1e-9  # all others equal: any difference is infinitely far out
    assert panel_outliers(it, flat)[0].z == np.inf
