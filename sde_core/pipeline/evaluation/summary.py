"""One model's result as typed records: the ``models`` row, the per-draw rows, the JSON document.

:class:`ModelSummary` is the one schema from which the results store's ``models`` columns, the
CLI table and the JSON document of method §10 derive: its metrics are :class:`Estimate` objects
until they are stored, and :data:`~.metric_table.METRICS` turns each into its flat columns
(``otr``, ``otr_lo``, ``otr_hi``, ``otr_raw``) and JSON keys. :class:`DrawSummary` is one row of
the ``draws`` table (each draw's own, ungated statistics). NaN marks a number that is not
available: withheld by the gate (``inconclusive_reason`` says why), not computed (baselines off,
no probabilities) or not yet computed (a partial, staged evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import (
    ACC_GAP,
    CALIBRATED_OTR,
    CLASSIC_METRICS,
    F1,
    LOSS_GAP,
    METRICS,
    OTR,
    OVER_UNLEARNED_RATE,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
    SCORE_SPREAD_CORR_WITHIN,
    Estimate,
    Metric,
    interval_columns,
    metric_columns,
)

__all__ = ["BEHAVIOUR_FIELDS", "CLI_COLUMNS", "DrawSummary", "ModelSummary", "json_number"]

_NAN = float("nan")
#: A metric that is not available (not computed, or no classic metrics).
_MISSING = Estimate(_NAN)
#: The behaviour check's columns (:class:`sde_core.learning.metrics.BehaviourCheck`).
BEHAVIOUR_FIELDS: tuple[str, ...] = (
    *interval_columns(ACC_GAP.key),
    *interval_columns(LOSS_GAP.key),
    "mia_forget",
    "mia_unseen",
    "mia_gap_lo",
    "mia_gap_hi",
    "mia_ties",
)


def json_number(x: Any) -> Any:
    """A JSON-safe scalar: None for None/NaN/inf, bool for booleans, int for integers, float
    for other numbers."""
    if x is None:
        return None
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    value = float(x)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class ModelSummary:
    """The headline result of one model (one row of the ``models`` table).

    Every metric of :data:`~.metric_table.METRICS` is an :class:`Estimate` field (named by its
    key), stored as the metric's flat columns by :meth:`to_row`. Point values over the
    evaluation's B draws, with 95% intervals ``*_lo``/``*_hi`` (method §12): rates and F1 pool
    the draws (Korn–Graubard interval), the dependence score is the ratio of the draws' mean
    numerator and denominator (Fieller's interval; ±inf when it is unbounded), p-values are the
    median over draws (``*_lo``/``*_hi`` = the range of the draws). ``*_raw`` columns hold the
    point value before the gate.

    Attributes:
        name, role, method, layer: the model and the evaluated layer. dim: d. sigma: σ used.
        f1_negatives: pool of the controlled F1's negatives (``"forget"`` or ``"test"``).
        draws: draws used (those finished, in a partial result).
        reference_p…references_valid_draws: the paper's split-level reference test (median p,
            range, ``references_valid`` = median p < α, how many draws were valid).
        null_split_fpr: that test's measured false-positive rate on disjoint null pairs.
        otr: OTR (paper's JSD rule). f1…f1_recall: controlled F1 (precision and recall
            pooled over draws). dependence_score…: the graded score.
        panel_p…panel_valid_draws: the calibrated panel test (the gate).
        calibrated_otr…: share of targets out-of-training or over-unlearned (calibrated).
        calibrated_f1…: F1 of the calibrated "in-training" verdicts on the controls.
        over_unlearned_rate…over_unlearned: share of targets over-unlearned; the model-level
            test's p-value and outcome (p < alpha_calibrated).
        n_in_training, n_out_of_training, n_over_unlearned, n_inconclusive: verdict counts
            over all targets (all inconclusive when the gate withholds them).
        null_pairs, null_calibrated_fpr…, null_over_unlearned_fpr…: the null check on unseen
            subsets — false "in-training" and false "over-unlearned" rates with 95% intervals
            over the draws. null_train_subsets, null_out_of_training_fpr…: false
            "out-of-training" (p_out < α) on the controlled training subsets. panel_outliers:
            panel members that make a verdict unreachable (method §9).
        inconclusive_reason: why numbers are withheld ("" when none is): the panel gate, the
            null-check gate or the paper's split-level test.
        evidence_conflict: why SDE's verdict and the model's behaviour disagree ("" when they
            do not): SDE says forgotten or over-unlearned while the model still classifies
            D_f significantly better than unseen data (method §9).
        notes: what the plan reduced (fewer draws, no null check, ...).
        score_spread_corr: correlation of subset score and spread over every panel and target
            subset; ``score_spread_corr_within`` (``_lo``/``_hi``): median (range) of the
            correlations within each group (IT panel, OOT panel, targets of one draw).
        mmd_f1…, w2_f1…: distribution baselines' F1 over the draws with its interval (gated
            like the paper's F1; ``*_raw`` before the gate). baseline_controls: the controls
            they scored.
        acc_r, acc_f, acc_te, asr: classic metrics. acc_gap…mia_ties: the behaviour check
            (:class:`~sde_core.learning.metrics.BehaviourCheck`). loss_gap_vs_retrained,
            attack_auc…text_auc, behaviour_measure: the behaviour check of the families
            without class scores (language models, denoisers; filled from the results
            store's ``behaviour`` units, :mod:`~sde_core.pipeline.evaluation.behaviour`);
            ``behaviour_measure`` names the family's measure and its unit ("" for a
            classifier, whose loss gap is in nats). acc_r_ties…asr_ties: how
            many of each classic metric's decisions are near-ties (method §13; NaN: not
            recorded, a store written before they were). h_rtol: how far (relative)
            another machine may move this model's H values, from its activations'
            conditioning (method §13). seconds: the method's time;
            eval_seconds: this evaluation's.
        precision_target, precision_half_width, draws_needed: the precision design (method
            §15; NaN without one): W, the widest Stein half-width of the driving rates, and the
            draws the pilot asked for (``draws`` < ``draws_needed``: the budget stopped it).
    """

    name: str
    role: str
    method: str
    layer: str
    dim: int
    sigma: float
    f1_negatives: str
    draws: int
    reference_p: Estimate
    references_valid: bool
    references_valid_draws: int
    null_split_fpr: float
    otr: Estimate
    f1: Estimate
    f1_precision: float
    f1_recall: float
    dependence_score: Estimate
    panel_p: Estimate
    panel_valid: bool
    panel_valid_draws: int
    calibrated_otr: Estimate
    calibrated_f1: Estimate
    over_unlearned_rate: Estimate
    over_unlearning_p: Estimate
    over_unlearned: bool
    n_in_training: int
    n_out_of_training: int
    n_over_unlearned: int
    n_inconclusive: int
    null_pairs: int
    null_calibrated_fpr: Estimate
    null_over_unlearned_fpr: Estimate
    null_train_subsets: int
    null_out_of_training_fpr: Estimate
    panel_outliers: int
    inconclusive_reason: str
    evidence_conflict: str
    notes: str
    score_spread_corr: float
    score_spread_corr_within: Estimate
    mmd_f1: Estimate = _MISSING
    w2_f1: Estimate = _MISSING
    baseline_controls: int = 0
    acc_r: Estimate = _MISSING
    acc_f: Estimate = _MISSING
    acc_te: Estimate = _MISSING
    asr: Estimate = _MISSING
    acc_gap: Estimate = _MISSING
    loss_gap: Estimate = _MISSING
    loss_gap_vs_retrained: Estimate = _MISSING
    attack_auc: Estimate = _MISSING
    attack_auc_vs_retrained: Estimate = _MISSING
    zlib_auc: Estimate = _MISSING
    mink_auc: Estimate = _MISSING
    text_auc: Estimate = _MISSING
    behaviour_measure: str = ""
    mia_forget: float = _NAN
    mia_unseen: float = _NAN
    mia_gap_lo: float = _NAN
    mia_gap_hi: float = _NAN
    mia_ties: float = _NAN
    acc_r_ties: float = _NAN
    acc_f_ties: float = _NAN
    acc_te_ties: float = _NAN
    asr_ties: float = _NAN
    h_rtol: float = _NAN
    seconds: float = _NAN
    eval_seconds: float = _NAN
    precision_target: float = _NAN
    precision_half_width: float = _NAN
    draws_needed: float = _NAN

    #: Fields filled from outside the per-draw statistics (classic metrics, the behaviour
    #: check, times), read from the flat ``extras`` of :func:`~.statistics.summarize`.
    EXTRA_FIELDS: ClassVar[tuple[str, ...]] = (
        "baseline_controls",
        *(m.key for m in CLASSIC_METRICS),
        ACC_GAP.key,
        LOSS_GAP.key,
        "mia_forget",
        "mia_unseen",
        "mia_gap_lo",
        "mia_gap_hi",
        "mia_ties",
        "acc_r_ties",
        "acc_f_ties",
        "acc_te_ties",
        "asr_ties",
        "h_rtol",
        "seconds",
        "eval_seconds",
    )

    def to_row(self) -> dict[str, Any]:
        """The ``models`` table row (store columns, in field order): each :class:`Estimate`
        as its metric's flat columns (:meth:`Metric.to_columns`)."""
        row: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Estimate):
                row.update(METRICS[f.name].to_columns(value))
            else:
                row[f.name] = value
        return row

    @classmethod
    def columns(cls) -> list[str]:
        """The ``models`` table's columns, in order."""
        return [c for f in fields(cls) for c in metric_columns(f.name)]

    @classmethod
    def text_columns(cls) -> tuple[str, ...]:
        """The columns that hold text, ``""`` when there is none to say (a conflict, a reason,
        a family's behaviour measure)."""
        return tuple(f.name for f in fields(cls) if f.type in ("str", str))

    @classmethod
    def filled_text(cls, models: pd.DataFrame) -> pd.DataFrame:
        """``models`` with its text columns' missing values (NaN, None) read as ``""``.

        A stored run's ``models`` rows come from its units, written by different evaluations;
        a unit written without a column (a classifier's unit beside a model whose behaviour
        stage named its measure) reads back NaN there, and NaN is *true* to every ``if
        row["evidence_conflict"]`` — a conflict that nothing found — and no JSON text."""
        present = [c for c in cls.text_columns() if c in models.columns]
        if not present or not models[present].isna().to_numpy().any():
            return models
        out = models.copy()
        for column in present:
            out[column] = out[column].astype(object).where(out[column].notna(), "")
        return out


