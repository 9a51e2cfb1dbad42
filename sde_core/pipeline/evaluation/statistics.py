"""Per-model statistics from H arrays: per draw, then combined over draws (method §3–5, §9, §12).

Pure functions of arrays and settings. Each draw's statistics are computed in parts, as its
stages finish: :func:`core_statistics` (S_IT, S_OOT, targets: the paper's reference check, JSD
decisions, dependence score), :func:`panel_statistics` (the calibrated panel check and the
targets' four-way verdicts), :func:`control_statistics` (controlled F1, paper's and calibrated)
and :func:`sde_core.stats.null_check.null_check`. :func:`summarize` combines the draws into the
headline numbers with their intervals (:mod:`sde_core.stats.replication`) and applies the gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sde_core.pipeline.evaluation.summary import DrawSummary, ModelSummary
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.calibrated import (
    FORGOTTEN_VERDICTS,
    CalibratedVerdict,
    calibrated_verdict,
    subset_scores,
)
from sde_core.stats.headline import controlled_f1, dependence_score
from sde_core.stats.jsd import Decision, decide
from sde_core.stats.null_check import NullCalibration, null_check, pool_null_checks
from sde_core.stats.outliers import PanelOutlier, panel_outliers
from sde_core.stats.over_unlearning import over_unlearning_test
from sde_core.stats.replication import (
    ReplicateEstimate,
    replicate_proportion,
    replicate_range,
    replicate_ratio,
)
from sde_core.stats.utest import ReferenceCheck, reference_check, reference_panel_check

__all__ = [
    "ControlStats",
    "CoreStats",
    "DrawState",
    "NullRates",
    "PanelStats",
    "control_statistics",
    "core_statistics",
    "null_rates",
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


@dataclass(frozen=True)
class NullRates:
    """The null check's three false-call rates over the draws (method §9), each a
    :class:`~sde_core.stats.replication.ReplicateEstimate` (95% Korn–Graubard interval) or
    None when not measured, with the one-sided gate's reason ("" when it passes)."""

    false_in: ReplicateEstimate | None
    false_over: ReplicateEstimate | None
    false_out: ReplicateEstimate | None
    train_subsets: int
    reason: str


def _rate_over_draws(
    per_draw: Sequence[tuple[float, int]], confidence: float
) -> ReplicateEstimate | None:
    kept = [(v, m) for v, m in per_draw if m > 0]
    if not kept:
        return None
    return replicate_proportion([v for v, _ in kept], [m for _, m in kept], confidence)


def null_rates(draws: Sequence[DrawState], settings: EvalSettings) -> NullRates:
    """False "in-training" and "over-unlearned" calls on the null check's unseen subsets and
    false "out-of-training" calls on the controlled training subsets, over the draws, and the
    gate: a rate whose one-sided (1 − α) Korn–Graubard lower bound (α = ``settings.alpha``)
    lies above ``alpha_calibrated`` is significantly above its level, and the calibrated
    verdicts are withheld (method §9)."""
    a = settings.alpha_calibrated
    nulls = [d.null for d in draws if d.null is not None]
    in_draws = [(float(np.mean(n.calibrated_p_in < a)), n.calibrated_p_in.size) for n in nulls]
    over_draws = [
        (float(np.mean(n.calibrated_p_over < a)), n.calibrated_p_over.size) for n in nulls
    ]
    ctl = [d.controls for d in draws if d.controls is not None and d.controls.verdicts is not None]
    out_draws = [(c.false_out / c.positives, c.positives) for c in ctl if c.positives]
    shown = {
        "in-training": _rate_over_draws(in_draws, 0.95),
        "over-unlearned": _rate_over_draws(over_draws, 0.95),
        "out-of-training": _rate_over_draws(out_draws, 0.95),
    }
    gate_conf = 1.0 - 2.0 * settings.alpha
    reasons = []
    for verdict, data, where in (
        ("in-training", in_draws, "unseen subsets"),
        ("over-unlearned", over_draws, "unseen subsets"),
        ("out-of-training", out_draws, "training subsets"),
    ):
        strict = _rate_over_draws(data, gate_conf)
        if strict is not None and strict.lo > a:
            reasons.append(
                f"the null check calls {strict.value:.0%} of {sum(m for _, m in data)} {where} "
                f"{verdict} (one-sided {1 - settings.alpha:.0%} lower bound {strict.lo:.2f} > "
                f"level {a}): the panels are not exchangeable with the subsets they judge"
            )
    return NullRates(
        false_in=shown["in-training"],
        false_over=shown["over-unlearned"],
        false_out=shown["out-of-training"],
        train_subsets=sum(m for _, m in out_draws),
        reason="; ".join(reasons),
    )


