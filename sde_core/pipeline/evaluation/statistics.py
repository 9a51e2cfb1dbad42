"""Per-model statistics from H arrays: per draw, then combined over draws (method §3–5, §9, §12).

Pure functions of arrays and settings. Each draw's statistics are computed in parts, as its
stages finish: :func:`core_statistics` (S_IT, S_OOT, targets: the paper's reference check, JSD
decisions, dependence score), :func:`panel_statistics` (the calibrated panel check and the
targets' four-way verdicts), :func:`control_statistics` (controlled F1, paper's and calibrated)
and :func:`sde_core.stats.decision.null_check`. :func:`summarize` combines the draws into the
headline numbers with their intervals (:mod:`sde_core.stats.replication`) and applies the gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sde_core.pipeline.evaluation.summary import DrawSummary, ModelSummary
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.decision import (
    FORGOTTEN_VERDICTS,
    CalibratedVerdict,
    Decision,
    NullCalibration,
    ReferenceCheck,
    calibrated_verdict,
    controlled_f1,
    decide,
    dependence_score,
    null_check,
    over_unlearning_test,
    pool_null_checks,
    reference_check,
    reference_panel_check,
    subset_scores,
)
from sde_core.stats.replication import (
    ReplicateEstimate,
    replicate_proportion,
    replicate_range,
    replicate_ratio,
)

__all__ = [
    "ControlStats",
    "CoreStats",
    "DrawState",
    "PanelStats",
    "control_statistics",
    "core_statistics",
    "panel_statistics",
    "summarize",
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
        verdicts: each target's :class:`~sde_core.stats.decision.CalibratedVerdict`.
        calibrated_otr: share of targets out-of-training or over-unlearned.
        over_unlearned_rate: share of targets over-unlearned.
    """

    panel: ReferenceCheck
    it_scores: np.ndarray
    oot_scores: np.ndarray
    verdicts: tuple[CalibratedVerdict, ...]
    calibrated_otr: float
    over_unlearned_rate: float


@dataclass(frozen=True)
class ControlStats:
    """Controlled F1 of one draw (positives then negatives).

    Attributes:
        truth: ``(2c,)`` True for the positives. decisions: JSD decision of each control.
        verdicts: calibrated verdict of each control (None before the panel is known).
        f1: F1 of the JSD decisions. calibrated_f1: F1 of "in-training" verdicts (NaN without
            verdicts). tp, fp, fn: counts of the JSD decisions.
    """

    truth: np.ndarray
    decisions: tuple[Decision, ...]
    verdicts: tuple[CalibratedVerdict, ...] | None
    f1: float
    calibrated_f1: float
    tp: int
    fp: int
    fn: int


@dataclass
class DrawState:
    """Everything computed so far for one draw (filled stage by stage).

    Attributes:
        index: the draw number. arrays: H arrays by name (``it_h`` (K,), ``oot_h`` (K,),
            ``targets_h`` (t, K), ``panel_it_h``/``panel_oot_h`` (R, K), ``pos_h``/``neg_h``
            (c, K), ``null_h`` (2p, K)). spreads: the spread control of the same subsets.
        core, panel, controls, null: statistics of the finished parts.
        mmd, w2: per baseline control ``(d_it, d_oot)`` arrays (positives then negatives).
    """

    index: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    spreads: dict[str, np.ndarray] = field(default_factory=dict)
    core: CoreStats | None = None
    panel: PanelStats | None = None
    controls: ControlStats | None = None
    null: NullCalibration | None = None
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
    if panel is not None:
        verdicts = tuple(
            calibrated_verdict(
                float(s), panel.it_scores, panel.oot_scores, settings.alpha_calibrated
            )
            for s in subset_scores(h)
        )
        cal_f1 = controlled_f1(truth, [v.verdict == "in-training" for v in verdicts]).f1
    return ControlStats(
        truth=truth,
        decisions=decisions,
        verdicts=verdicts,
        f1=f1.f1,
        calibrated_f1=cal_f1,
        tp=f1.tp,
        fp=f1.fp,
        fn=f1.fn,
    )