@dataclass(frozen=True)
class DrawSummary:
    """One draw's own statistics (one row of the ``draws`` table; not gated).

    Attributes:
        model, draw: which model and draw. targets, controls: how many it judged.
        reference_p, references_valid: its split-level reference test.
        panel_p, panel_valid: its panel test.
        otr, calibrated_otr, over_unlearned_rate, f1, calibrated_f1, dependence_score: its
            statistics; dependence_num, dependence_den: the dependence score's numerator and
            denominator (the model's score is their ratio of means over the draws).
            over_unlearning_p: its median target ranked against its OOT panel.
        null_pairs, null_split_fpr, null_calibrated_fpr, null_out_of_training_fpr: its null
            check. panel_outliers: its panel members that make a verdict unreachable.
        mmd_f1, w2_f1: its baselines' F1 (NaN without baseline controls).
    """

    model: str
    draw: int
    targets: int
    controls: int
    reference_p: float
    references_valid: bool
    panel_p: float
    panel_valid: bool
    otr: float
    calibrated_otr: float
    over_unlearned_rate: float
    over_unlearning_p: float
    f1: float
    calibrated_f1: float
    dependence_score: float
    dependence_num: float
    dependence_den: float
    null_pairs: int
    null_split_fpr: float
    null_calibrated_fpr: float
    null_out_of_training_fpr: float
    panel_outliers: int
    mmd_f1: float
    w2_f1: float

    def to_row(self) -> dict[str, Any]:
        """The ``draws`` table row."""
        return asdict(self)


