"""The split-half HSIC engine against independent references (method §2)."""

from __future__ import annotations

# Float tolerances in this file compare two float64 computations of the same inputs in one
# process (an implementation against a textbook or a second route): no float32 activation or
# machine-specific kernel lies between them, so their agreement is limited only by float64
# summation order and a tight relative tolerance is the conditioning. Results that cross
# machines are compared by sde_core.pipeline.reproduce (docs/method.md §13).
import itertools

import numpy as np
import pytest
import torch
from hyppo.d_variate import dHsic as Dhsic
from scipy.spatial.distance import cdist

from sde_core.errors import InputError, SDEError
from sde_core.stats.hsic import (
    gaussian_gram,
    hsic,
    kernel_spread,
    resolve_sigma,
    split_half_batch_stats,
    split_half_hsic,
    split_half_hsic_batch,
)
from sde_core.stats.hsic_pool import pool_sq_distances
from sde_core.stats.hsic_splits import (
    MAX_SPLITS,
    draw_batch_splits,
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
    """Song et al. (2012), Eq. 5, written with explicit matrix products (:func:`song_from_grams`
    of the textbook Gaussian kernel matrices)."""
    return song_from_grams(textbook_gram(x, sigma), textbook_gram(y, sigma))


def ustat_hsic_bruteforce(x: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """The HSIC U-statistic by its definition: mean over ordered 4-tuples of distinct indices."""
    m = x.shape[0]
    k, lm = textbook_gram(x, sigma), textbook_gram(y, sigma)
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(m), 4):
        total += k[i, j] * lm[i, j] + k[i, j] * lm[q, r] - 2 * k[i, j] * lm[i, q]
        count += 1
    return total / count


def biased_from_grams(k: np.ndarray, lm: np.ndarray) -> float:
    """tr(K H L H) / (m-1)² for given m×m kernel matrices."""
    m = k.shape[0]
    h = np.eye(m) - np.ones((m, m)) / m
    return float(np.trace(k @ h @ lm @ h)) / (m - 1) ** 2


def song_from_grams(k: np.ndarray, lm: np.ndarray) -> float:
    """Song et al. (2012), Eq. 5, for given kernel matrices (diagonals zeroed here)."""
    m = k.shape[0]
    k, lm = k.copy(), lm.copy()
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(lm, 0.0)
    one = np.ones(m)
    term1 = np.trace(k @ lm)
    term2 = (one @ k @ one) * (one @ lm @ one) / ((m - 1) * (m - 2))
    term3 = 2.0 / (m - 2) * (one @ k @ lm @ one)
    return float((term1 + term2 - term3) / (m * (m - 3)))


def ustat_from_grams(k: np.ndarray, lm: np.ndarray) -> float:
    """The HSIC U-statistic by its definition, for given kernel matrices."""
    m = k.shape[0]
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(m), 4):
        total += k[i, j] * lm[i, j] + k[i, j] * lm[q, r] - 2 * k[i, j] * lm[i, q]
        count += 1
    return total / count


def extended_gram_minus_one(x: np.ndarray, sigma: float) -> np.ndarray:
    """``G − 1`` in extended precision (x87 long double, 64-bit mantissa) via ``expm1``.

    Both estimators are unchanged when every kernel value is shifted by the same constant
    (biased: ``H 11ᵀ H = 0``; unbiased: the U-statistic's kernel sums to zero for a constant),
    and dropping the 1 keeps all of the long double's digits for the part that varies — on
    near-constant activations the unbiased formula on the raw Gram would need more than 19.
    """
    xl = x.astype(np.longdouble)
    d2 = ((xl[:, None, :] - xl[None, :, :]) ** 2).sum(-1)
    return np.expm1(-d2 / (2 * np.longdouble(sigma) ** 2))


