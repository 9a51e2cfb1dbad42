"""A model's statistics combined over its draws, gated (method §3–5, §9, §12).

Pure functions of the draws' states (:class:`~.draw_statistics.DrawState`, each draw's
statistics from :mod:`~.draw_statistics`) and the settings. :func:`summarize` combines the
draws into the headline numbers with their intervals (:mod:`sde_core.stats.replication`) and
applies the gate; :func:`null_rates` gives the null check's false-call rates over the draws and
:func:`sde_claims` what SDE claims that a model's behaviour can contradict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sde_core.pipeline.evaluation.draw_statistics import (
    ControlStats,
    CoreStats,
    DrawState,
    PanelStats,
)
from sde_core.pipeline.evaluation.metric_table import METRICS, Estimate, Gate
from sde_core.pipeline.evaluation.summary import DrawSummary, ModelSummary
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.calibrated import subset_scores
from sde_core.stats.null_check import pool_null_checks
from sde_core.stats.over_unlearning import over_unlearning_test
from sde_core.stats.replication import (
    ReplicateEstimate,
    replicate_proportion,
    replicate_range,
    replicate_ratio,
)

__all__ = [
    "NullRates",
    "accuracy_memory",
    "null_rates",
    "sde_claims",
    "summarize",
]

_NAN = float("nan")


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
    settings: EvalSettings, ref: Estimate, panel: Estimate, n_ref: int, n_panel: int
) -> tuple[str, str]:
    """``(calibrated reason, split-level reason)``: why metrics are withheld ("" = they are not).

    The calibrated metrics need the panels to separate (median panel p < α over the ``n_panel``
    draws with panels); the paper's metrics need that and, as the paper's §3 rule says, its own
    split-level test (median p < α over the ``n_ref`` draws).
    """
    if not n_panel:
        cal = "the reference panels are not computed yet"
    elif panel.value < settings.alpha:
        cal = ""
    else:
        cal = (
            "the calibrated reference panels do not separate training from unseen data (median "
            f"panel p = {panel.value:.2g} ≥ α = {settings.alpha} over {n_panel} draws)"
        )
    split = ""
    if n_ref and not ref.value < settings.alpha:
        split = (
            f"the paper's split-level reference test is not significant (median p = "
            f"{ref.value:.2g} ≥ α = {settings.alpha} over {n_ref} draws)"
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


def _false_out(d: DrawState) -> tuple[int, int]:
    """``(false "out-of-training" calls, training subsets judged)`` of one draw: its controlled
    positives (once their verdicts are known) and the null check's own training subsets."""
    calls = judged = 0
    if d.controls is not None and d.controls.verdicts is not None:
        calls, judged = d.controls.false_out, d.controls.positives
    if d.null_train is not None:
        calls, judged = calls + d.null_train[0], judged + d.null_train[1]
    return calls, judged


def _false_out_rate(d: DrawState) -> float:
    calls, judged = _false_out(d)
    return calls / judged if judged else _NAN


def null_rates(draws: Sequence[DrawState], settings: EvalSettings) -> NullRates:
    """False "in-training" and "over-unlearned" calls on the null check's unseen subsets and
    false "out-of-training" calls on the training subsets (the controlled positives and, in a
    sized null check, its own training subsets), over the draws, and the
    gate: a rate whose one-sided (1 − α) Korn–Graubard lower bound (α = ``settings.alpha``)
    lies above ``alpha_calibrated`` is significantly above its level, and the calibrated
    verdicts are withheld (method §9)."""
    a = settings.alpha_calibrated
    nulls = [d.null for d in draws if d.null is not None]
    in_draws = [(float(np.mean(n.calibrated_p_in < a)), n.calibrated_p_in.size) for n in nulls]
    over_draws = [
        (float(np.mean(n.calibrated_p_over < a)), n.calibrated_p_over.size) for n in nulls
    ]
    out_draws = []
    for d in draws:
        calls, judged = _false_out(d)
        if judged:
            out_draws.append((calls / judged, judged))
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


