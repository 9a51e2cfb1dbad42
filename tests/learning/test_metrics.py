"""Tests of sde_core.learning.metrics: accuracies, MIA features and the ASR against a hand
computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.svm import SVC
from torch import nn
from torch.utils.data import TensorDataset

from sde_core.errors import InputError
from sde_core.learning.metrics import (
    ATTACK_TIE_BAND,
    ClassicMetrics,
    accuracy,
    accuracy_from_probs,
    behaviour_check,
    classic_metrics,
    entropy,
    metrics_from_probs,
    mia_asr,
    mia_asr_from_probs,
    mia_decisions_from_probs,
    modified_entropy,
    newcombe_interval,
    predict_probs,
    top1_near_ties,
    true_label_confidence,
)
from sde_core.stats.near_ties import ACTIVATION_RTOL


def dirichlet_probs(n: int, c: int, seed: int, sharp: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    alpha = np.ones((n, c))
    alpha[np.arange(n), y] += sharp
    gam = rng.gamma(alpha)
    return gam / gam.sum(axis=1, keepdims=True), y


def test_accuracy_and_confidence_by_hand():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6]])
    labels = np.array([0, 1, 1, 2])
    assert accuracy_from_probs(probs, labels) == 50.0
    np.testing.assert_allclose(true_label_confidence(probs, labels), [0.7, 0.3, 0.4, 0.6])
    np.testing.assert_allclose(
        entropy(probs[:1]), [-(0.7 * np.log(0.7) + 0.2 * np.log(0.2) + 0.1 * np.log(0.1))]
    )


def test_modified_entropy_song_mittal_formula():
    p = np.array([[0.7, 0.2, 0.1]])
    y = np.array([1])
    expected = -(1 - 0.2) * np.log(0.2) - (0.7 * np.log(1 - 0.7) + 0.1 * np.log(1 - 0.1))
    np.testing.assert_allclose(modified_entropy(p, y), [expected])
    confident = modified_entropy(np.array([[1.0, 0.0]]), np.array([0]))
    wrong = modified_entropy(np.array([[1.0, 0.0]]), np.array([1]))
    assert confident[0] == pytest.approx(0.0) and wrong[0] > 60  # log clipped at 1e-30


def test_asr_matches_a_hand_built_attack():
    members, y_m = dirichlet_probs(300, 4, seed=1, sharp=20.0)  # confident on training data
    test, y_te = dirichlet_probs(120, 4, seed=2, sharp=2.0)
    forget, retain = np.arange(0, 60), np.arange(60, 300)
    seed = 5
    asr = mia_asr_from_probs(members, y_m, test, y_te, forget, retain, seed=seed)

    conf_tr = members[np.arange(300), y_m]
    conf_te = test[np.arange(120), y_te]
    shadow = np.random.default_rng(seed).choice(retain, size=120, replace=False)
    x = np.concatenate([conf_tr[shadow], conf_te])[:, None]
    target = np.r_[np.ones(120), np.zeros(120)]
    hand = SVC(C=3, gamma="auto", kernel="rbf").fit(x, target)
    expected = float(np.mean(hand.predict(conf_tr[forget][:, None]) == 1))
    assert asr == expected
    assert asr > 0.8  # forget rows look like members

    forgotten = members.copy()  # a model that "forgot" D_f: its confidences look like test data
    forgotten[forget] = test[:60]
    y_forgot = y_m.copy()
    y_forgot[forget] = y_te[:60]
    assert (
        mia_asr_from_probs(forgotten, y_forgot, test, y_te, forget, retain, seed=seed) < asr - 0.3
    )


def test_asr_entropy_features_run_and_differ_in_value_space():
    members, y_m = dirichlet_probs(200, 3, seed=3, sharp=15.0)
    test, y_te = dirichlet_probs(80, 3, seed=4, sharp=1.0)
    args = (members, y_m, test, y_te, np.arange(40), np.arange(40, 200))
    for feature in ("confidence", "entropy", "modified_entropy"):
        assert 0.0 <= mia_asr_from_probs(*args, feature=feature) <= 1.0
    with pytest.raises(InputError, match="unknown MIA feature"):
        mia_asr_from_probs(*args, feature="loss")


def test_metrics_from_probs_and_model_paths_agree():
    g = torch.Generator().manual_seed(0)
    x_tr, y_tr = torch.randn(150, 5, generator=g), torch.randint(0, 3, (150,), generator=g)
    x_te, y_te = torch.randn(60, 5, generator=g), torch.randint(0, 3, (60,), generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    train_set, test_set = TensorDataset(x_tr, y_tr), TensorDataset(x_te, y_te)
    forget = np.arange(30)
    result = classic_metrics(model, train_set, test_set, forget, seed=1)
    assert isinstance(result, ClassicMetrics)
    with torch.no_grad():
        p_tr = torch.softmax(model(x_tr).double(), 1).numpy()
        p_te = torch.softmax(model(x_te).double(), 1).numpy()
    direct = metrics_from_probs(
        p_tr, y_tr.numpy(), p_te, y_te.numpy(), forget, np.arange(30, 150), seed=1
    )
    assert result == direct
    assert result.acc_f == pytest.approx(
        100 * float((p_tr[:30].argmax(1) == y_tr[:30].numpy()).mean())
    )
    assert accuracy(model, test_set) == result.acc_te
    assert accuracy(model, train_set, indices=forget) == result.acc_f
    assert mia_asr(model, train_set, test_set, forget, np.arange(30, 150), seed=1) == result.asr
    probs, labels = predict_probs(model, train_set, forget)
    assert probs.shape == (30, 3) and labels.dtype == np.int64
    metrics = {"acc_r", "acc_f", "acc_te", "asr"}
    assert set(result.to_dict()) == metrics | {f"{m}_ties" for m in metrics}
    decisions = mia_decisions_from_probs(
        p_tr, y_tr.numpy(), p_te, y_te.numpy(), forget, np.arange(30, 150), seed=1
    )
    assert result.asr == float(np.mean(decisions > 0))
    assert result.asr_ties == int(np.sum(np.abs(decisions) <= ATTACK_TIE_BAND))
    margins = np.diff(np.sort(p_tr[:30], axis=1)[:, -2:], axis=1)[:, 0]
    assert result.acc_f_ties == int(np.sum(margins <= 2 * ACTIVATION_RTOL))


def test_near_tie_counts_see_a_top1_tie_and_attack_values_on_the_boundary():
    probs = np.array([[0.5, 0.5, 0.0], [0.5 + 1e-6, 0.5 - 1e-6, 0.0], [0.9, 0.05, 0.05]])
    assert top1_near_ties(probs) == 2
    assert top1_near_ties(np.zeros((0, 3))) == 0


@pytest.mark.parametrize(
    ("probs", "labels", "match"),
    [
        (np.ones((3,)), np.zeros(3, dtype=int), "shape"),
        (np.full((2, 2), 0.5), np.zeros(3, dtype=int), "labels must have shape"),
        (np.array([[0.2, 0.2]]), np.array([0]), "sum to 1"),
        (np.array([[np.nan, 1.0]]), np.array([0]), "NaN"),
        (np.array([[0.5, 0.5]]), np.array([2]), r"\[0, 2\)"),
        (np.array([[0.5, 0.5]]), np.array([0.5]), "integers"),
    ],
)
def test_bad_probability_inputs(probs, labels, match):
    with pytest.raises(InputError, match=match):
        accuracy_from_probs(probs, labels)


def test_bad_indices():
    p, y = dirichlet_probs(10, 2, seed=0, sharp=1.0)
    with pytest.raises(InputError, match="outside"):
        mia_asr_from_probs(p, y, p, y, np.array([10]), np.arange(5))
    with pytest.raises(InputError, match="empty"):
        mia_asr_from_probs(p, y, p, y, np.array([], dtype=int), np.arange(5))


def test_newcombe_interval_matches_statsmodels():
    from statsmodels.stats.proportion import confint_proportions_2indep

    cases = ((56, 70, 48, 80), (9, 10, 3, 10), (0, 20, 5, 25), (400, 1200, 1300, 4000))
    for k1, n1, k2, n2 in cases:
        lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff")
        assert newcombe_interval(k1, n1, k2, n2) == pytest.approx((lo, hi), abs=1e-9)


def test_behaviour_check_gaps_against_references():
    """Accuracy gap (Newcombe), loss gap (Welch t, checked against scipy) and the held-out
    membership attack, on probabilities built so that the model fits D_f better than D_te."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    rng = np.random.default_rng(3)
    n_tr, n_te, c = 900, 600, 4
    y_tr, y_te = rng.integers(0, c, n_tr), rng.integers(0, c, n_te)
    forget, retain = np.arange(200), np.arange(200, n_tr)

    def probs(y: np.ndarray, right: np.ndarray, top: np.ndarray) -> np.ndarray:
        p = np.repeat(((1 - top) / (c - 1))[:, None], c, axis=1)
        p[np.arange(y.size), np.where(right, y, (y + 1) % c)] = top
        return p

    right_tr = rng.random(n_tr) < 0.9
    right_te = rng.random(n_te) < 0.6
    p_tr = probs(y_tr, right_tr, rng.uniform(0.7, 0.99, n_tr))
    p_te = probs(y_te, right_te, rng.uniform(0.3, 0.8, n_te))
    b = behaviour_check(p_tr, y_tr, p_te, y_te, forget, retain, seed=1)
    k_f, k_te = int(right_tr[forget].sum()), int(right_te.sum())
    assert b.acc_gap == pytest.approx(100 * (k_f / 200 - k_te / n_te))
    lo, hi = confint_proportions_2indep(k_f, 200, k_te, n_te, method="newcomb", compare="diff")
    assert (b.acc_gap_lo, b.acc_gap_hi) == pytest.approx((100 * lo, 100 * hi))
    loss_f = -np.log(true_label_confidence(p_tr[forget], y_tr[forget]))
    loss_te = -np.log(true_label_confidence(p_te, y_te))
    welch = stats.ttest_ind(loss_f, loss_te, equal_var=False).confidence_interval(0.95)
    assert b.loss_gap == pytest.approx(loss_f.mean() - loss_te.mean())
    assert (b.loss_gap_lo, b.loss_gap_hi) == pytest.approx((welch.low, welch.high))
    assert b.fits_forget_set_better() and b.loss_gap_hi < 0
    # Confident like members: the attack calls D_f "member" far more often than unseen rows.
    assert b.mia_forget > b.mia_unseen and b.mia_gap_lo > 0
    # A model that treats D_f like unseen data shows no significant gap.
    same = probs(y_tr, rng.random(n_tr) < 0.6, rng.uniform(0.3, 0.8, n_tr))
    same[retain] = p_tr[retain]
    b2 = behaviour_check(same, y_tr, p_te, y_te, forget, retain, seed=1)
    assert b2.acc_gap_lo < 0 < b2.acc_gap_hi and not b2.fits_forget_set_better()
    with pytest.raises(InputError, match="behaviour check needs"):
        behaviour_check(p_tr, y_tr, p_te[:3], y_te[:3], forget, retain)