def draw_null_check(state: DrawState, settings: EvalSettings) -> NullCalibration | None:
    """The null check of one draw (None without pairs or before its OOT panel is known)."""
    null_h = state.arrays.get("null_h")
    if null_h is None or state.panel is None or len(null_h) == 0:
        return None
    pairs = null_h.reshape(-1, 2, null_h.shape[1])
    return null_check(pairs, state.panel.oot_scores, settings.alpha, settings.alpha_calibrated)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return _NAN
    return float(np.corrcoef(x, y)[0, 1])


def _spread_correlations(draws: Sequence[DrawState]) -> tuple[float, float, float, float]:
    """Score–spread correlation pooled over every panel and target subset, and the median,
    min and max of the within-group correlations (IT panel, OOT panel, targets of each draw)."""
    pooled_s, pooled_p, within = [], [], []
    for st in draws:
        for h_key, s_key in (
            ("panel_it_h", "panel_it"),
            ("panel_oot_h", "panel_oot"),
            ("targets_h", "targets"),
        ):
            if h_key in st.arrays and s_key in st.spreads:
                scores = subset_scores(st.arrays[h_key])
                spreads = st.spreads[s_key]
                pooled_s.append(scores)
                pooled_p.append(spreads)
                within.append(_corr(scores, spreads))
    if not pooled_s:
        return _NAN, _NAN, _NAN, _NAN
    pooled = _corr(np.concatenate(pooled_s), np.concatenate(pooled_p))
    w = np.array([c for c in within if np.isfinite(c)])
    if w.size == 0:
        return pooled, _NAN, _NAN, _NAN
    return pooled, float(np.median(w)), float(w.min()), float(w.max())


def _gate_reasons(
    settings: EvalSettings, ref: ReplicateEstimate | None, panel: ReplicateEstimate | None
) -> tuple[str, str]:
    """``(calibrated reason, split-level reason)``: why metrics are withheld ("" = they are not).

    The calibrated metrics need the panels to separate (median panel p < α); the paper's
    metrics need that and, as the paper's §3 rule says, its own split-level test (median p < α).
    """
    if panel is None:
        cal = "the reference panels are not computed yet"
    elif panel.value < settings.alpha:
        cal = ""
    else:
        cal = (
            "the calibrated reference panels do not separate training from unseen data (median "
            f"panel p = {panel.value:.2g} ≥ α = {settings.alpha} over {len(panel.per_draw)} "
            "draws)"
        )
    split = ""
    if ref is not None and not ref.value < settings.alpha:
        split = (
            f"the paper's split-level reference test is not significant (median p = "
            f"{ref.value:.2g} ≥ α = {settings.alpha} over {len(ref.per_draw)} draws)"
        )
    return cal, split


def _gated(value: float, reason: str) -> float:
    return _NAN if reason else value


def _value(e: ReplicateEstimate | None, attr: str = "value") -> float:
    return _NAN if e is None else float(getattr(e, attr))


