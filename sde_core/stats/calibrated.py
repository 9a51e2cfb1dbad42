"""Calibrated subset-level evidence (method §9, §12): a panel of R reference subsets per side,
one score ``s(S) = mean H(S)`` per subset, and rank p-values ``p_in`` / ``p_out`` / ``p_over``
that give each target one of four verdicts.

The panel's validity is :func:`sde_core.stats.utest.reference_panel_check`, its outliers
:func:`sde_core.stats.outliers.panel_outliers`, the check that can fail
:func:`sde_core.stats.null_check.null_check`, the model-level test
:func:`sde_core.stats.over_unlearning.over_unlearning_test` and the spread control
:func:`sde_core.stats.hsic.kernel_spread`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from sde_core.common.validation import as_float_array
from sde_core.errors import InputError
from sde_core.stats.checks import as_sample, check_level

__all__ = [
    "FORGOTTEN_VERDICTS",
    "VERDICTS",
    "CalibratedVerdict",
    "Verdict",
    "calibrated_verdict",
    "subset_scores",
]

Verdict = Literal["in-training", "out-of-training", "over-unlearned", "inconclusive"]


#: The four calibrated verdicts (method §12), in display order.
VERDICTS: tuple[str, ...] = ("in-training", "out-of-training", "over-unlearned", "inconclusive")


#: Verdicts that count towards the calibrated OTR (method §9): only "out-of-training". An
#: over-unlearned target (flatter, lower-spread outputs than unseen data) is *not* evidence of
#: forgetting — a model can fit D_f better than unseen data and still be over-unlearned — so it
#: is reported as its own rate, never counted as forgotten.
FORGOTTEN_VERDICTS: tuple[str, ...] = ("out-of-training",)


def subset_scores(h: object) -> np.ndarray:
    """Subset scores ``s(S) = mean of H(S)`` over the splits.

    Args:
        h: ``(T, K)`` split-half HSIC values (one row per subset) or a ``(K,)`` vector.

    Returns:
        ``(T,)`` float64 array (``(1,)`` for a single vector).

    Examples:
        >>> print(subset_scores([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]]).round(4))
        [2.     0.3333]
    """
    arr = as_float_array(h, "h")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0 or arr.shape[0] == 0:
        raise InputError(f"h must be (T, K) split values; got shape {arr.shape}")
    return arr.mean(axis=1)


def _rank_p_values(score: float, it: np.ndarray, oot: np.ndarray) -> tuple[float, float, float]:
    """``(p_in, p_out, p_over)`` of one score against the two panels (method §9, §12)."""
    p_in = (1 + int(np.sum(oot >= score))) / (oot.size + 1)
    p_out = (1 + int(np.sum(it <= score))) / (it.size + 1)
    p_over = (1 + int(np.sum(oot <= score))) / (oot.size + 1)
    return p_in, p_out, p_over


@dataclass(frozen=True)
class CalibratedVerdict:
    """Calibrated verdict for one target (method §9, §12).

    Attributes:
        p_in: ``(1 + #{OOT_r ≥ s_t}) / (R_oot + 1)`` — small: more dependent than unseen data.
        p_out: ``(1 + #{IT_r ≤ s_t}) / (R_it + 1)`` — small: less dependent than training data.
        p_over: ``(1 + #{OOT_r ≤ s_t}) / (R_oot + 1)`` — small: *less* dependent than unseen
            data: the model's outputs on the target are flatter, lower-spread, than on data it
            never saw — not evidence that it forgot (method §9).
        verdict: ``"in-training"`` if p_in < α; else ``"over-unlearned"`` if p_over < α; else
            ``"out-of-training"`` if p_out < α; else ``"inconclusive"``. (p_in and p_over are
            never both below α < 0.5: their sum is at least (R_oot + 2)/(R_oot + 1). When p_in
            and p_out are both small the verdict is in-training: the evaluation never certifies
            forgetting on ambiguous evidence.)
        score: the target's subset score s_t.
    """

    p_in: float
    p_out: float
    verdict: Verdict
    score: float
    p_over: float = float("nan")


def calibrated_verdict(
    target_score: float, it_scores: object, oot_scores: object, alpha: float = 0.05
) -> CalibratedVerdict:
    """Rank-based, finite-sample valid verdict of a target against the reference panels.

    Under exchangeability of the target with the OOT panel (the target was never trained on),
    ``P(p_in ≤ α) ≤ α`` and ``P(p_over ≤ α) ≤ α``; likewise for p_out with the IT panel.

    Args:
        target_score: s_t = mean split-half HSIC of the target.
        it_scores: ``(R_it,)`` scores of in-training reference subsets.
        oot_scores: ``(R_oot,)`` scores of out-of-training reference subsets.
        alpha: level of the one-sided tests (default 0.05).
    """
    s = as_sample([target_score], "target_score")[0]
    it = as_sample(it_scores, "it_scores")
    oot = as_sample(oot_scores, "oot_scores")
    a = check_level(alpha)
    p_in, p_out, p_over = _rank_p_values(float(s), it, oot)
    verdict: Verdict
    if p_in < a:
        verdict = "in-training"
    elif p_over < a:
        verdict = "over-unlearned"
    elif p_out < a:
        verdict = "out-of-training"
    else:
        verdict = "inconclusive"
    return CalibratedVerdict(p_in=p_in, p_out=p_out, verdict=verdict, score=float(s), p_over=p_over)