def _proportion(per_draw: Sequence[tuple[float, int]]) -> ReplicateEstimate | None:
    """A share over the draws from ``(value, trials)`` per draw (Korn–Graubard, method §12)."""
    if not per_draw:
        return None
    return replicate_proportion([v for v, _ in per_draw], [m for _, m in per_draw])


def _combine(
    cores: Sequence[CoreStats],
    panels: Sequence[tuple[CoreStats, PanelStats]],
    controls: Sequence[ControlStats],
    baselines: Mapping[str, Mapping[int, tuple[float, int]]],
) -> dict[str, ReplicateEstimate | float | None]:
    """Each draw-based metric of :data:`METRICS` combined over the finished draws (method
    §12), before its gate; None when none of its draws is finished."""
    cal = [c for c in controls if c.verdicts is not None]
    ref_p = [c.reference.p_value for c in cores]
    panel_p = [p.panel.p_value for _, p in panels]
    return {
        "reference_p": replicate_range(ref_p) if ref_p else None,
        "otr": _proportion([(c.otr, len(c.decisions)) for c in cores]),
        "f1": _proportion([(c.f1, len(c.truth)) for c in controls]),
        "dependence_score": replicate_ratio(
            [c.dependence_num for c in cores], [c.dependence_den for c in cores]
        )
        if cores
        else None,
        "panel_p": replicate_range(panel_p) if panel_p else None,
        "calibrated_otr": _proportion([(p.calibrated_otr, len(p.verdicts)) for _, p in panels]),
        "calibrated_f1": _proportion([(c.calibrated_f1, len(c.truth)) for c in cal]),
        "over_unlearned_rate": _proportion(
            [(p.over_unlearned_rate, len(p.verdicts)) for _, p in panels]
        ),
        "over_unlearning_p": over_unlearning_test(
            [c.target_scores for c, _ in panels], [p.oot_scores for _, p in panels]
        ).p_value
        if panels
        else None,
        "mmd_f1": _proportion(list(baselines.get("mmd", {}).values())),
        "w2_f1": _proportion(list(baselines.get("w2", {}).values())),
    }


def sde_claims(
    calibrated_otr: float, otr: float, otr_lo: float, over_model: bool, over_rate: float
) -> list[str]:
    """What SDE claims that a model's behaviour can contradict (method §9), in words: that it
    is *forgotten* (calibrated OTR > 0.5, or the paper's OTR interval above 0.5) and/or
    *over-unlearned* (the model-level test, or over-unlearned share > 0.5); empty when it
    claims neither (withheld estimates, NaN, claim nothing). Every family's conflict rule
    starts from these claims."""
    claims = []
    if calibrated_otr > 0.5:
        claims.append(f"{calibrated_otr:.0%} of the targets out-of-training (calibrated)")
    elif otr_lo > 0.5:
        claims.append(f"OTR {otr:.0%} (paper's rule)")
    if over_model or over_rate > 0.5:
        share = "" if math.isnan(over_rate) else f"{over_rate:.0%} of the targets "
        claims.append(f"{share}over-unlearned")
    return claims


def accuracy_memory(extras: Mapping[str, Any]) -> str:
    """A classifier's behaviour evidence that it still fits D_f better than unseen data — its
    accuracy gap D_f − D_te has a 95% interval above 0 — in words ("" when it does not, or was
    not measured; method §9)."""
    lo = float(extras.get("acc_gap_lo", _NAN))
    if not lo > 0:
        return ""
    acc_f, acc_te = float(extras.get("acc_f", _NAN)), float(extras.get("acc_te", _NAN))
    return (
        f"accuracy {acc_f:.1f}% on D_f vs {acc_te:.1f}% on D_te (gap "
        f"{float(extras['acc_gap']):+.1f} points, 95% CI [{lo:+.1f}, "
        f"{float(extras['acc_gap_hi']):+.1f}])"
    )