def summarize(
    identity: dict[str, Any],
    draws: Sequence[DrawState],
    settings: EvalSettings,
    extras: dict[str, Any],
    notes: Sequence[str] = (),
) -> tuple[ModelSummary, list[DrawSummary]]:
    """Combine the finished draws into the model's headline numbers (method §12).

    Point values: pooled proportions (OTR, calibrated OTR, over-unlearned rate; F1 is the
    control-weighted mean of the draws' F1), the dependence score as the ratio of the draws'
    mean numerator and denominator, the median p-values. Intervals:
    :func:`~sde_core.stats.replication.replicate_proportion` (Korn–Graubard over draws) for
    rates and F1, Fieller's interval (:func:`~sde_core.stats.replication.replicate_ratio`) for
    the dependence score, the range of the draws for p-values. Gate: when the median panel p is
    not below α the calibrated metrics are NaN and ``inconclusive_reason`` says why; the
    paper's metrics (OTR, F1, dependence score) also need the median split-level p below α
    (method §3).

    Args:
        identity: ``name, role, method, layer, dim, sigma, f1_negatives``.
        draws: the draws (those without core statistics yet are skipped).
        settings: evaluation settings.
        extras: the :attr:`ModelSummary.EXTRA_FIELDS` known so far (missing ones are NaN).
        notes: plan notes (reductions) to carry in the summary.
    """
    cores = [(d, d.core) for d in draws if d.core is not None]
    panels = [(c, d.panel) for d, c in cores if d.panel is not None]
    controls = [d.controls for d, _ in cores if d.controls is not None]
    ref = replicate_range([c.reference.p_value for _, c in cores]) if cores else None
    panel = replicate_range([p.panel.p_value for _, p in panels]) if panels else None
    cal_reason, split_reason = _gate_reasons(settings, ref, panel)
    paper_reason = cal_reason or split_reason
    n_targets = [len(c.decisions) for _, c in cores]
    otr = replicate_proportion([c.otr for _, c in cores], n_targets) if cores else None
    dep = (
        replicate_ratio([c.dependence_num for _, c in cores], [c.dependence_den for _, c in cores])
        if cores
        else None
    )
    cal_trials = [len(p.verdicts) for _, p in panels]
    cal = (
        replicate_proportion([p.calibrated_otr for _, p in panels], cal_trials) if panels else None
    )
    over = (
        replicate_proportion([p.over_unlearned_rate for _, p in panels], cal_trials)
        if panels
        else None
    )
    over_test = (
        over_unlearning_test(
            [c.target_scores for c, _ in panels], [p.oot_scores for _, p in panels]
        )
        if panels
        else None
    )
    c_trials = [len(c.truth) for c in controls]
    f1 = replicate_proportion([c.f1 for c in controls], c_trials) if controls else None
    cal_controls = [c for c in controls if c.verdicts is not None]
    cal_f1 = (
        replicate_proportion(
            [c.calibrated_f1 for c in cal_controls], [len(c.truth) for c in cal_controls]
        )
        if cal_controls
        else None
    )
    tp, fp, fn = (sum(getattr(c, k) for c in controls) for k in ("tp", "fp", "fn"))
    nulls = [d.null for d in draws if d.null is not None]
    null = pool_null_checks(nulls) if nulls else None
    verdicts = [v.verdict for _, p in panels for v in p.verdicts]
    counts = {
        v: (0 if cal_reason else verdicts.count(v))
        for v in ("in-training", "out-of-training", "over-unlearned")
    }
    spread = _spread_correlations(draws)
    reason = "; ".join(r for r in (cal_reason, split_reason) if r)
    summary = ModelSummary(
        **identity,
        draws=len(cores),
        reference_p=_value(ref),
        reference_p_lo=_value(ref, "lo"),
        reference_p_hi=_value(ref, "hi"),
        references_valid=bool(ref is not None and ref.value < settings.alpha),
        references_valid_draws=sum(c.reference.valid for _, c in cores),
        null_split_fpr=_NAN if null is None else null.split_test_fpr,
        otr=_gated(_value(otr), paper_reason),
        otr_lo=_gated(_value(otr, "lo"), paper_reason),
        otr_hi=_gated(_value(otr, "hi"), paper_reason),
        otr_raw=_value(otr),
        f1=_gated(_value(f1), paper_reason),
        f1_lo=_gated(_value(f1, "lo"), paper_reason),
        f1_hi=_gated(_value(f1, "hi"), paper_reason),
        f1_raw=_value(f1),
        f1_precision=tp / (tp + fp) if tp + fp else (_NAN if f1 is None else 0.0),
        f1_recall=tp / (tp + fn) if tp + fn else (_NAN if f1 is None else 0.0),
        dependence_score=_gated(_value(dep), paper_reason),
        dependence_score_lo=_gated(_value(dep, "lo"), paper_reason),
        dependence_score_hi=_gated(_value(dep, "hi"), paper_reason),
        dependence_score_raw=_value(dep),
        panel_p=_value(panel),
        panel_p_lo=_value(panel, "lo"),
        panel_p_hi=_value(panel, "hi"),
        panel_valid=bool(panel is not None and panel.value < settings.alpha),
        panel_valid_draws=sum(p.panel.valid for _, p in panels),
        calibrated_otr=_gated(_value(cal), cal_reason),
        calibrated_otr_lo=_gated(_value(cal, "lo"), cal_reason),
        calibrated_otr_hi=_gated(_value(cal, "hi"), cal_reason),
        calibrated_otr_raw=_value(cal),
        calibrated_f1=_gated(_value(cal_f1), cal_reason),
        calibrated_f1_lo=_gated(_value(cal_f1, "lo"), cal_reason),
        calibrated_f1_hi=_gated(_value(cal_f1, "hi"), cal_reason),
        calibrated_f1_raw=_value(cal_f1),
        over_unlearned_rate=_gated(_value(over), cal_reason),
        over_unlearned_lo=_gated(_value(over, "lo"), cal_reason),
        over_unlearned_hi=_gated(_value(over, "hi"), cal_reason),
        over_unlearning_p=_gated(_NAN if over_test is None else over_test.p_value, cal_reason),
        over_unlearned=bool(
            not cal_reason
            and over_test is not None
            and over_test.p_value < settings.alpha_calibrated
        ),
        n_in_training=counts["in-training"],
        n_out_of_training=counts["out-of-training"],
        n_over_unlearned=counts["over-unlearned"],
        n_inconclusive=sum(n_targets) - sum(counts.values()),
        null_pairs=0 if null is None else null.n_pairs,
        null_calibrated_fpr=_NAN if null is None else null.calibrated_fpr,
        null_over_unlearned_fpr=_NAN if null is None else null.over_unlearned_fpr,
        inconclusive_reason=reason,
        notes="; ".join(notes),
        score_spread_corr=spread[0],
        score_spread_corr_within=spread[1],
        score_spread_corr_within_lo=spread[2],
        score_spread_corr_within_hi=spread[3],
        **{k: extras.get(k, _NAN) for k in ModelSummary.EXTRA_FIELDS},
    )
    return summary, [_draw_summary(identity["name"], d) for d, _ in cores]


