"""Each draw's statistics from its H arrays, part by part as its stages finish (method §3–5, §9).

Pure functions of arrays and settings: :func:`core_statistics` (S_IT, S_OOT, targets: the
paper's reference check, JSD decisions, OTR, dependence score), :func:`panel_statistics` (the
calibrated panel check and the targets' four-way verdicts), :func:`control_statistics`
(controlled F1, paper's and calibrated), :func:`draw_null_check` (the null check of
:func:`sde_core.stats.null_check.null_check`) and :func:`null_train_calls` (its training
subsets beyond the controls, method §9); :class:`DrawState` holds what a draw has so far.
Combining the draws into a model's numbers is :mod:`~.statistics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.calibrated import (
    FORGOTTEN_VERDICTS,
    CalibratedVerdict,
    calibrated_verdict,
    subset_scores,
)
from sde_core.stats.headline import controlled_f1, dependence_score
from sde_core.stats.jsd import Decision, decide
from sde_core.stats.null_check import NullCalibration, null_check
from sde_core.stats.outliers import PanelOutlier, panel_outliers
from sde_core.stats.utest import ReferenceCheck, reference_check, reference_panel_check

__all__ = [
    "ControlStats",
    "CoreStats",
    "DrawState",
    "PanelStats",
    "control_statistics",
    "core_statistics",
    "draw_null_check",
    "null_train_calls",
    "panel_statistics",
]

_NAN = float("nan")


@dataclass(frozen=True)
class CoreStats:
    """The paper's evidence of one draw (needs S_IT, S_OOT and the draw's targets).

    Attributes:
        reference: the split-level U-test of H(S_IT) > H(S_OOT).
        decisions: the JSD decision of each target. otr: share decided out-of-training.
        dependence: the draw's dependence score (NaN when its reference medians coincide).
        dependence_num, dependence_den: its numerator ``median H(targets) − median H(S_OOT)``
            and denominator ``median H(S_IT) − median H(S_OOT)`` (method §5).
        target_scores: ``(t,)`` subset scores s(S) of the targets.
    """

    reference: ReferenceCheck
    decisions: tuple[Decision, ...]
    otr: float
    dependence: float
    dependence_num: float
    dependence_den: float
    target_scores: np.ndarray


@dataclass(frozen=True)
class PanelStats:
    """The calibrated evidence of one draw (needs its panels and targets).

    Attributes:
        panel: the subset-level U-test of the IT panel against the OOT panel.
        it_scores, oot_scores: ``(R,)`` panel scores.
        verdicts: each target's :class:`~sde_core.stats.calibrated.CalibratedVerdict`.
        calibrated_otr: share of targets out-of-training (over-unlearned ones are not counted).
        over_unlearned_rate: share of targets over-unlearned.
        outliers: panel members that make a verdict unreachable
            (:func:`~sde_core.stats.outliers.panel_outliers`).
    """

    panel: ReferenceCheck
    it_scores: np.ndarray
    oot_scores: np.ndarray
    verdicts: tuple[CalibratedVerdict, ...]
    calibrated_otr: float
    over_unlearned_rate: float
    outliers: tuple[PanelOutlier, ...] = ()


@dataclass(frozen=True)
class ControlStats:
    """Controlled F1 of one draw (positives then negatives).

    Attributes:
        truth: ``(2c,)`` True for the positives. decisions: JSD decision of each control.
        verdicts: calibrated verdict of each control (None before the panel is known).
        f1: F1 of the JSD decisions. calibrated_f1: F1 of "in-training" verdicts (NaN without
            verdicts). tp, fp, fn: counts of the JSD decisions.
        false_out: positives (training subsets) with ``p_out < alpha_calibrated`` — false
            "out-of-training" calls, the null check's second direction (0 without verdicts).
    """

    truth: np.ndarray
    decisions: tuple[Decision, ...]
    verdicts: tuple[CalibratedVerdict, ...] | None
    f1: float
    calibrated_f1: float
    tp: int
    fp: int
    fn: int
    false_out: int = 0

    @property
    def positives(self) -> int:
        """Number of controlled training subsets (the positives)."""
        return int(self.truth.sum())


@dataclass
class DrawState:
    """Everything computed so far for one draw (filled stage by stage).

    Attributes:
        index: the draw number. arrays: H arrays by name (``it_h`` (K,), ``oot_h`` (K,),
            ``targets_h`` (t, K), ``panel_it_h``/``panel_oot_h`` (R, K), ``pos_h``/``neg_h``
            (c, K), ``null_h`` (2p, K), ``null_train_h`` (x, K): the null check's training
            subsets beyond the controls). spreads: the spread control of the same subsets.
        core, panel, controls, null: statistics of the finished parts. null_train: ``(false
            "out-of-training" calls, subsets)`` of the null check's own training subsets (None
            without them).
        mmd, w2: per baseline control ``(d_it, d_oot)`` arrays (positives then negatives).
    """

    index: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    spreads: dict[str, np.ndarray] = field(default_factory=dict)
    core: CoreStats | None = None
    panel: PanelStats | None = None
    controls: ControlStats | None = None
    null: NullCalibration | None = None
    null_train: tuple[int, int] | None = None
    mmd: np.ndarray | None = None
    w2: np.ndarray | None = None


def core_statistics(
    it_h: np.ndarray, oot_h: np.ndarray, targets_h: np.ndarray, settings: EvalSettings
) -> CoreStats:
    """The paper's evidence of one draw: reference U-test, JSD decisions, OTR, dependence."""
    decisions = tuple(decide(h, it_h, oot_h, bins=settings.bins) for h in targets_h)
    out = np.array([not d.in_training for d in decisions])
    med_oot = float(np.median(oot_h))
    return CoreStats(
        reference=reference_check(it_h, oot_h, alpha=settings.alpha),
        decisions=decisions,
        otr=float(out.mean()),
        dependence=dependence_score(targets_h, it_h, oot_h),
        dependence_num=float(np.median(targets_h)) - med_oot,
        dependence_den=float(np.median(it_h)) - med_oot,
        target_scores=subset_scores(targets_h),
    )


