"""Distribution-distance baselines of method §6 (the paper's Table 3).

A target subset is called in-training iff its activation cloud is closer to the in-training
reference than to the out-of-training one, with the distance either the squared maximum mean
discrepancy (Gaussian RBF, same σ as SDE) or the exact Wasserstein-2 distance between the
equal-size empirical point clouds (an optimal assignment). Unlike SDE these compare *marginal*
distributions and never look at dependence between the samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment

from sde_core.common.validation import as_float_matrix, check_sigma, squared_distances
from sde_core.errors import InputError
from sde_core.stats.hsic import gaussian_gram

__all__ = [
    "BaselineDecision",
    "Distance",
    "mmd2",
    "nearest_reference",
    "nearest_reference_batch",
    "wasserstein2",
]

Distance = Literal["mmd", "wasserstein"]


def _pair(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    xa, ya = as_float_matrix(x, "x"), as_float_matrix(y, "y")
    if xa.shape[0] == 0 or ya.shape[0] == 0:
        raise InputError("x and y need at least one row (sample) each")
    if xa.shape[1] != ya.shape[1]:
        raise InputError(
            f"x and y must have the same dimension; got {xa.shape[1]} and {ya.shape[1]}"
        )
    return xa, ya


def _check_distance(distance: object) -> None:
    if not isinstance(distance, str) or distance not in ("mmd", "wasserstein"):
        raise InputError(f"unknown distance {distance!r}: use 'mmd' or 'wasserstein'")


def _check_targets(targets: object) -> list[object]:
    if isinstance(targets, (str, bytes)) or not isinstance(targets, (list, tuple)):
        raise InputError(
            f"targets must be a list of (n, d) activation arrays; got {type(targets).__name__}"
        )
    return list(targets)


def mmd2(x: object, y: object, sigma: float, unbiased: bool = False) -> float:
    """Squared MMD between two samples with a Gaussian RBF kernel of bandwidth σ.

    Args:
        x: ``(n, d)``; y: ``(p, d)``. sigma: σ > 0 (activation units).
        unbiased: the U-statistic (drops self-similarities; can be negative) instead of the
            default biased V-statistic ``mean K_xx + mean K_yy − 2 mean K_xy``.

    Returns:
        MMD² (kernel units).

    Examples:
        >>> mmd2([[0.0], [1.0]], [[0.0], [1.0]], sigma=1.0)
        0.0
        >>> round(mmd2([[0.0], [1.0]], [[5.0], [6.0]], sigma=1.0), 4)
        1.6064
    """
    xa, ya = _pair(x, y)
    s = check_sigma(sigma)
    kxx, kyy, kxy = gaussian_gram(xa, s), gaussian_gram(ya, s), gaussian_gram(xa, s, ya)
    n, p = xa.shape[0], ya.shape[0]
    if unbiased:
        if n < 2 or p < 2:
            raise InputError("the unbiased MMD² needs at least 2 rows per sample")
        return float(
            (kxx.sum() - n) / (n * (n - 1)) + (kyy.sum() - p) / (p * (p - 1)) - 2 * kxy.mean()
        )
    return float(kxx.mean() + kyy.mean() - 2 * kxy.mean())


def wasserstein2(x: object, y: object) -> float:
    """Exact Wasserstein-2 distance between two equal-size empirical point clouds.

    Solves the optimal assignment on squared Euclidean costs
    (:func:`scipy.optimize.linear_sum_assignment`, O(n³)); ``W2 = sqrt(mean matched cost)``.

    Args:
        x, y: ``(n, d)`` arrays with the same n.

    Returns:
        W2 in activation units.

    Examples:
        >>> round(wasserstein2([[0.0], [1.0]], [[1.0], [3.0]]), 6)  # matched costs 1 and 4
        1.581139
    """
    xa, ya = _pair(x, y)
    if xa.shape[0] != ya.shape[0]:
        raise InputError(
            f"exact W2 here compares equal-size clouds; got {xa.shape[0]} and {ya.shape[0]} "
            "rows: draw reference subsets of the target's size"
        )
    cost = squared_distances(xa, ya)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))


@dataclass(frozen=True)
class BaselineDecision:
    """Nearest-reference decision of a distribution baseline.

    Attributes:
        in_training: ``d_it <= d_oot`` (ties count as in-training, as for SDE).
        d_it, d_oot: distances of the target to S_IT and S_OOT. distance: which distance.
    """

    in_training: bool
    d_it: float
    d_oot: float
    distance: Distance


def nearest_reference(
    target: object,
    it: object,
    oot: object,
    distance: Distance = "mmd",
    sigma: float | None = None,
) -> BaselineDecision:
    """Classify a target's activations by the nearer reference cloud (method §6).

    Args:
        target, it, oot: ``(n, d)`` activations of the target and both references.
        distance: ``"mmd"`` (biased MMD², needs ``sigma``) or ``"wasserstein"`` (exact W2).
        sigma: RBF bandwidth for MMD (use SDE's σ).
    """
    _check_distance(distance)
    if distance == "mmd":
        if sigma is None:
            raise InputError("the MMD baseline needs sigma (use the σ of the SDE evaluation)")
        d_it, d_oot = mmd2(target, it, sigma), mmd2(target, oot, sigma)
    elif distance == "wasserstein":
        d_it, d_oot = wasserstein2(target, it), wasserstein2(target, oot)
    else:
        raise InputError(f"unknown distance {distance!r}: use 'mmd' or 'wasserstein'")
    return BaselineDecision(
        in_training=bool(d_it <= d_oot), d_it=d_it, d_oot=d_oot, distance=distance
    )


def nearest_reference_batch(
    targets: list[object],
    it: object,
    oot: object,
    distance: Distance = "mmd",
    sigma: float | None = None,
) -> list[BaselineDecision]:
    """:func:`nearest_reference` for many targets against the same two references.

    For MMD the references' self-similarity terms are computed once, so each target costs three
    Gram blocks instead of six; results equal :func:`nearest_reference` exactly.

    Args:
        targets: a list of ``(n, d)`` activation clouds. it, oot: the references' ``(n, d)``.
        distance, sigma: as in :func:`nearest_reference`.
    """
    _check_distance(distance)
    targets = _check_targets(targets)
    if distance != "mmd":
        return [nearest_reference(t, it, oot, distance, sigma) for t in targets]
    if sigma is None:
        raise InputError("the MMD baseline needs sigma (use the σ of the SDE evaluation)")
    s = check_sigma(sigma)
    ita, oota = as_float_matrix(it, "it"), as_float_matrix(oot, "oot")
    k_it, k_oot = gaussian_gram(ita, s).mean(), gaussian_gram(oota, s).mean()
    out = []
    for target in targets:
        ta, _ = _pair(target, ita)
        k_tt = gaussian_gram(ta, s).mean()
        d_it = float(k_tt + k_it - 2 * gaussian_gram(ta, s, ita).mean())
        d_oot = float(k_tt + k_oot - 2 * gaussian_gram(ta, s, oota).mean())
        out.append(BaselineDecision(bool(d_it <= d_oot), d_it, d_oot, "mmd"))
    return out