def extended_split_half(acts: np.ndarray, idx: np.ndarray, sigma: float, estimator: str):
    """The textbook formulas (explicit H·K·H·L products) evaluated in extended precision."""
    m = idx.shape[1] // 2
    h = np.eye(m, dtype=np.longdouble) - np.longdouble(1) / m
    out = []
    for row in idx:
        k = extended_gram_minus_one(acts[row[:m]], sigma)
        lm = extended_gram_minus_one(acts[row[m:]], sigma)
        if estimator == "biased":
            out.append(np.trace(k @ h @ lm @ h) / (m - 1) ** 2)
            continue
        np.fill_diagonal(k, 0)
        np.fill_diagonal(lm, 0)
        one = np.ones(m, dtype=np.longdouble)
        term2 = (one @ k @ one) * (one @ lm @ one) / ((m - 1) * (m - 2))
        term3 = 2 * (one @ k @ lm @ one) / (m - 2)
        out.append((np.trace(k @ lm) + term2 - term3) / (m * (m - 3)))
    return np.array(out, dtype=np.longdouble)


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


def flat_softmax(n: int, seed: int, scale: float = 3e-3) -> np.ndarray:
    """Softmax outputs of a nearly constant 10-class classifier (like a randomly initialised
    one): every probability is 0.1 ± ~3e-4, so the split-half HSIC is ~1e-16–1e-15."""
    rng = np.random.default_rng(seed)
    logits = scale * (rng.normal(size=(n, 4)) @ rng.normal(size=(4, 10)) + rng.normal(size=(n, 10)))
    p = np.exp(logits - logits.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def flat_acts() -> np.ndarray:
    return flat_softmax(60, seed=21)


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


# ---------------------------------------------------------------- exact arithmetic (method §2)


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_both_estimators_are_invariant_to_double_centring(estimator):
    """The engine's first step, G -> H_n G H_n, leaves every split's HSIC unchanged (and so
    does G -> G − 1, which the extended-precision reference below relies on)."""
    rng = np.random.default_rng(13)
    x = rng.normal(size=(20, 3))
    g = textbook_gram(x, 1.2)
    hn = np.eye(20) - 1.0 / 20
    gc = hn @ g @ hn
    fn = biased_from_grams if estimator == "biased" else song_from_grams
    for row in split_permutations(20, 6, seed=1):
        a, b = np.ix_(row[:10], row[:10]), np.ix_(row[10:], row[10:])
        np.testing.assert_allclose(fn(gc[a], gc[b]), fn(g[a], g[b]), rtol=1e-10)
        np.testing.assert_allclose(fn(g[a] - 1, g[b] - 1), fn(g[a], g[b]), rtol=1e-10)
        if estimator == "unbiased":
            np.testing.assert_allclose(ustat_from_grams(gc[a], gc[b]), fn(g[a], g[b]), rtol=1e-10)
    # not vacuous: the centred blocks really differ from the raw ones
    assert np.abs(gc - g).min() > 1e-3


def test_flat_activations_are_in_the_cancelling_regime(flat_acts):
    idx = split_permutations(60, 8, seed=3)
    ref = extended_split_half(flat_acts, idx, np.sqrt(10), "biased").astype(float)
    assert 1e-18 < np.median(ref) < 1e-13
    # The uncentred O(m²) identity in float64 (the pre-centring engine) loses the value here.
    m = 30
    rel = []
    for row, want in zip(idx, ref, strict=True):
        k = textbook_gram(flat_acts[row[:m]], np.sqrt(10))
        lm = textbook_gram(flat_acts[row[m:]], np.sqrt(10))
        rk, rl = k.sum(1), lm.sum(1)
        got = ((k * lm).sum() - 2 * rk @ rl / m + rk.sum() * rl.sum() / m**2) / (m - 1) ** 2
        rel.append(abs(got - want) / want)
    assert max(rel) > 1e-3


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
@pytest.mark.parametrize(
    "engine",
    [{}, {"device": "cpu", "backend": "torch", "precision": "float64"}],
    ids=["numba", "torch-cpu"],
)
def test_flat_activations_match_the_extended_precision_textbook(flat_acts, estimator, engine):
    """H ~1e-15: relative error ≤ 1e-6 on the CPU engine and on the torch engine (CPU)."""
    sigma = np.sqrt(10)
    idx = split_permutations(60, 8, seed=3)
    ref = extended_split_half(flat_acts, idx, sigma, estimator).astype(float)
    got = split_half_hsic(flat_acts, 8, sigma, estimator, seed=3, **engine)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)


