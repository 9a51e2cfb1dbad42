"""The null check (method §12): both tests' false-positive rates on pairs of disjoint subsets of
data known to be out-of-training, outside the reference panel — a check that can fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.common.validation import as_float_array, as_float_matrix, check_int
from sde_core.errors import InputError
from sde_core.stats.calibrated import subset_scores
from sde_core.stats.checks import as_sample, check_level, check_seed
from sde_core.stats.hsic import Estimator, split_half_hsic_batch
from sde_core.stats.sampling import disjoint_pairs, independent_subsets

__all__ = [
    "NullCalibration",
    "null_calibration",
    "null_check",
    "pool_null_checks",
    "split_test_p_values",
]


@dataclass(frozen=True)
class NullCalibration:
    """False-positive rates on genuinely disjoint out-of-training subsets (method §12).

    The null subsets come in pairs (A, B) of disjoint subsets of out-of-training data that are
    not in the reference panel and share no rows with it, so each is exchangeable with the
    panel only if the panel really represents unseen data.

    Attributes:
        split_test_fpr: share of pairs where the paper's split-level U-test says
            ``H(A) > H(B)`` at ``alpha_split`` — ideally ≈ alpha_split.
        calibrated_fpr: share of null subsets whose calibrated ``p_in`` against the OOT panel
            is below ``alpha_calibrated`` (a false "in-training") — ideally ≤ alpha_calibrated.
        over_unlearned_fpr: share of null subsets with ``p_over`` below ``alpha_calibrated`` (a
            false "over-unlearned") — ideally ≤ alpha_calibrated.
        n_pairs: number of pairs. alpha_split, alpha_calibrated: levels used.
        split_p_values: ``(n_pairs,)`` U-test p-values.
        calibrated_p_in, calibrated_p_over: ``(2·n_pairs,)`` rank p-values of A then B of each
            pair.
    """

    split_test_fpr: float
    calibrated_fpr: float
    over_unlearned_fpr: float
    n_pairs: int
    alpha_split: float
    alpha_calibrated: float
    split_p_values: np.ndarray
    calibrated_p_in: np.ndarray
    calibrated_p_over: np.ndarray


def null_check(
    pair_h: object,
    oot_panel_scores: object,
    alpha_split: float = 0.01,
    alpha_calibrated: float = 0.05,
) -> NullCalibration:
    """Both tests' false-positive rates on pairs of disjoint out-of-training subsets.

    Args:
        pair_h: ``(P, 2, K)`` split-half HSIC of P pairs (A, B) of disjoint subsets of
            out-of-training data that are not panel members and share no rows with them.
        oot_panel_scores: ``(R,)`` scores of the out-of-training reference panel the null
            subsets are judged against (R ≥ 1/alpha_calibrated − 1, or no rank p-value could
            fall below alpha_calibrated and the check could not fail).
        alpha_split: level of the paper's split-level U-test of H(A) > H(B) (default 0.01).
        alpha_calibrated: level of the calibrated verdict (default 0.05).

    Returns:
        A :class:`NullCalibration`. The check *can fail*: when the panel is not exchangeable
        with fresh unseen subsets (e.g. it comes from a different part of the data), the
        calibrated rate climbs far above ``alpha_calibrated``.
    """
    h = as_float_array(pair_h, "pair_h")
    if h.ndim != 3 or h.shape[0] < 1 or h.shape[1] != 2 or h.shape[2] < 2:
        raise InputError(
            f"pair_h must be (P, 2, K) with P ≥ 1 pairs and K ≥ 2 splits; got shape {h.shape}"
        )
    if not np.all(np.isfinite(h)):
        raise InputError("pair_h contains NaN/inf values: recompute it from finite activations")
    panel = as_sample(oot_panel_scores, "oot_panel_scores", min_size=2)
    a_split = check_level(alpha_split, "alpha_split")
    a_cal = check_level(alpha_calibrated, "alpha_calibrated")
    if 1.0 / (panel.size + 1) >= a_cal:
        raise InputError(
            f"with a panel of {panel.size} subsets the smallest rank p-value is "
            f"1/{panel.size + 1} ≥ alpha_calibrated={a_cal}, so the calibrated check could "
            f"never fail: use a panel of at least {int(np.ceil(1 / a_cal))} subsets"
        )
    split_p = split_test_p_values(h)
    scores = h.mean(axis=2).ravel()  # A then B of each pair
    p_in = (1 + (panel[None, :] >= scores[:, None]).sum(axis=1)) / (panel.size + 1)
    p_over = (1 + (panel[None, :] <= scores[:, None]).sum(axis=1)) / (panel.size + 1)
    return NullCalibration(
        split_test_fpr=float(np.mean(split_p < a_split)),
        calibrated_fpr=float(np.mean(p_in < a_cal)),
        over_unlearned_fpr=float(np.mean(p_over < a_cal)),
        n_pairs=int(h.shape[0]),
        alpha_split=a_split,
        alpha_calibrated=a_cal,
        split_p_values=split_p,
        calibrated_p_in=p_in.astype(np.float64),
        calibrated_p_over=p_over.astype(np.float64),
    )


#: scipy's Mann–Whitney test takes its exact p-value only when both samples have at most this
#: many values and there are no ties, else the normal approximation.
EXACT_MWU_MAX = 8


def split_test_p_values(pair_h: np.ndarray) -> np.ndarray:
    """``(P,)`` p-values of the paper's split-level U-test of ``H(A) > H(B)`` for each pair of
    a ``(P, 2, K)`` array, as ``scipy.stats.mannwhitneyu`` gives them pair by pair.

    With more than :data:`EXACT_MWU_MAX` splits every pair takes the normal approximation, so
    one call over all pairs gives the same p-values bit for bit, at a fraction of the cost (the
    null check sizes to hundreds of pairs per model, and a bins or α change recomputes them).
    With fewer, scipy would choose the exact or approximate p-value from ties anywhere in
    the array rather than in each pair, so the pairs are tested one by one.
    """
    a, b = pair_h[:, 0, :], pair_h[:, 1, :]
    if pair_h.shape[2] > EXACT_MWU_MAX:
        p = stats.mannwhitneyu(a, b, alternative="greater", axis=1).pvalue
        return np.asarray(p, dtype=np.float64).reshape(pair_h.shape[0])
    return np.array(
        [stats.mannwhitneyu(x, y, alternative="greater").pvalue for x, y in zip(a, b, strict=True)],
        dtype=np.float64,
    )


def pool_null_checks(checks: Sequence[NullCalibration]) -> NullCalibration:
    """Pool the null checks of several independent draws into one set of rates."""
    if not checks:
        raise InputError("pool_null_checks needs at least one null check")
    levels = {(c.alpha_split, c.alpha_calibrated) for c in checks}
    if len(levels) != 1:
        raise InputError(f"null checks with different levels cannot be pooled: {sorted(levels)}")
    a_split, a_cal = levels.pop()
    split_p = np.concatenate([c.split_p_values for c in checks])
    p_in = np.concatenate([c.calibrated_p_in for c in checks])
    p_over = np.concatenate([c.calibrated_p_over for c in checks])
    return NullCalibration(
        split_test_fpr=float(np.mean(split_p < a_split)),
        calibrated_fpr=float(np.mean(p_in < a_cal)),
        over_unlearned_fpr=float(np.mean(p_over < a_cal)),
        n_pairs=int(split_p.size),
        alpha_split=a_split,
        alpha_calibrated=a_cal,
        split_p_values=split_p,
        calibrated_p_in=p_in,
        calibrated_p_over=p_over,
    )


def null_calibration(
    oot_acts: object,
    subset_size: int,
    sigma: float,
    n_pairs: int = 20,
    panel_size: int = 20,
    n_splits: int = 200,
    alpha_split: float = 0.01,
    alpha_calibrated: float = 0.05,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
) -> NullCalibration:
    """Measure both tests' false-positive rates on data known to be out-of-training.

    As an evaluation draws them (method §9): the panel's ``panel_size`` members are independent
    uniform subsets of the whole pool (e.g. D_te), the ``n_pairs`` pairs of disjoint subsets come
    from a random half of it — so each null subset is one more draw of the panel's scheme,
    exchangeable with its members; then :func:`null_check`.

    Args:
        oot_acts: ``(N, d)`` activations of the out-of-training pool. subset_size: n.
        sigma: numeric σ. n_pairs: number of pairs (default 20). panel_size: R ≥ 3.
        n_splits, estimator, seed, device: as in :func:`sde_core.stats.hsic.split_half_hsic_batch`.

    Raises:
        InputError: half the pool cannot hold a pair of disjoint subsets.
    """
    acts = as_float_matrix(oot_acts, "oot_acts")
    pool = acts.shape[0]
    n_pairs = check_int(n_pairs, "n_pairs", minimum=1)
    panel_size = check_int(panel_size, "panel_size", minimum=3)
    subset_size = check_int(subset_size, "subset_size", minimum=1)
    seed = check_seed(seed)
    half = pool // 2
    if 2 * subset_size > half:
        raise InputError(
            f"the null check needs two disjoint subsets of {subset_size} rows outside the panel, "
            f"i.e. 2 × {subset_size} rows in the half of the pool the panel does not use, but "
            f"the pool has {pool} rows: lower the subset size to at most {max(1, half // 2)}"
        )
    rng = np.random.default_rng(seed)
    pair_rows = rng.permutation(pool)[pool - half :]
    panel = independent_subsets(pool, subset_size, panel_size, rng)
    pairs = disjoint_pairs(pair_rows, subset_size, n_pairs, rng).reshape(2 * n_pairs, subset_size)
    panel_h = split_half_hsic_batch(acts, panel, n_splits, sigma, estimator, seed, device)
    pair_h = split_half_hsic_batch(acts, pairs, n_splits, sigma, estimator, seed + 1, device)
    return null_check(
        pair_h.reshape(n_pairs, 2, -1), subset_scores(panel_h), alpha_split, alpha_calibrated
    )