def panel_statistics(
    core: CoreStats, panel_it_h: np.ndarray, panel_oot_h: np.ndarray, settings: EvalSettings
) -> PanelStats:
    """The calibrated evidence of one draw: panel U-test and the targets' verdicts."""
    it_scores, oot_scores = subset_scores(panel_it_h), subset_scores(panel_oot_h)
    verdicts = tuple(
        calibrated_verdict(float(s), it_scores, oot_scores, settings.alpha_calibrated)
        for s in core.target_scores
    )
    labels = np.array([v.verdict for v in verdicts], dtype=object)
    return PanelStats(
        panel=reference_panel_check(it_scores, oot_scores, alpha=settings.alpha),
        it_scores=it_scores,
        oot_scores=oot_scores,
        verdicts=verdicts,
        calibrated_otr=float(np.isin(labels, FORGOTTEN_VERDICTS).mean()),
        over_unlearned_rate=float(np.mean(labels == "over-unlearned")),
        outliers=panel_outliers(it_scores, oot_scores),
    )


def control_statistics(
    it_h: np.ndarray,
    oot_h: np.ndarray,
    pos_h: np.ndarray,
    neg_h: np.ndarray,
    panel: PanelStats | None,
    settings: EvalSettings,
) -> ControlStats:
    """Controlled F1 of one draw from its controls' H (and verdicts once the panel is known)."""
    h = np.vstack([pos_h, neg_h])
    truth = np.r_[np.ones(len(pos_h), bool), np.zeros(len(neg_h), bool)]
    decisions = tuple(decide(x, it_h, oot_h, bins=settings.bins) for x in h)
    f1 = controlled_f1(truth, [d.in_training for d in decisions])
    verdicts = None
    cal_f1 = _NAN
    false_out = 0
    if panel is not None:
        verdicts = tuple(
            calibrated_verdict(
                float(s), panel.it_scores, panel.oot_scores, settings.alpha_calibrated
            )
            for s in subset_scores(h)
        )
        cal_f1 = controlled_f1(truth, [v.verdict == "in-training" for v in verdicts]).f1
        false_out = sum(
            v.p_out < settings.alpha_calibrated for v, t in zip(verdicts, truth, strict=True) if t
        )
    return ControlStats(
        truth=truth,
        decisions=decisions,
        verdicts=verdicts,
        f1=f1.f1,
        calibrated_f1=cal_f1,
        tp=f1.tp,
        fp=f1.fp,
        fn=f1.fn,
        false_out=int(false_out),
    )


def draw_null_check(state: DrawState, settings: EvalSettings) -> NullCalibration | None:
    """The null check of one draw (None without pairs or before its OOT panel is known)."""
    null_h = state.arrays.get("null_h")
    if null_h is None or state.panel is None or len(null_h) == 0:
        return None
    pairs = null_h.reshape(-1, 2, null_h.shape[1])
    return null_check(pairs, state.panel.oot_scores, settings.alpha, settings.alpha_calibrated)


def null_train_calls(state: DrawState, settings: EvalSettings) -> tuple[int, int] | None:
    """``(calls, subsets)``: how many of the draw's own null-check training subsets (beyond the
    controls) get ``p_out < alpha_calibrated`` against its IT panel — false "out-of-training"
    calls — and how many there are (None without them or before the panel is known)."""
    h = state.arrays.get("null_train_h")
    if h is None or state.panel is None or len(h) == 0:
        return None
    panel, a = state.panel, settings.alpha_calibrated
    calls = sum(
        calibrated_verdict(float(s), panel.it_scores, panel.oot_scores, a).p_out < a
        for s in subset_scores(h)
    )
    return int(calls), len(h)