def test_batch_on_flat_activations_matches_the_extended_precision_textbook():
    pool = flat_softmax(90, seed=22)
    subsets = np.stack([np.random.default_rng(t).choice(90, 41, replace=False) for t in range(3)])
    seeds = subset_seeds(5, 3)
    got = split_half_hsic_batch(pool, subsets, 6, np.sqrt(10), seed=5)
    via_pool = split_half_hsic_batch(
        pool, subsets, 6, np.sqrt(10), seed=5, distances=pool_sq_distances(pool)
    )
    for t, row in enumerate(subsets):
        idx = split_permutations(41, 6, seeds[t])
        ref = extended_split_half(pool[row], idx, np.sqrt(10), "biased").astype(float)
        np.testing.assert_allclose(got[t], ref, rtol=1e-6, atol=0)
        np.testing.assert_allclose(via_pool[t], ref, rtol=1e-6, atol=0)


def test_hsic_on_flat_pairs_matches_the_extended_precision_textbook(flat_acts):
    x, y = flat_acts[:30], flat_acts[30:]
    ref = extended_split_half(flat_acts, np.arange(60)[None], 0.8, "biased").astype(float)[0]
    assert ref < 1e-12
    np.testing.assert_allclose(hsic(x, y, 0.8), ref, rtol=1e-6)


@pytest.fixture(scope="module")
def demo_outputs() -> dict[str, np.ndarray]:
    """Real activations: the mnist1d demo's original and random models on 600 training rows."""
    from pathlib import Path

    from sde_core.inputs.activations import get_activations
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(Path(__file__).resolve().parents[2] / "assets" / "demo-mnist1d")
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    out = {}
    for entry in ws.models:
        if entry.name in ("original", "random"):
            acts = get_activations(
                ws.path(entry.checkpoint),
                bundle,
                "train",
                ["output", "penultimate"],
                None,
                arch=entry.arch,
                indices=np.arange(600),
            )
            out[f"{entry.name}/output"] = acts["output"].astype(np.float64)
            out[f"{entry.name}/penultimate"] = acts["penultimate"].astype(np.float64)
    return out


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
@pytest.mark.parametrize(
    "case",
    ["original/output", "original/penultimate", "random/output", "synthetic flat"],
)
@pytest.mark.parametrize(
    "engine",
    [{"precision": "float32"}, {"device": "cpu", "backend": "torch", "precision": "float32"}],
    ids=["numba-float32", "torch-float32"],
)
def test_float32_gathers_stay_below_1e_3_of_the_split_sd(demo_outputs, estimator, case, engine):
    """method §2: float32 only on the double-centred float64 Gram, error < 1e-3 of the SD."""
    acts = flat_softmax(400, seed=23) if case == "synthetic flat" else demo_outputs[case]
    rows = np.random.default_rng(0).choice(acts.shape[0], 400, replace=False)
    sigma = float(np.sqrt(acts.shape[1]))
    ref = split_half_hsic(acts[rows], 40, sigma, estimator, seed=4)
    got = split_half_hsic(acts[rows], 40, sigma, estimator, seed=4, **engine)
    assert np.max(np.abs(got - ref)) < 1e-3 * ref.std()


# ---------------------------------------------------------------- engines, reuse, threads


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(14)
    pool = rng.normal(size=(300, 6))
    few = np.stack([rng.choice(300, 51, replace=False) for _ in range(3)])
    many = np.stack([rng.choice(300, 40, replace=False) for _ in range(9)])
    for subsets in (few, many):
        one = split_half_batch_stats(pool, subsets, 25, 1.5, "unbiased", seed=3, threads=1)
        for threads in (2, 4, 16):
            other = split_half_batch_stats(
                pool, subsets, 25, 1.5, "unbiased", seed=3, threads=threads
            )
            np.testing.assert_array_equal(other.h, one.h)
            np.testing.assert_array_equal(other.spread, one.spread)
    single = split_half_hsic(pool[:80], 30, 1.5, seed=2, threads=1)
    np.testing.assert_array_equal(split_half_hsic(pool[:80], 30, 1.5, seed=2, threads=3), single)


