"""The area under the ROC curve of a membership score, with DeLong's interval (method §9).

A membership attack scores each text (higher: more likely a training member); its AUC over
members ``x`` (D_f) and non-members ``y`` (D_te) is the Mann–Whitney probability
``P(X > Y) + ½·P(X = Y)``: 0.5 when the score cannot tell D_f from unseen data. Its variance is
DeLong, DeLong & Clarke-Pearson's (1988) structural-components estimate, computed from
midranks (Sun & Xu 2014); two attacks on the *same* texts (two models scoring D_f and D_te) are
compared by the paired DeLong test, whose covariance accounts for the texts they share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["AUCEstimate", "auc_difference", "delong_auc"]

_Z = float(stats.norm.ppf(0.975))


@dataclass(frozen=True)
class AUCEstimate:
    """An AUC (or a difference of two) with its 95% normal interval (DeLong's variance).

    Attributes:
        value: the AUC (or AUC₁ − AUC₂). lo, hi: its 95% interval (an AUC's clipped to [0, 1],
            a difference's to [−1, 1]). se: the DeLong standard error.
    """

    value: float
    lo: float
    hi: float
    se: float


def _midranks(x: np.ndarray) -> np.ndarray:
    return np.asarray(stats.rankdata(x, method="average"), dtype=np.float64)


def _components(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(AUC, V10, V01)``: the AUC and DeLong's structural components of members ``x`` and
    non-members ``y`` (``V10[i]``: the share of non-members member ``i`` outscores, ties ½)."""
    m, n = x.size, y.size
    tz = _midranks(np.concatenate([x, y]))
    tx, ty = _midranks(x), _midranks(y)
    v10 = (tz[:m] - tx) / n
    v01 = 1.0 - (tz[m:] - ty) / m
    return float(v10.mean()), v10, v01


def _check(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(x, dtype=np.float64).ravel()
    ys = np.asarray(y, dtype=np.float64).ravel()
    if xs.size < 2 or ys.size < 2:
        raise ValueError("an AUC interval needs at least 2 members and 2 non-members")
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        raise ValueError("membership scores must be finite numbers")
    return xs, ys


def delong_auc(members: object, non_members: object) -> AUCEstimate:
    """The AUC of a membership score with DeLong's 95% interval.

    Args:
        members: scores of the members (D_f), higher = more likely a member.
        non_members: scores of the non-members (D_te).

    Examples:
        >>> e = delong_auc([3.0, 2.0, 4.0, 1.5], [1.0, 2.0, 0.5, 0.0])
        >>> round(e.value, 4)
        0.9062

    Raises:
        ValueError: fewer than 2 scores on a side, or a non-finite score.
    """
    x, y = _check(members, non_members)
    auc, v10, v01 = _components(x, y)
    se = float(np.sqrt(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size))
    return AUCEstimate(auc, max(0.0, auc - _Z * se), min(1.0, auc + _Z * se), se)


def auc_difference(
    members_a: object, non_members_a: object, members_b: object, non_members_b: object
) -> AUCEstimate:
    """AUC(a) − AUC(b) of two scores of the *same* members and non-members (row for row: two
    models scoring the same texts), with the paired DeLong 95% interval.

    Raises:
        ValueError: the two scores do not cover the same rows, or see :func:`delong_auc`.
    """
    xa, ya = _check(members_a, non_members_a)
    xb, yb = _check(members_b, non_members_b)
    if xa.size != xb.size or ya.size != yb.size:
        raise ValueError("a paired AUC difference needs both scores on the same rows")
    auc_a, v10a, v01a = _components(xa, ya)
    auc_b, v10b, v01b = _components(xb, yb)
    s10 = np.cov(np.vstack([v10a, v10b]))
    s01 = np.cov(np.vstack([v01a, v01b]))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / xa.size
    var += (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / ya.size
    se = float(np.sqrt(max(var, 0.0)))
    d = auc_a - auc_b
    return AUCEstimate(d, max(-1.0, d - _Z * se), min(1.0, d + _Z * se), se)
