"""The split-half HSIC engine against independent references (method §2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hyppo.d_variate import dHsic as Dhsic
from scipy.spatial.distance import cdist

from sde_core.errors import InputError, SDEError
from sde_core.stats.hsic import (
    MAX_SPLITS,
    gaussian_gram,
    hsic,
    kernel_spread,
    pool_sq_distances,
    resolve_sigma,
    split_half_batch_stats,
    split_half_hsic,
    split_half_hsic_batch,
    split_permutations,
    subset_seeds,
)

RTOL = 1e-9


# ---------------------------------------------------------------- slow textbook references


def textbook_gram(x: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(-cdist(x, x, "sqeuclidean") / (2 * sigma**2))


def textbook_hsic_biased(x: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """Gretton et al. (2005): tr(K H L H) / (m-1)² with explicit m×m products."""
    m = x.shape[0]
    h = np.eye(m) - np.ones((m, m)) / m
    k, lm = textbook_gram(x, sigma), textbook_gram(y, sigma)
    return float(np.trace(k @ h @ lm @ h)) / (m - 1) ** 2


def song_hsic_unbiased(x: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """Song et al. (2012), Eq. 5, written with explicit matrix products."""
    m = x.shape[0]
    k, lm = textbook_gram(x, sigma), textbook_gram(y, sigma)
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(lm, 0.0)
    one = np.ones(m)
    term1 = np.trace(k @ lm)
    term2 = (one @ k @ one) * (one @ lm @ one) / ((m - 1) * (m - 2))
    term3 = 2.0 / (m - 2) * (one @ k @ lm @ one)
    return float((term1 + term2 - term3) / (m * (m - 3)))


def ustat_hsic_bruteforce(x: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """The HSIC U-statistic by its definition: mean over ordered 4-tuples of distinct indices."""
    m = x.shape[0]
    k, lm = textbook_gram(x, sigma), textbook_gram(y, sigma)
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(m), 4):
        total += k[i, j] * lm[i, j] + k[i, j] * lm[q, r] - 2 * k[i, j] * lm[i, q]
        count += 1
    return total / count


def textbook_split_half(acts: np.ndarray, idx: np.ndarray, sigma: float, estimator: str):
    m = idx.shape[1] // 2
    fn = textbook_hsic_biased if estimator == "biased" else song_hsic_unbiased
    return np.array([fn(acts[row[:m]], acts[row[m:]], sigma) for row in idx])


@pytest.fixture(scope="module")
def acts() -> np.ndarray:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(61, 6))
    # Some structure so HSIC values are not all ~0.
    base[:, 1] = base[:, 0] ** 2 + 0.1 * rng.normal(size=61)
    return base


# ---------------------------------------------------------------- correctness


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
@pytest.mark.parametrize("sigma", [0.7, 2.5])
def test_split_half_matches_textbook(acts, estimator, sigma):
    got = split_half_hsic(acts, n_splits=25, sigma=sigma, estimator=estimator, seed=3)
    idx = split_permutations(acts.shape[0], 25, 3)
    ref = textbook_split_half(acts, idx, sigma, estimator)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=0)
    assert got.shape == (25,) and got.dtype == np.float64


def test_odd_subset_drops_one_row_at_random():
    idx = split_permutations(11, 50, seed=0)
    assert idx.shape == (50, 10)
    dropped = set(range(11)) - set(idx[0])
    assert len(dropped) == 1
    # The same row is dropped in every split, and each split is a permutation of the rest.
    assert all(set(row) == set(idx[0]) for row in idx)
    assert {
        int(next(iter(set(range(11)) - set(split_permutations(11, 1, s)[0])))) for s in range(30)
    } != {int(next(iter(dropped)))}


def test_hsic_matches_hyppo_dhsic():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3))
    y = np.tanh(x @ rng.normal(size=(3, 2))) + 0.3 * rng.normal(size=(40, 2))
    sigma = 1.3
    m = x.shape[0]
    theirs = Dhsic(compute_kernel="gaussian", gamma=1 / (2 * sigma**2)).statistic(x, y)
    # hyppo normalises tr(KHLH) by m², method §2 by (m-1)².
    np.testing.assert_allclose(hsic(x, y, sigma), theirs * m**2 / (m - 1) ** 2, rtol=RTOL)


def test_split_half_matches_hyppo_per_split(acts):
    sigma = 1.1
    idx = split_permutations(acts.shape[0], 10, 5)
    m = idx.shape[1] // 2
    dh = Dhsic(compute_kernel="gaussian", gamma=1 / (2 * sigma**2))
    ref = [dh.statistic(acts[r[:m]], acts[r[m:]]) * m**2 / (m - 1) ** 2 for r in idx]
    got = split_half_hsic(acts, n_splits=10, sigma=sigma, seed=5)
    np.testing.assert_allclose(got, ref, rtol=RTOL)


def test_unbiased_matches_song_formula_and_ustatistic_definition():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(7, 2))
    y = x + 0.5 * rng.normal(size=(7, 2))
    got = hsic(x, y, 1.0, estimator="unbiased")
    np.testing.assert_allclose(got, song_hsic_unbiased(x, y, 1.0), rtol=RTOL)
    np.testing.assert_allclose(got, ustat_hsic_bruteforce(x, y, 1.0), rtol=RTOL)


def test_hsic_biased_matches_textbook_and_detects_dependence():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(80, 2))
    dep = x + 0.1 * rng.normal(size=(80, 2))
    ind = rng.normal(size=(80, 2))
    np.testing.assert_allclose(hsic(x, dep, 1.0), textbook_hsic_biased(x, dep, 1.0), rtol=RTOL)
    assert hsic(x, dep, 1.0) > 5 * hsic(x, ind, 1.0)


def test_separate_sigma_for_y():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(30, 4))
    m = 30
    h = np.eye(m) - 1 / m
    ref = np.trace(textbook_gram(x, 0.5) @ h @ textbook_gram(y, 2.0) @ h) / (m - 1) ** 2
    np.testing.assert_allclose(hsic(x, y, 0.5, sigma_y=2.0), ref, rtol=RTOL)


# ---------------------------------------------------------------- invariances


def test_paired_row_order_invariance():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    p = rng.permutation(50)
    for est in ("biased", "unbiased"):
        np.testing.assert_allclose(
            hsic(x[p], y[p], 1.0, estimator=est), hsic(x, y, 1.0, estimator=est), rtol=RTOL
        )


def test_split_values_follow_rows_not_positions(acts):
    """Permuting the subset's rows permutes the split indices: same multiset of pairs."""
    rng = np.random.default_rng(6)
    p = rng.permutation(acts.shape[0])
    sigma = 1.0
    idx = split_permutations(acts.shape[0], 15, 9)
    via_perm = textbook_split_half(acts[p], idx, sigma, "biased")
    direct = textbook_split_half(acts, p[idx], sigma, "biased")
    np.testing.assert_allclose(via_perm, direct, rtol=RTOL)
    np.testing.assert_allclose(
        split_half_hsic(acts[p], n_splits=15, sigma=sigma, seed=9), direct, rtol=RTOL
    )