def _draw_summary(model: str, d: DrawState) -> DrawSummary:
    assert d.core is not None
    null = d.null
    over_p = _NAN
    if d.panel is not None:
        over_p = over_unlearning_test([d.core.target_scores], [d.panel.oot_scores]).p_value
    return DrawSummary(
        model=model,
        draw=d.index,
        targets=len(d.core.decisions),
        controls=0 if d.controls is None else len(d.controls.truth),
        reference_p=d.core.reference.p_value,
        references_valid=d.core.reference.valid,
        panel_p=_NAN if d.panel is None else d.panel.panel.p_value,
        panel_valid=bool(d.panel is not None and d.panel.panel.valid),
        otr=d.core.otr,
        calibrated_otr=_NAN if d.panel is None else d.panel.calibrated_otr,
        over_unlearned_rate=_NAN if d.panel is None else d.panel.over_unlearned_rate,
        over_unlearning_p=over_p,
        f1=_NAN if d.controls is None else d.controls.f1,
        calibrated_f1=_NAN if d.controls is None else d.controls.calibrated_f1,
        dependence_score=d.core.dependence,
        dependence_num=d.core.dependence_num,
        dependence_den=d.core.dependence_den,
        null_pairs=0 if null is None else null.n_pairs,
        null_split_fpr=_NAN if null is None else null.split_test_fpr,
        null_calibrated_fpr=_NAN if null is None else null.calibrated_fpr,
    )
