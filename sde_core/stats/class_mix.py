"""Does the forget set hold the same classes, in the same shares, as a reference pool? (method §16)

SDE compares subsets of D_f with subsets of D_r (S_IT) and of D_te (S_OOT). A split-half HSIC
value depends on what a subset holds — which classes, in which shares — as much as on whether
the model trained on it; when D_f is one class and the pools mix ten, the comparison measures
the class, not memory (class-wise forgetting: ``--forget-class``). :func:`class_mix_test` tests
the homogeneity of D_f's class counts with a pool's (Pearson's chi-square test on the 2 × C
table) and reports the total-variation distance between the two class distributions;
:func:`class_mix_differs` is the rule the evaluation applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

__all__ = [
    "MIX_ALPHA",
    "MIX_DISTANCE",
    "ClassMix",
    "class_mix_differs",
    "class_mix_reason",
    "class_mix_test",
]

#: Level of the chi-square test: small, so that a random forget set (for which the test's
#: p-value is uniform) is flagged about once in a million workspaces.
MIX_ALPHA = 1e-6
#: Smallest total-variation distance between the class distributions that counts as another
#: mix (a random 10% forget set of 6,000 rows is about 0.03 away from its pool).
MIX_DISTANCE = 0.1


@dataclass(frozen=True)
class ClassMix:
    """Chi-square test of homogeneity of D_f's class counts with a pool's.

    Attributes:
        pool: the pool's name (``"D_r"``, ``"D_te"``).
        statistic: Pearson's X² on the 2 × C table (classes empty in both left out).
        dof: its degrees of freedom (classes present − 1).
        p_value: upper tail of χ²(dof) at ``statistic`` (1.0 with one class).
        distance: total-variation distance between the two class distributions, in [0, 1].
        forget_share: share of D_f in each class (length C).
        pool_share: share of the pool in each class (length C).
    """

    pool: str
    statistic: float
    dof: int
    p_value: float
    distance: float
    forget_share: tuple[float, ...]
    pool_share: tuple[float, ...]

    def sentence(self, class_names: Sequence[str] | None = None) -> str:
        """The numbers in words: the test and the classes that differ most."""
        names = list(class_names or [str(i) for i in range(len(self.forget_share))])
        order = np.argsort(-np.abs(np.subtract(self.forget_share, self.pool_share)))[:3]
        shown = ", ".join(
            f"{names[i]} {100 * self.forget_share[i]:.0f}% vs {100 * self.pool_share[i]:.0f}%"
            for i in order
        )
        return (
            f"D_f vs {self.pool}: χ² = {self.statistic:.1f}, df = {self.dof}, "
            f"p = {self.p_value:.2g}, distance {self.distance:.2f} ({shown})"
        )


def class_mix_test(
    forget_labels: np.ndarray, pool_labels: np.ndarray, num_classes: int, pool: str
) -> ClassMix:
    """Test whether D_f's labels and a pool's come from one class distribution.

    Args:
        forget_labels, pool_labels: integer labels in ``[0, num_classes)``.
        num_classes: C.
        pool: the pool's name for messages.

    Raises:
        ValueError: a label outside ``[0, num_classes)`` or an empty label set.
    """
    f = np.asarray(forget_labels, dtype=np.int64).reshape(-1)
    g = np.asarray(pool_labels, dtype=np.int64).reshape(-1)
    if f.size == 0 or g.size == 0:
        raise ValueError("class_mix_test needs labels in both sets")
    if min(f.min(), g.min()) < 0 or max(f.max(), g.max()) >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes})")
    table = np.stack([np.bincount(f, minlength=num_classes), np.bincount(g, minlength=num_classes)])
    table = table.astype(np.float64)
    shares = table / table.sum(axis=1, keepdims=True)
    distance = float(0.5 * np.abs(shares[0] - shares[1]).sum())
    present = table.sum(axis=0) > 0
    observed = table[:, present]
    dof = int(observed.shape[1] - 1)
    if dof == 0:
        stat, p = 0.0, 1.0
    else:
        expected = observed.sum(axis=1, keepdims=True) * observed.sum(axis=0) / observed.sum()
        stat = float(((observed - expected) ** 2 / expected).sum())
        p = float(chi2.sf(stat, dof))
    return ClassMix(
        pool, stat, dof, p, distance, tuple(map(float, shares[0])), tuple(map(float, shares[1]))
    )


def class_mix_differs(mix: ClassMix) -> bool:
    """Whether D_f's class mix differs from the pool's: significant at :data:`MIX_ALPHA` and
    at least :data:`MIX_DISTANCE` apart (both, so that a large random forget set whose shares
    differ by a point is not flagged)."""
    return mix.p_value < MIX_ALPHA and mix.distance >= MIX_DISTANCE


def class_mix_reason(
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    forget: np.ndarray,
    num_classes: int,
    class_names: Sequence[str] | None = None,
) -> str:
    """Why the paper's and the calibrated verdicts are withheld when D_f's class mix differs
    from D_r's or D_te's ("" when it does not, or without class labels), with the tests'
    numbers (method §16).

    Args:
        train_labels: labels of D_tr ``(N,)``. test_labels: labels of D_te.
        forget: indices of D_f in D_tr.
    """
    train = np.asarray(train_labels).reshape(-1)
    test = np.asarray(test_labels).reshape(-1)
    idx = np.asarray(forget, dtype=np.int64).reshape(-1)
    if num_classes < 2 or idx.size == 0 or train.size == 0 or test.size == 0:
        return ""
    if not (np.issubdtype(train.dtype, np.integer) and np.issubdtype(test.dtype, np.integer)):
        return ""
    retain = np.setdiff1d(np.arange(train.size), idx)
    if retain.size == 0:
        return ""
    mixes = [
        class_mix_test(train[idx], train[retain], num_classes, "D_r"),
        class_mix_test(train[idx], test, num_classes, "D_te"),
    ]
    differing = [m for m in mixes if class_mix_differs(m)]
    if not differing:
        return ""
    said = "; ".join(m.sentence(class_names) for m in mixes)
    return (
        f"D_f's classes are not those of the reference pools ({said}): S_IT and S_OOT differ "
        "from the targets by class, not only by training, so the paper's OTR and the calibrated "
        "verdicts measure the class and are withheld (their numbers are measured, not a "
        "verdict); the class-matched test of method §16 judges class-wise forgetting instead"
    )