@pytest.mark.parametrize("scale", [0.01, 3.0, 250.0])
def test_sigma_scaling_invariance(acts, scale):
    base = split_half_hsic(acts, n_splits=20, sigma=1.7, seed=1)
    np.testing.assert_allclose(
        split_half_hsic(acts * scale, n_splits=20, sigma=1.7 * scale, seed=1), base, rtol=1e-8
    )
    np.testing.assert_allclose(
        split_half_hsic(acts * scale, n_splits=20, sigma="median", seed=1),
        split_half_hsic(acts, n_splits=20, sigma="median", seed=1),
        rtol=1e-8,
    )


def test_translation_invariance(acts):
    np.testing.assert_allclose(
        split_half_hsic(acts + 100.0, n_splits=10, sigma=1.0),
        split_half_hsic(acts, n_splits=10, sigma=1.0),
        rtol=1e-7,
    )


# ---------------------------------------------------------------- sigma rules, kernels, seeds


def test_sigma_rules(acts):
    assert resolve_sigma("sqrt_dim", acts) == pytest.approx(np.sqrt(6))
    d = cdist(acts, acts)
    assert resolve_sigma("median", acts) == pytest.approx(np.median(d[np.triu_indices(61, 1)]))
    assert resolve_sigma(2.5, acts) == 2.5