def _outlier_reason(panels: Sequence[tuple[CoreStats, PanelStats]]) -> tuple[int, str]:
    """``(number of outlying panel members, reason)`` over the draws ("" when none)."""
    found = [(b, o) for b, (_, p) in enumerate(panels) for o in p.outliers]
    if not found:
        return 0, ""
    parts = [
        f"{o.side.upper()} panel member {o.member + 1} of draw {b + 1} (robust z = {o.z:+.1f}) "
        f"makes every '{o.blocks}' verdict unreachable"
        for b, o in found[:3]
    ]
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return len(found), "an outlying panel member: " + "; ".join(parts) + more


def _baseline_estimate(
    per_draw: Mapping[int, tuple[float, int]] | None,
) -> ReplicateEstimate | None:
    """A baseline's F1 over the draws (Korn–Graubard, the controls as trials), like SDE's."""
    if not per_draw:
        return None
    values = list(per_draw.values())
    return replicate_proportion([v for v, _ in values], [m for _, m in values])


def _conflict(
    settings: EvalSettings,
    cal: ReplicateEstimate | None,
    over: ReplicateEstimate | None,
    over_model: bool,
    otr: ReplicateEstimate | None,
    cal_reason: str,
    paper_reason: str,
    extras: dict[str, Any],
) -> str:
    """Why SDE's verdict and the model's behaviour disagree ("" when they do not, method §9).

    SDE says *forgotten* when most targets are out-of-training (calibrated OTR > 0.5, or the
    paper's OTR interval above 0.5) and *over-unlearned* when the model-level test fires or most
    targets are over-unlearned; the behaviour says the model still fits D_f better than unseen
    data when its accuracy gap's 95% interval lies above 0.
    """
    lo = float(extras.get("acc_gap_lo", _NAN))
    if not lo > 0:
        return ""
    claims = []
    if not cal_reason and cal is not None and cal.value > 0.5:
        claims.append(f"{cal.value:.0%} of the targets out-of-training (calibrated)")
    elif not paper_reason and otr is not None and otr.lo > 0.5:
        claims.append(f"OTR {otr.value:.0%} (paper's rule)")
    if not cal_reason and (over_model or (over is not None and over.value > 0.5)):
        share = "" if over is None else f"{over.value:.0%} of the targets "
        claims.append(f"{share}over-unlearned")
    if not claims:
        return ""
    acc_f, acc_te = float(extras.get("acc_f", _NAN)), float(extras.get("acc_te", _NAN))
    text = (
        f"SDE says {' and '.join(claims)}, but the model still fits D_f better than unseen data: "
        f"accuracy {acc_f:.1f}% on D_f vs {acc_te:.1f}% on D_te (gap "
        f"{float(extras['acc_gap']):+.1f} points, 95% CI [{lo:+.1f}, "
        f"{float(extras['acc_gap_hi']):+.1f}])"
    )
    loss = float(extras.get("loss_gap", _NAN))
    if np.isfinite(loss):
        text += (
            f", mean loss gap {loss:+.2f} nats [{float(extras['loss_gap_lo']):+.2f}, "
            f"{float(extras['loss_gap_hi']):+.2f}]"
        )
    mia_f, mia_u = float(extras.get("mia_forget", _NAN)), float(extras.get("mia_unseen", _NAN))
    if np.isfinite(mia_f):
        text += (
            f", membership attack calls {mia_f:.0%} of D_f members vs {mia_u:.0%} of held-out "
            f"unseen rows (gap 95% CI [{float(extras['mia_gap_lo']):+.2f}, "
            f"{float(extras['mia_gap_hi']):+.2f}])"
        )
    return text + ": conflicting evidence — SDE's verdict is not certified for this model."


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
    baselines: Mapping[str, Mapping[int, tuple[float, int]]] | None = None,
) -> tuple[ModelSummary, list[DrawSummary]]:
    """Combine the finished draws into the model's headline numbers (method §12).

    Point values: pooled proportions (OTR, calibrated OTR, over-unlearned rate; F1 is the
    control-weighted mean of the draws' F1), the dependence score as the ratio of the draws'
    mean numerator and denominator, the median p-values. Intervals:
    :func:`~sde_core.stats.replication.replicate_proportion` (Korn–Graubard over draws) for
    rates and F1, Fieller's interval (:func:`~sde_core.stats.replication.replicate_ratio`) for
    the dependence score, the range of the draws for p-values. Gates (method §9, §12): when the
    median panel p is not below α, when the null check finds a false-call rate significantly
    above its level (:func:`null_rates`) or when a panel member is an outlier that makes a
    verdict unreachable, the calibrated metrics are NaN and ``inconclusive_reason`` says why;
    the paper's metrics (OTR, F1, dependence score, the baselines' F1) are withheld by the panel
    gate and also need the median split-level p below α (method §3). ``evidence_conflict``
    says when SDE's verdict contradicts the model's behaviour (:func:`_conflict`).

    Args:
        identity: ``name, role, method, layer, dim, sigma, f1_negatives``.
        draws: the draws (those without core statistics yet are skipped).
        settings: evaluation settings.
        extras: the :attr:`ModelSummary.EXTRA_FIELDS` known so far (missing ones are NaN).
        notes: plan notes (reductions) to carry in the summary.
        baselines: per baseline (``"mmd"``, ``"w2"``), ``{draw index: (F1, controls)}`` of
            the draws that scored their baseline controls.
    """
    cores = [(d, d.core) for d in draws if d.core is not None]
    panels = [(c, d.panel) for d, c in cores if d.panel is not None]
    controls = [d.controls for d, _ in cores if d.controls is not None]
    ref = replicate_range([c.reference.p_value for _, c in cores]) if cores else None
    panel = replicate_range([p.panel.p_value for _, p in panels]) if panels else None
    panel_reason, split_reason = _gate_reasons(settings, ref, panel)
    rates = null_rates([d for d, _ in cores], settings)
    n_outliers, outlier_reason = _outlier_reason(panels)
    cal_reason = "; ".join(r for r in (panel_reason, rates.reason, outlier_reason) if r)
    paper_reason = panel_reason or split_reason
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
    over_model = bool(
        not cal_reason and over_test is not None and over_test.p_value < settings.alpha_calibrated
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
    mmd = _baseline_estimate((baselines or {}).get("mmd"))
    w2 = _baseline_estimate((baselines or {}).get("w2"))
    spread = _spread_correlations(draws)
    reason = "; ".join(r for r in (cal_reason, split_reason) if r)
    conflict = _conflict(settings, cal, over, over_model, otr, cal_reason, paper_reason, extras)
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
        over_unlearned=over_model,
        n_in_training=counts["in-training"],
        n_out_of_training=counts["out-of-training"],
        n_over_unlearned=counts["over-unlearned"],
        n_inconclusive=sum(n_targets) - sum(counts.values()),
        null_pairs=0 if null is None else null.n_pairs,
        null_calibrated_fpr=_value(rates.false_in),
        null_calibrated_fpr_lo=_value(rates.false_in, "lo"),
        null_calibrated_fpr_hi=_value(rates.false_in, "hi"),
        null_over_unlearned_fpr=_value(rates.false_over),
        null_over_unlearned_fpr_lo=_value(rates.false_over, "lo"),
        null_over_unlearned_fpr_hi=_value(rates.false_over, "hi"),
        null_train_subsets=rates.train_subsets,
        null_out_of_training_fpr=_value(rates.false_out),
        null_out_of_training_fpr_lo=_value(rates.false_out, "lo"),
        null_out_of_training_fpr_hi=_value(rates.false_out, "hi"),
        panel_outliers=n_outliers,
        inconclusive_reason=reason,
        evidence_conflict=conflict,
        notes="; ".join(notes),
        score_spread_corr=spread[0],
        score_spread_corr_within=spread[1],
        score_spread_corr_within_lo=spread[2],
        score_spread_corr_within_hi=spread[3],
        mmd_f1=_gated(_value(mmd), paper_reason),
        mmd_f1_lo=_gated(_value(mmd, "lo"), paper_reason),
        mmd_f1_hi=_gated(_value(mmd, "hi"), paper_reason),
        mmd_f1_raw=_value(mmd),
        w2_f1=_gated(_value(w2), paper_reason),
        w2_f1_lo=_gated(_value(w2, "lo"), paper_reason),
        w2_f1_hi=_gated(_value(w2, "hi"), paper_reason),
        w2_f1_raw=_value(w2),
        **{k: extras.get(k, _NAN) for k in ModelSummary.EXTRA_FIELDS},
    )
    return summary, [_draw_summary(identity["name"], d, baselines or {}) for d, _ in cores]


def _draw_summary(
    model: str, d: DrawState, baselines: Mapping[str, Mapping[int, tuple[float, int]]]
) -> DrawSummary:
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
        null_out_of_training_fpr=(
            d.controls.false_out / d.controls.positives
            if d.controls is not None and d.controls.verdicts is not None and d.controls.positives
            else _NAN
        ),
        panel_outliers=0 if d.panel is None else len(d.panel.outliers),
        mmd_f1=baselines.get("mmd", {}).get(d.index, (_NAN, 0))[0],
        w2_f1=baselines.get("w2", {}).get(d.index, (_NAN, 0))[0],
    )