def _conflict(
    estimates: Mapping[str, Estimate], over_model: bool, extras: Mapping[str, Any]
) -> str:
    """Why SDE's verdict and the model's behaviour disagree ("" when they do not, method §9).

    SDE says *forgotten* when most targets are out-of-training (calibrated OTR > 0.5, or the
    paper's OTR interval above 0.5) and *over-unlearned* when the model-level test fires or most
    targets are over-unlearned; the behaviour says the model still fits D_f better than unseen
    data when its accuracy gap's 95% interval lies above 0. Withheld estimates (NaN) claim
    nothing.
    """
    memory = accuracy_memory(extras)
    if not memory:
        return ""
    claims = sde_claims(
        estimates["calibrated_otr"].value, estimates["otr"].value, estimates["otr"].lo,
        over_model, estimates["over_unlearned_rate"].value,
    )  # fmt: skip
    if not claims:
        return ""
    text = (
        f"SDE says {' and '.join(claims)}, but the model still fits D_f better than unseen data: "
        f"{memory}"
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


def summarize(
    identity: dict[str, Any],
    draws: Sequence[DrawState],
    settings: EvalSettings,
    extras: dict[str, Any],
    notes: Sequence[str] = (),
    baselines: Mapping[str, Mapping[int, tuple[float, int]]] | None = None,
) -> tuple[ModelSummary, list[DrawSummary]]:
    """Combine the finished draws into the model's headline numbers (method §12).

    Each draw-based metric of :data:`~.metric_table.METRICS` is combined over the draws
    (:func:`_combine`: pooled proportions with Korn–Graubard intervals for rates and F1,
    Fieller's interval for the dependence score's ratio of means, median and range for
    p-values) and passed through its gate as an :class:`~.metric_table.Estimate`. Gates
    (method §9, §12): when the median panel p is not below α, when the null check finds a
    false-call rate significantly above its level (:func:`null_rates`) or when a panel member is
    an outlier that makes a verdict unreachable, the calibrated metrics are withheld (NaN) and
    ``inconclusive_reason`` says why; the paper's metrics (OTR, F1, dependence score, the
    baselines' F1) are withheld by the panel gate and also need the median split-level p below
    α (method §3). ``evidence_conflict`` says when SDE's verdict contradicts the model's
    behaviour (:func:`_conflict`).

    Args:
        identity: ``name, role, method, layer, dim, sigma, f1_negatives``.
        draws: the draws (those without core statistics yet are skipped).
        settings: evaluation settings.
        extras: the flat columns of :attr:`ModelSummary.EXTRA_FIELDS` known so far (missing
            ones are NaN).
        notes: plan notes (reductions) to carry in the summary.
        baselines: per baseline (``"mmd"``, ``"w2"``), ``{draw index: (F1, controls)}`` of
            the draws that scored their baseline controls.
    """
    finished = [d for d in draws if d.core is not None]
    cores = [d.core for d in finished if d.core is not None]
    panels = [(d.core, d.panel) for d in finished if d.core is not None and d.panel is not None]
    controls = [d.controls for d in finished if d.controls is not None]
    combined = _combine(cores, panels, controls, baselines or {})
    rates = null_rates(finished, settings)
    withheld, reason, n_outliers = _gates(settings, combined, rates, panels, len(cores))
    estimates = {
        key: Estimate.over_draws(value, withheld[METRICS[key].gate])
        for key, value in combined.items()
    }
    ref, panel = estimates["reference_p"].value, estimates["panel_p"].value
    over_model = bool(estimates["over_unlearning_p"].value < settings.alpha_calibrated)
    spread = _spread_correlations(draws)
    given: dict[str, Any] = {  # identity, the metrics, what was counted and measured outside
        **identity,
        **estimates,
        **_verdict_counts(cores, panels, withheld["calibrated"]),
        **_control_counts(controls),
        **_null_fields(draws, rates),
        **_extra_fields(extras),
    }
    summary = ModelSummary(
        **given,
        draws=len(cores),
        references_valid=bool(ref < settings.alpha),
        references_valid_draws=sum(c.reference.valid for c in cores),
        panel_valid=bool(panel < settings.alpha),
        panel_valid_draws=sum(p.panel.valid for _, p in panels),
        over_unlearned=over_model,
        panel_outliers=n_outliers,
        inconclusive_reason=reason,
        evidence_conflict=_conflict(estimates, over_model, extras),
        notes="; ".join(notes),
        score_spread_corr=spread[0],
        score_spread_corr_within=Estimate(*spread[1:]),
    )
    return summary, [_draw_summary(identity["name"], d, baselines or {}) for d in finished]


def _gates(
    settings: EvalSettings,
    combined: Mapping[str, ReplicateEstimate | float | None],
    rates: NullRates,
    panels: Sequence[tuple[CoreStats, PanelStats]],
    n_cores: int,
) -> tuple[dict[Gate | None, str], str, int]:
    """``({gate: why it withholds ("" = it does not)}, inconclusive_reason, outliers)``.

    The calibrated gate: the panels, the null check and the outlier check; the paper's gate:
    the panels and the paper's split-level test (method §9, §12).
    """
    ref = Estimate.over_draws(combined["reference_p"])
    panel = Estimate.over_draws(combined["panel_p"])
    panel_reason, split_reason = _gate_reasons(settings, ref, panel, n_cores, len(panels))
    n_outliers, outlier_reason = _outlier_reason(panels)
    cal_reason = "; ".join(r for r in (panel_reason, rates.reason, outlier_reason) if r)
    withheld: dict[Gate | None, str] = {
        None: "",
        "calibrated": cal_reason,
        "paper": panel_reason or split_reason,
    }
    return withheld, "; ".join(r for r in (cal_reason, split_reason) if r), n_outliers


def _verdict_counts(
    cores: Sequence[CoreStats], panels: Sequence[tuple[CoreStats, PanelStats]], withheld: str
) -> dict[str, int]:
    """The targets' calibrated verdict counts (all inconclusive when ``withheld``)."""
    verdicts: list[str] = [v.verdict for _, p in panels for v in p.verdicts]
    kinds = ("in_training", "out_of_training", "over_unlearned")
    counts = {f"n_{k}": 0 if withheld else verdicts.count(k.replace("_", "-")) for k in kinds}
    counts["n_inconclusive"] = sum(len(c.decisions) for c in cores) - sum(counts.values())
    return counts


def _control_counts(controls: Sequence[ControlStats]) -> dict[str, float]:
    """Precision and recall of the controlled F1's decisions, pooled over the draws (NaN
    without controls, 0 without a positive decision or a positive)."""
    tp, fp, fn = (sum(getattr(c, k) for c in controls) for k in ("tp", "fp", "fn"))
    empty = 0.0 if controls else _NAN
    return {
        "f1_precision": tp / (tp + fp) if tp + fp else empty,
        "f1_recall": tp / (tp + fn) if tp + fn else empty,
    }


def _null_fields(draws: Sequence[DrawState], rates: NullRates) -> dict[str, Any]:
    """The null check's fields of the summary: the paper's test's false-positive rate on the
    pooled pairs and the calibrated test's false-call rates (method §9)."""
    nulls = [d.null for d in draws if d.null is not None]
    null = pool_null_checks(nulls) if nulls else None
    return {
        "null_split_fpr": _NAN if null is None else null.split_test_fpr,
        "null_pairs": 0 if null is None else null.n_pairs,
        "null_calibrated_fpr": Estimate.over_draws(rates.false_in),
        "null_over_unlearned_fpr": Estimate.over_draws(rates.false_over),
        "null_train_subsets": rates.train_subsets,
        "null_out_of_training_fpr": Estimate.over_draws(rates.false_out),
    }


def _extra_fields(extras: Mapping[str, Any]) -> dict[str, Any]:
    """:attr:`ModelSummary.EXTRA_FIELDS` from the flat ``extras`` (missing ones NaN)."""
    return {
        k: METRICS[k].from_columns(extras) if k in METRICS else extras.get(k, _NAN)
        for k in ModelSummary.EXTRA_FIELDS
    }


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
        null_out_of_training_fpr=_false_out_rate(d),
        panel_outliers=0 if d.panel is None else len(d.panel.outliers),
        mmd_f1=baselines.get("mmd", {}).get(d.index, (_NAN, 0))[0],
        w2_f1=baselines.get("w2", {}).get(d.index, (_NAN, 0))[0],
    )