def test_median_rule_samples_at_most_1000_rows():
    rng = np.random.default_rng(0)
    big = rng.normal(size=(1500, 4))
    s = resolve_sigma("median", big, seed=4)
    rows = np.sort(np.random.default_rng(4).choice(1500, 1000, replace=False))
    d = cdist(big[rows], big[rows])
    assert s == pytest.approx(np.median(d[np.triu_indices(1000, 1)]))


def test_gaussian_gram_against_textbook(acts):
    np.testing.assert_allclose(gaussian_gram(acts, 0.9), textbook_gram(acts, 0.9), rtol=1e-12)
    cross = gaussian_gram(acts[:5], 0.9, acts[5:9])
    np.testing.assert_allclose(cross, textbook_gram(acts[:9], 0.9)[:5, 5:9], rtol=1e-12)


def test_seed_determinism(acts):
    a = split_half_hsic(acts, n_splits=30, seed=11)
    np.testing.assert_array_equal(a, split_half_hsic(acts, n_splits=30, seed=11))
    assert not np.array_equal(a, split_half_hsic(acts, n_splits=30, seed=12))


def test_torch_tensor_input_matches_numpy(acts):
    t = torch.as_tensor(acts, dtype=torch.float64)
    np.testing.assert_array_equal(split_half_hsic(t, n_splits=12), split_half_hsic(acts, 12))


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_torch_float32_path_meets_spec_accuracy(estimator):
    """method §2: float32 on the centred Gram keeps errors < 1e-3 of the across-split SD."""
    rng = np.random.default_rng(8)
    acts = rng.normal(size=(300, 64)) + np.repeat(rng.normal(size=(30, 64)), 10, axis=0)
    ref = split_half_hsic(acts, n_splits=40, estimator=estimator, seed=2)
    got = split_half_hsic(
        acts, n_splits=40, estimator=estimator, seed=2, device="cpu", backend="torch"
    )
    assert np.max(np.abs(got - ref)) < 1e-3 * ref.std()


# ---------------------------------------------------------------- batch engine and spread


def test_batch_rows_equal_single_calls():
    rng = np.random.default_rng(9)
    pool = rng.normal(size=(200, 5))
    subsets = np.stack([rng.choice(200, 40, replace=False) for _ in range(6)])
    got = split_half_hsic_batch(pool, subsets, n_splits=15, sigma=1.3, seed=4)
    seeds = subset_seeds(4, 6)
    for t in range(6):
        single = split_half_hsic(pool[subsets[t]], n_splits=15, sigma=1.3, seed=seeds[t])
        np.testing.assert_allclose(got[t], single, rtol=1e-12)


def test_batch_pool_distances_path_equals_rows_path():
    """Precomputed pool distances (reused across σ) give the values computed from the rows."""
    rng = np.random.default_rng(10)
    pool = rng.normal(size=(120, 4))
    subsets = np.stack([rng.choice(120, 31, replace=False) for _ in range(4)])
    from_rows = split_half_hsic_batch(pool, subsets, n_splits=9, sigma=1.0, estimator="unbiased")
    dist = pool_sq_distances(pool, np.unique(subsets))
    from_pool = split_half_hsic_batch(
        pool, subsets, n_splits=9, sigma=1.0, estimator="unbiased", distances=dist
    )
    np.testing.assert_allclose(from_pool, from_rows, rtol=1e-12)
    # a σ change reuses the same distances
    np.testing.assert_allclose(
        split_half_hsic_batch(pool, subsets, n_splits=9, sigma=2.5, distances=dist),
        split_half_hsic_batch(pool, subsets, n_splits=9, sigma=2.5),
        rtol=1e-12,
    )


def test_kernel_spread_formula(acts):
    sigma = 1.4
    k = textbook_gram(acts[:20], sigma)
    mean_off = (k.sum() - 20) / (20 * 19)
    expected = (1 - mean_off) ** 2 / 10
    got = kernel_spread(acts, subsets=np.arange(20)[None], sigma=sigma)
    np.testing.assert_allclose(got, [expected], rtol=1e-12)


