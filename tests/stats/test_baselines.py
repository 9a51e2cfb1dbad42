"""MMD² and Wasserstein-2 baselines (method §6) against independent references."""

from __future__ import annotations

# Float tolerances in this file compare two float64 computations of the same inputs in one
# process (an implementation against a textbook or a second route): no float32 activation or
# machine-specific kernel lies between them, so their agreement is limited only by float64
# summation order and a tight relative tolerance is the conditioning. Results that cross
# machines are compared by sde_core.pipeline.reproduce (docs/method.md §13).
import itertools

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.stats import wasserstein_distance

from sde_core.errors import InputError
from sde_core.stats.baselines import mmd2, nearest_reference, nearest_reference_batch, wasserstein2


def _k(a, b, sigma):
    return np.exp(-cdist(a, b, "sqeuclidean") / (2 * sigma**2))


def test_mmd2_biased_and_unbiased_against_textbook():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 3)), rng.normal(0.5, 1, size=(25, 3))
    s = 1.2
    biased = _k(x, x, s).mean() + _k(y, y, s).mean() - 2 * _k(x, y, s).mean()
    assert mmd2(x, y, s) == pytest.approx(biased, rel=1e-12)
    kxx, kyy = _k(x, x, s), _k(y, y, s)
    unb = (
        sum(kxx[i, j] for i in range(30) for j in range(30) if i != j) / (30 * 29)
        + sum(kyy[i, j] for i in range(25) for j in range(25) if i != j) / (25 * 24)
        - 2 * _k(x, y, s).mean()
    )
    assert mmd2(x, y, s, unbiased=True) == pytest.approx(unb, rel=1e-10)
    assert mmd2(x, x, s) == pytest.approx(0.0, abs=1e-12)


def test_wasserstein2_one_dimensional_closed_form():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=40), rng.exponential(size=40)
    expected = np.sqrt(np.mean((np.sort(x) - np.sort(y)) ** 2))
    assert wasserstein2(x[:, None], y[:, None]) == pytest.approx(expected, rel=1e-12)
    # W1 from scipy is a lower bound of W2.
    assert wasserstein_distance(x, y) <= wasserstein2(x[:, None], y[:, None]) + 1e-12


def test_wasserstein2_bruteforce_small_clouds():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    cost = cdist(x, y, "sqeuclidean")
    best = min(cost[range(6), list(p)].mean() for p in itertools.permutations(range(6)))
    assert wasserstein2(x, y) == pytest.approx(np.sqrt(best), rel=1e-12)


@pytest.mark.parametrize("distance", ["mmd", "wasserstein"])
def test_nearest_reference_known_answers(distance):
    rng = np.random.default_rng(3)
    it, oot = rng.normal(0, 1, (50, 4)), rng.normal(3, 1, (50, 4))
    near_it = nearest_reference(rng.normal(0, 1, (50, 4)), it, oot, distance, sigma=2.0)
    near_oot = nearest_reference(rng.normal(3, 1, (50, 4)), it, oot, distance, sigma=2.0)
    assert near_it.in_training and near_it.d_it < near_it.d_oot
    assert not near_oot.in_training
    tie = nearest_reference(it, it, it, distance, sigma=2.0)
    assert tie.in_training  # ties count as in-training, as for SDE


@pytest.mark.parametrize("distance", ["mmd", "wasserstein"])
def test_batch_equals_single_decisions(distance):
    rng = np.random.default_rng(4)
    it, oot = rng.normal(0, 1, (30, 3)), rng.normal(1, 1, (30, 3))
    targets = [rng.normal(m, 1, (30, 3)) for m in (0.0, 0.4, 0.6, 1.0)]
    batch = nearest_reference_batch(targets, it, oot, distance, sigma=1.5)
    single = [nearest_reference(t, it, oot, distance, sigma=1.5) for t in targets]
    for b, s in zip(batch, single, strict=True):
        assert b.in_training == s.in_training
        assert b.d_it == pytest.approx(s.d_it, rel=1e-12, abs=1e-15)
        assert b.d_oot == pytest.approx(s.d_oot, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: wasserstein2(np.ones((5, 2)), np.ones((6, 2))), "equal-size"),
        (lambda: mmd2(np.ones((5, 2)), np.ones((5, 3)), 1.0), "same dimension"),
        (lambda: mmd2(np.ones((5, 2)), np.ones((5, 2)), 0.0), "positive"),
        (lambda: mmd2(np.ones((1, 2)), np.ones((5, 2)), 1.0, unbiased=True), "at least 2"),
        (lambda: nearest_reference(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2))), "sigma"),
        (
            lambda: nearest_reference(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), "kl"),
            "unknown distance",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(InputError, match=match):
        call()