def test_drawn_batch_splits_are_the_ones_drawn_inside():
    rng = np.random.default_rng(15)
    pool = rng.normal(size=(100, 3))
    subsets = np.stack([rng.choice(100, 31, replace=False) for _ in range(5)])
    splits = draw_batch_splits(31, 9, seed=4, n_subsets=5)
    assert splits.index.dtype == np.uint16 and splits.index.shape == (5, 9, 30)
    for t, sd in enumerate(subset_seeds(4, 5)):
        np.testing.assert_array_equal(splits.rows(t), split_permutations(31, 9, sd))
    inside = split_half_hsic_batch(pool, subsets, 9, 1.0, seed=4)
    np.testing.assert_array_equal(
        split_half_hsic_batch(pool, subsets, 9, 1.0, seed=4, splits=splits), inside
    )
    # more drawn subsets than used: the first T are the ones this call needs
    more = draw_batch_splits(31, 9, seed=4, n_subsets=7)
    np.testing.assert_array_equal(
        split_half_hsic_batch(pool, subsets, 9, 1.0, seed=4, splits=more), inside
    )
    with pytest.raises(InputError, match="draw_batch_splits"):
        split_half_hsic_batch(pool, subsets, 9, 1.0, seed=5, splits=splits)
    with pytest.raises(InputError, match="draw_batch_splits"):
        split_half_hsic_batch(pool, subsets, 8, 1.0, seed=4, splits=splits)


def test_pool_distances_are_checked_against_the_call():
    rng = np.random.default_rng(16)
    pool = rng.normal(size=(50, 3))
    subsets = np.stack([np.arange(10), np.arange(10, 20)])
    part = pool_sq_distances(pool, np.r_[np.arange(15), 3, 7])
    np.testing.assert_array_equal(part.rows, np.arange(15))
    np.testing.assert_allclose(part.d2, cdist(pool[:15], pool[:15], "sqeuclidean"), atol=1e-12)
    assert np.array_equal(part.d2, part.d2.T) and not part.d2.diagonal().any()
    whole = pool_sq_distances(pool, threads=1).d2
    np.testing.assert_array_equal(pool_sq_distances(pool, threads=3).d2, whole)
    for bad in (np.array([0, 50]), np.array([-1, 2]), np.array([0.5]), np.array([], int)):
        with pytest.raises(InputError, match="rows"):
            pool_sq_distances(pool, bad)
    with pytest.raises(InputError, match="not covered"):
        split_half_hsic_batch(pool, subsets, 5, 1.0, distances=part)
    with pytest.raises(InputError, match="shape"):
        split_half_hsic_batch(pool[:40], subsets, 5, 1.0, distances=pool_sq_distances(pool))