def test_batch_stats_spread_equals_kernel_spread_on_both_distance_paths():
    rng = np.random.default_rng(12)
    pool = rng.normal(size=(150, 3))
    subsets = np.stack([rng.choice(150, 20, replace=False) for _ in range(5)])
    stats = split_half_batch_stats(pool, subsets, n_splits=7, sigma=1.1, seed=2)
    np.testing.assert_array_equal(stats.h, split_half_hsic_batch(pool, subsets, 7, 1.1, seed=2))
    ref = [textbook_spread(pool[r], 1.1) for r in subsets]
    np.testing.assert_allclose(stats.spread, ref, rtol=1e-12)
    np.testing.assert_allclose(kernel_spread(pool, subsets, 1.1), ref, rtol=1e-12)
    via_pool = split_half_batch_stats(
        pool, subsets, n_splits=7, sigma=1.1, seed=2, distances=pool_sq_distances(pool)
    )
    np.testing.assert_allclose(via_pool.spread, ref, rtol=1e-12)


def textbook_spread(x: np.ndarray, sigma: float) -> float:
    k = textbook_gram(x, sigma)
    n = x.shape[0]
    return (1 - (k.sum() - n) / (n * (n - 1))) ** 2 / (n / 2)


def test_biased_hsic_tracks_spread():
    """method §9 finding: the biased split-half HSIC mostly tracks the activations' spread."""
    rng = np.random.default_rng(11)
    scales = np.linspace(0.3, 2.0, 12)
    pool = np.concatenate([s * rng.normal(size=(60, 8)) for s in scales])
    subsets = np.arange(720).reshape(12, 60)
    scores = split_half_hsic_batch(pool, subsets, n_splits=30, sigma=np.sqrt(8)).mean(1)
    spread = kernel_spread(pool, subsets, sigma=np.sqrt(8))
    assert np.corrcoef(scores, spread)[0, 1] > 0.95


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda a: split_half_hsic(a[:3]), "at least 4"),
        (lambda a: split_half_hsic(a[:7], estimator="unbiased"), "at least 8"),
        (lambda a: split_half_hsic(np.where(a > 2, np.nan, a)), "NaN"),
        (lambda a: split_half_hsic(np.where(a > 2, np.inf, a)), "NaN/inf"),
        (lambda a: split_half_hsic(a[None]), "shape"),
        (lambda a: split_half_hsic(a, sigma=0.0), "positive"),
        (lambda a: split_half_hsic(a, sigma=-1.0), "positive"),
        (lambda a: split_half_hsic(a, sigma="silverman"), "unknown σ rule"),
        (lambda a: split_half_hsic(a, n_splits=0), "at least 1"),
        (lambda a: split_half_hsic(a, n_splits=MAX_SPLITS + 1), "more than sensible"),
        (lambda a: split_half_hsic(a, n_splits=2.5), "integer"),
        (lambda a: split_half_hsic(a, estimator="debiased"), "estimator"),
        (lambda a: split_half_hsic(a, seed=-1), "seed"),
        (lambda a: split_half_hsic(a, device="tpu9"), "device"),
        (lambda a: split_half_hsic("not an array"), "numeric array"),
        (lambda a: split_half_hsic(a[:, :0]), "0 feature"),
        (lambda a: hsic(a[:10], a[:11], 1.0), "same number of rows"),
        (lambda a: resolve_sigma("median", np.ones((5, 2))), "median"),
        (lambda a: split_half_hsic_batch(a, np.array([[0, 1, 2, 999]])), r"\[0, 61\)"),
        (lambda a: split_half_hsic_batch(a, np.array([[0, 1, 1, 2]])), "repeats"),
        (lambda a: split_half_hsic_batch(a, np.array([0, 1, 2, 3])), r"\(T, n\)"),
        (lambda a: split_half_hsic_batch(a, np.array([[0.0, 1, 2, 3]])), "integer"),
        (lambda a: split_half_hsic_batch(a, np.arange(8)[None], sigma="median"), "positive"),
        (lambda a: kernel_spread(a, sigma=np.nan), "positive"),
    ],
)
def test_bad_input_raises_sde_error(acts, call, match):
    with pytest.raises(SDEError, match=match) as info:
        call(acts)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InputError)


def test_cuda_request_without_gpu_is_a_clear_error(acts):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the request is valid here")
    with pytest.raises(InputError, match="no CUDA GPU"):
        split_half_hsic(acts, device="cuda")