#: Columns of the CLI's summary table (a view of :class:`ModelSummary`).
CLI_COLUMNS: tuple[str, ...] = (
    "name",
    "role",
    "references_valid",
    "panel_valid",
    *interval_columns(OTR.key),
    CALIBRATED_OTR.key,
    F1.key,
    OVER_UNLEARNED_RATE.key,
    *(m.key for m in CLASSIC_METRICS),
)


def model_json(row: Mapping[str, Any], draws: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One model's entry of the JSON document (method §10, §12) from its ``models`` row and
    its ``draws`` rows (in draw order).

    Every interval is ``[lo, hi]``; withheld numbers (and their intervals and per-draw lists)
    are ``null`` and ``inconclusive_reason`` says why (``null`` when nothing is withheld).
    """

    def range_of(metric: Metric) -> list[Any]:
        """A median-over-draws p-value's range of the draws (its ``_lo``/``_hi`` columns)."""
        _, lo, hi = interval_columns(metric.key)
        return [json_number(row[lo]), json_number(row[hi])]

    out: dict[str, Any] = {
        "role": row["role"],
        "method": row["method"],
        "layer": row["layer"],
        "dim": json_number(row["dim"]),
        "sigma": json_number(row["sigma"]),
        "draws": json_number(row["draws"]),
        "f1_negatives": row["f1_negatives"],
        REFERENCE_P.key: json_number(row[REFERENCE_P.key]),
        f"{REFERENCE_P.json_key}_range": range_of(REFERENCE_P),
        "references_valid": bool(row["references_valid"]),
        "references_valid_draws": json_number(row["references_valid_draws"]),
        "null_split_fpr": json_number(row["null_split_fpr"]),
        PANEL_P.key: json_number(row[PANEL_P.key]),
        f"{PANEL_P.json_key}_range": range_of(PANEL_P),
        "panel_valid": bool(row["panel_valid"]),
        "panel_valid_draws": json_number(row["panel_valid_draws"]),
        "inconclusive_reason": row["inconclusive_reason"] or None,
    }
    for m in METRICS.values():  # the metrics with a confidence interval: value and "<stem>_ci"
        if m.confidence_interval and m.lo and m.hi and m.key in row:  # absent: an older store
            out[m.key] = json_number(row[m.key])
            out[f"{m.json_key}_ci"] = [json_number(row[m.lo]), json_number(row[m.hi])]
    for m in METRICS.values():
        if m.draws_in_json:
            withheld = not math.isfinite(float(row[m.key])) and bool(row["inconclusive_reason"])
            out[f"{m.json_key}_draws"] = (
                None if withheld else [json_number(d[m.key]) for d in draws]
            )
    out.update(
        {
            OVER_UNLEARNING_P.key: json_number(row[OVER_UNLEARNING_P.key]),
            "over_unlearned": bool(row["over_unlearned"]),
            "verdict_counts": {
                "in-training": json_number(row["n_in_training"]),
                "out-of-training": json_number(row["n_out_of_training"]),
                "over-unlearned": json_number(row["n_over_unlearned"]),
                "inconclusive": json_number(row["n_inconclusive"]),
            },
            "null_pairs": json_number(row["null_pairs"]),
            "null_train_subsets": json_number(row.get("null_train_subsets")),
            "panel_outliers": json_number(row.get("panel_outliers")),
            "evidence_conflict": row.get("evidence_conflict") or None,
            "behaviour_measure": row.get("behaviour_measure") or None,
            "mia_forget": json_number(row.get("mia_forget")),
            "mia_unseen": json_number(row.get("mia_unseen")),
            "mia_gap_ci": [json_number(row.get("mia_gap_lo")), json_number(row.get("mia_gap_hi"))],
            "score_spread_corr": json_number(row["score_spread_corr"]),
            SCORE_SPREAD_CORR_WITHIN.key: json_number(row[SCORE_SPREAD_CORR_WITHIN.key]),
            "notes": row["notes"] or None,
        }
    )
    for key in (*(m.key for m in CLASSIC_METRICS), "seconds"):
        out[key] = json_number(row[key])
    return out