def test_auto_device_without_a_gpu_is_the_numba_engine(acts):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: auto picks it")
    cpu = split_half_hsic(acts, 12, 1.3, device="cpu")
    np.testing.assert_array_equal(split_half_hsic(acts, 12, 1.3), cpu)
    np.testing.assert_array_equal(split_half_hsic(acts, 12, 1.3, device="auto"), cpu)
    np.testing.assert_array_equal(split_half_hsic(acts, 12, 1.3, backend="numba"), cpu)


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_torch_engine_batch_matches_the_cpu_engine(estimator):
    rng = np.random.default_rng(17)
    pool = rng.normal(size=(200, 5)) + np.repeat(rng.normal(size=(20, 5)), 10, axis=0)
    subsets = np.stack([rng.choice(200, 41, replace=False) for _ in range(6)])
    ref = split_half_batch_stats(pool, subsets, 20, 2.0, estimator, seed=1)
    torch64 = split_half_batch_stats(
        pool,
        subsets,
        20,
        2.0,
        estimator,
        seed=1,
        device="cpu",
        backend="torch",
        precision="float64",
    )
    np.testing.assert_allclose(torch64.h, ref.h, rtol=1e-10)
    np.testing.assert_allclose(torch64.spread, ref.spread, rtol=1e-12)
    dist = pool_sq_distances(pool)
    torch32 = split_half_batch_stats(
        pool, subsets, 20, 2.0, estimator, seed=1, device="cpu", backend="torch", distances=dist
    )
    assert np.all(np.abs(torch32.h - ref.h).max(1) < 1e-3 * ref.h.std(1))
    np.testing.assert_allclose(torch32.spread, ref.spread, rtol=1e-12)


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
        (lambda a: split_half_hsic(a, sigma="silverman"), "σ rule must be"),
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
        (lambda a: split_half_hsic(a, precision="float16"), "precision"),
        (lambda a: split_half_hsic(a, backend="jax"), "backend"),
        (lambda a: split_half_hsic(a, threads=0), "threads"),
        (lambda a: split_half_hsic_batch(a, np.arange(8)[None], splits=np.zeros(3)), "BatchSplits"),
        (lambda a: split_half_hsic_batch(a, np.arange(8)[None], distances=a), "PoolDistances"),
        (lambda a: draw_batch_splits(1, 10, 0, 3), "n must be"),
        (lambda a: draw_batch_splits(10, 10, 0, 0), "n_subsets"),
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


# ---------------------------------------------------------------- an outlier row far away


def outlier_acts(seed: int = 3) -> np.ndarray:
    """Rows a few units apart plus one row 2e10 away (found by the property tests: the
    inner-product distance formula lost every digit of the near distances)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, size=(41, 3)).astype(float)
    x[-1, 0] = 21427849209.0
    return x


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_an_outlier_row_keeps_the_near_distances_exact(backend: str) -> None:
    x = outlier_acts()
    sigma = float(np.sqrt(x.shape[1]))
    idx = split_permutations(x.shape[0], 25, 0)
    want = textbook_split_half(x, idx, sigma, "biased")
    got = split_half_hsic(
        x, n_splits=25, sigma="sqrt_dim", seed=0, backend=backend, device="cpu",
        precision="float64",
    )  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-15)
    assert (got >= 0).all()  # the biased estimator is a trace of two PSD matrices


def test_an_outlier_row_in_pool_distances_and_grams() -> None:
    x = outlier_acts()
    sigma = float(np.sqrt(x.shape[1]))
    np.testing.assert_allclose(gaussian_gram(x, sigma), textbook_gram(x, sigma), atol=1e-15)
    sub = np.stack([np.r_[0:20, 40], np.r_[20:40, 40]])  # both subsets hold the outlier row
    cached = split_half_batch_stats(
        x, sub, n_splits=30, sigma=sigma, seed=1, distances=pool_sq_distances(x)
    ).h
    fresh = split_half_batch_stats(x, sub, n_splits=30, sigma=sigma, seed=1).h
    want = np.stack(
        [textbook_split_half(x[s], split_permutations(s.size, 30, q), sigma, "biased")
         for s, q in zip(sub, subset_seeds(1, 2), strict=True)]
    )  # fmt: skip
    np.testing.assert_allclose(fresh, want, rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(cached, want, rtol=RTOL, atol=1e-15)


def test_the_auto_device_is_cuda_when_torch_sees_one_else_the_cpu(monkeypatch):
    """``device = "auto"`` (the evaluation setting): the HSIC stage runs the torch kernel on
    CUDA where there is one, the numba engine elsewhere; explicit devices are kept."""
    import sde_core.stats.hsic as hsic
    from sde_core.pipeline.settings import EvalSettings

    monkeypatch.setattr(hsic, "_cuda_available", lambda: False)
    assert hsic.engine_device("auto") == "cpu" and hsic.engine_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(hsic, "_cuda_available", lambda: True)
    assert hsic.engine_device("auto") == "cuda" and hsic.engine_device("cpu") == "cpu"
    assert EvalSettings(device="auto").result_key()["device"] == "auto"
