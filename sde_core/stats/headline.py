"""Headline metrics of the paper's procedure on one draw (method §5): the controlled F1 of
in-training decisions and the graded dependence score.

The OTR of one draw is the share of its targets decided out-of-training; its interval over an
evaluation's independent draws (Korn–Graubard: the draws are clusters) is
:func:`sde_core.stats.replication.replicate_proportion`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sde_core.common.validation import as_float_array
from sde_core.errors import InputError
from sde_core.stats.checks import as_sample

__all__ = [
    "F1Result",
    "controlled_f1",
    "dependence_score",
]


def _bool_flags(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D sequence; got shape {arr.shape}")
    if arr.dtype != bool and not np.isin(arr, (0, 1)).all():
        raise InputError(f"{name} must hold booleans (or 0/1)")
    return arr.astype(bool)


@dataclass(frozen=True)
class F1Result:
    """Controlled F1 with in-training as the positive class (method §5)."""

    f1: float
    precision: float
    recall: float
    tp: int
    fp: int
    fn: int
    tn: int


def controlled_f1(
    y_true: Sequence[bool] | np.ndarray, y_pred: Sequence[bool] | np.ndarray
) -> F1Result:
    """F1 of in-training decisions on controlled targets (label 1 = truly in-training).

    Undefined ratios (no positive predictions or labels) are reported as 0.
    """
    t = _bool_flags(y_true, "y_true")
    p = _bool_flags(y_pred, "y_pred")
    if t.size != p.size:
        raise InputError(f"y_true and y_pred differ in length ({t.size} vs {p.size})")
    tp = int(np.sum(t & p))
    fp = int(np.sum(~t & p))
    fn = int(np.sum(t & ~p))
    tn = int(np.sum(~t & ~p))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return F1Result(f1=f1, precision=precision, recall=recall, tp=tp, fp=fp, fn=fn, tn=tn)


def dependence_score(target_h: object, it_h: object, oot_h: object) -> float:
    """Graded dependence (method §5): 0 ≈ out-of-training level, 1 ≈ in-training level.

    ``(median(target H) − median H(S_OOT)) / (median H(S_IT) − median H(S_OOT))`` where the
    target median pools every split of every target (``target_h`` may be ``(T, K)``).
    Returns NaN when the reference medians coincide (the scale is undefined).

    Examples:
        >>> round(dependence_score([0.5, 0.6], [1.0, 1.0], [0.0, 0.2]), 6)  # halfway between
        0.5
    """
    t = as_sample(as_float_array(target_h, "target_h").ravel(), "target_h")
    med_it = float(np.median(as_sample(it_h, "it_h")))
    med_oot = float(np.median(as_sample(oot_h, "oot_h")))
    span = med_it - med_oot
    if span == 0.0:
        return float("nan")
    return (float(np.median(t)) - med_oot) / span
