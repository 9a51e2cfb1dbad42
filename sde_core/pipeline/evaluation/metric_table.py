"""The one metric vocabulary: each number a model's result reports, declared once.

:data:`METRICS` says, for every metric of the ``models`` table, what it is (label, glossary
term, the section of ``docs/method.md`` that defines it), how it is combined over the draws
(its interval, method §12), which gate can withhold it (method §9, §12) and how it is shown
(unit, scale, axis, whether the dashboard offers it as a bar chart). Everything else is built
from it: the flat store columns (``otr``, ``otr_lo``, ``otr_hi``, ``otr_raw``),
:class:`~sde_core.pipeline.evaluation.summary.ModelSummary`'s rows and JSON document,
:func:`~sde_core.pipeline.evaluation.statistics.summarize`, the charts and the tables of
:mod:`sde_core.viz`.

A metric's value travels as an :class:`Estimate` (point value, interval, the value before the
gate and why it is withheld) until it is stored; :meth:`Metric.to_columns` writes it as the
flat columns and :meth:`Metric.from_columns` reads it back.

Adding a metric: one entry here and its key's name (``OTR = "otr"``, at the end), its
computation (per draw in ``statistics.py``, or an extra measured outside the draws), a field of
``ModelSummary``, a glossary term and its definition in ``docs/method.md``;
``tests/pipeline/test_metric_table.py`` checks the entry is complete.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sde_core.stats.replication import ReplicateEstimate

__all__ = [
    "ACC_F",
    "ACC_GAP",
    "ACC_R",
    "ACC_TE",
    "ASR",
    "ATTACK_AUC",
    "ATTACK_AUC_VS_RETRAINED",
    "BAR_METRICS",
    "CALIBRATED_F1",
    "CALIBRATED_OTR",
    "CLASSIC_METRICS",
    "DEPENDENCE_SCORE",
    "F1",
    "INTERVAL_METHODS",
    "LOSS_GAP",
    "LOSS_GAP_VS_RETRAINED",
    "METRICS",
    "MINK_AUC",
    "MMD_F1",
    "NULL_CALIBRATED_FPR",
    "NULL_OUT_OF_TRAINING_FPR",
    "NULL_OVER_UNLEARNED_FPR",
    "OTR",
    "OVER_UNLEARNED_RATE",
    "OVER_UNLEARNING_P",
    "PANEL_P",
    "REFERENCE_P",
    "SCORE_SPREAD_CORR_WITHIN",
    "TEXT_AUC",
    "W2_F1",
    "ZLIB_AUC",
    "Estimate",
    "Gate",
    "IntervalKind",
    "Metric",
    "hi_column",
    "interval_columns",
    "lo_column",
    "metric_columns",
    "raw_column",
]

_NAN = float("nan")

#: How a metric's 95% interval is formed (method §6, §9, §12).
IntervalKind = Literal[
    "none",
    "korn-graubard",
    "korn-graubard-controls",
    "fieller",
    "range",
    "newcombe",
    "welch-t",
    "delong",
    "delong-paired",
]
#: The gate that can withhold a metric: ``"paper"`` (the panel gate and the paper's split-level
#: test) or ``"calibrated"`` (the panel gate, the null check and the outlier check), method §12.
Gate = Literal["paper", "calibrated"]

#: The interval methods as the charts name them.
INTERVAL_METHODS: dict[IntervalKind, str] = {
    "none": "no interval",
    "korn-graubard": "Korn–Graubard",
    "korn-graubard-controls": "Korn–Graubard, controls as trials",
    "fieller": "Fieller, t with B − 1 df",
    "range": "median; range of the draws",
    "newcombe": "Newcombe's hybrid score",
    "welch-t": "Welch t",
    "delong": "DeLong",
    "delong-paired": "paired DeLong",
}


@dataclass(frozen=True)
class Estimate:
    """One metric of one model, as it is kept until storage.

    Attributes:
        value: the point value (NaN when withheld or not available).
        lo, hi: its 95% interval (method §12; NaN when it has none or it is withheld, ±inf
            for an unbounded side of a Fieller interval).
        raw: the point value before the gate (NaN when the metric is never gated).
        withheld_reason: why the gate withholds it ("" when it does not).
    """

    value: float
    lo: float = _NAN
    hi: float = _NAN
    raw: float = _NAN
    withheld_reason: str = ""

    @classmethod
    def over_draws(
        cls, combined: ReplicateEstimate | float | None, withheld_reason: str = ""
    ) -> Estimate:
        """A combined statistic (or a bare value) after its gate: value and interval are NaN
        when ``withheld_reason`` is given, ``raw`` keeps the point value before the gate.

        Args:
            combined: a :class:`~sde_core.stats.replication.ReplicateEstimate`, a plain value
                without interval, or None (not computed yet).
            withheld_reason: the gate's reason ("" when it lets the metric through).
        """
        if combined is None:
            value = lo = hi = _NAN
        elif isinstance(combined, ReplicateEstimate):
            value, lo, hi = float(combined.value), float(combined.lo), float(combined.hi)
        else:
            value, lo, hi = float(combined), _NAN, _NAN
        if withheld_reason:
            return cls(_NAN, _NAN, _NAN, value, withheld_reason)
        return cls(value, lo, hi, value)

    @property
    def withheld(self) -> bool:
        """Whether the gate withholds this estimate."""
        return bool(self.withheld_reason)


@dataclass(frozen=True)
class Metric:
    """One metric of the ``models`` table.

    Attributes:
        key: its point column (``"otr"``) and its :class:`Estimate`'s name in ``ModelSummary``.
        label: the short name of charts and reports (``"OTR"``).
        axis: a chart axis title, with units.
        section: the section of ``docs/method.md`` that defines it (a number, or ``"choices"``).
        unit: ``"%"`` when shown as a percentage, else ``""``.
        scale: shown value = stored value × scale (100 for shares stored in [0, 1]).
        bounds: the range of the shown value (for chart axes), or None when unbounded.
        interval: how its 95% interval is formed (:data:`INTERVAL_METHODS`).
        gate: the gate that can withhold it, or None.
        raw: whether a ``*_raw`` column keeps the value before the gate.
        valid: the boolean column that says whether it is a valid verdict (hatched bars and
            open markers where it is False), or None.
        bar: offered as a bar chart on the Compare page (:data:`BAR_METRICS`).
        draws_in_json: the JSON document lists its per-draw values (``<stem>_draws``).
        short: its name in the dashboard's compact tables (default: ``label``).
        long: its name where space allows, e.g. the per-draw strip (default: ``label``).
        term: its glossary key in :mod:`sde_core.viz.glossary` (default: ``key``).
        stem: the prefix of its interval columns and JSON keys (default: ``key``).
        log: shown on a logarithmic axis (p-values).
    """

    key: str
    label: str
    axis: str
    section: int | str
    unit: Literal["%", ""] = ""
    scale: float = 1.0
    bounds: tuple[float, float] | None = None
    interval: IntervalKind = "none"
    gate: Gate | None = None
    raw: bool = False
    valid: str | None = None
    bar: bool = False
    draws_in_json: bool = False
    short: str = ""
    long: str = ""
    term: str = ""
    stem: str = ""
    log: bool = False

    @property
    def lo(self) -> str | None:
        """The column of the interval's lower end, or None without an interval."""
        return None if self.interval == "none" else f"{self.stem or self.key}_lo"

    @property
    def hi(self) -> str | None:
        """The column of the interval's upper end, or None without an interval."""
        return None if self.interval == "none" else f"{self.stem or self.key}_hi"

    @property
    def raw_column(self) -> str | None:
        """The column of the value before the gate, or None."""
        return f"{self.key}_raw" if self.raw else None

    @property
    def short_label(self) -> str:
        """The name in compact tables."""
        return self.short or self.label

    @property
    def long_label(self) -> str:
        """The name where space allows."""
        return self.long or self.label

    @property
    def glossary_key(self) -> str:
        """The key of its glossary term."""
        return self.term or self.key

    @property
    def json_key(self) -> str:
        """The prefix of its JSON keys (``<stem>_ci``, ``<stem>_draws``)."""
        return self.stem or self.key

    @property
    def confidence_interval(self) -> bool:
        """Whether its interval is a 95% confidence interval (not a range of the draws)."""
        return self.interval not in ("none", "range")

    @property
    def columns(self) -> tuple[str, ...]:
        """Its flat store columns, in order: value, lo, hi, raw (those it has)."""
        return tuple(c for c in (self.key, self.lo, self.hi, self.raw_column) if c is not None)

    def to_columns(self, estimate: Estimate) -> dict[str, float]:
        """``estimate`` as this metric's flat columns (its ``withheld_reason`` is stored once
        per model, in ``inconclusive_reason``)."""
        values = (estimate.value, estimate.lo, estimate.hi, estimate.raw)
        names = (self.key, self.lo, self.hi, self.raw_column)
        return {c: v for c, v in zip(names, values, strict=True) if c is not None}

    def from_columns(self, row: Mapping[str, Any], reason: str = "") -> Estimate:
        """The :class:`Estimate` stored in ``row`` (columns the row lacks are NaN).

        Args:
            row: a ``models`` row (or the extras of a summary).
            reason: the row's ``inconclusive_reason``; it becomes the estimate's
                ``withheld_reason`` when the metric is gated and its value is NaN.
        """

        def get(column: str | None) -> float:
            value = row.get(column, _NAN) if column is not None else _NAN
            return _NAN if value is None else float(value)

        value = get(self.key)
        withheld = reason if self.gate is not None and math.isnan(value) else ""
        return Estimate(value, get(self.lo), get(self.hi), get(self.raw_column), withheld)

    def fmt(self, value: float) -> str:
        """A shown value, e.g. ``"93%"`` or ``"0.97"`` (``"n/a"`` when not finite)."""
        if not math.isfinite(value):
            return "n/a"
        shown = value * self.scale
        return f"{shown:.0f}%" if self.unit == "%" else f"{shown:.3g}"


_RATE = (0.0, 100.0)
_UNIT = (0.0, 1.0)

#: Every metric of the ``models`` table, in the order of the JSON document's intervals.
METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric(
            "otr", "OTR", "out-of-training rate (% of target subsets)", 5, "%", 100, _RATE,
            "korn-graubard", "paper", raw=True, valid="references_valid", bar=True,
            draws_in_json=True,
        ),
        Metric(
            "calibrated_otr", "calibrated OTR",
            "calibrated out-of-training rate (% of target subsets)", 9, "%", 100, _RATE,
            "korn-graubard", "calibrated", raw=True, bar=True, draws_in_json=True,
            short="cal. OTR",
        ),
        Metric(
            "f1", "F1", "controlled F1 (0–1, in-training positive)", 5, bounds=_UNIT,
            interval="korn-graubard-controls", gate="paper", raw=True, valid="references_valid",
            bar=True, draws_in_json=True, long="controlled F1",
        ),
        Metric(
            "calibrated_f1", "calibrated F1", "calibrated controlled F1 (0–1)", 9, bounds=_UNIT,
            interval="korn-graubard-controls", gate="calibrated", raw=True, valid="panel_valid",
        ),
        Metric(
            "dependence_score", "dependence score",
            "dependence score (0 = unseen level, 1 = training level)", 5, interval="fieller",
            gate="paper", raw=True, valid="references_valid", bar=True, draws_in_json=True,
            short="dependence",
        ),
        Metric(
            "over_unlearned_rate", "over-unlearned share",
            "over-unlearned share (% of target subsets)", 9, "%", 100, _RATE, "korn-graubard",
            "calibrated", draws_in_json=True, stem="over_unlearned",
        ),
        Metric(
            "mmd_f1", "MMD F1", "MMD² baseline's controlled F1 (0–1)", 6, bounds=_UNIT,
            interval="korn-graubard-controls", gate="paper", raw=True, valid="references_valid",
        ),
        Metric(
            "w2_f1", "W2 F1", "Wasserstein-2 baseline's controlled F1 (0–1)", 6, bounds=_UNIT,
            interval="korn-graubard-controls", gate="paper", raw=True, valid="references_valid",
        ),
        Metric(
            "null_calibrated_fpr", "null FPR (calibrated)",
            "unseen subsets called in-training by the calibrated test (%)", 9, "%", 100, _RATE,
            "korn-graubard",
        ),
        Metric(
            "null_over_unlearned_fpr", "null FPR (over-unlearned)",
            "unseen subsets called over-unlearned by the calibrated test (%)", 9, "%", 100,
            _RATE, "korn-graubard",
        ),
        Metric(
            "null_out_of_training_fpr", "null FPR (training → out)",
            "training subsets called out-of-training by the calibrated test (%)", 9, "%", 100,
            _RATE, "korn-graubard",
        ),
        Metric(
            "acc_gap", "accuracy gap", "accuracy on D_f − on D_te (percentage points)", 9,
            interval="newcombe", short="Acc gap D_f−D_te (pts)",
        ),
        Metric(
            "loss_gap", "loss gap", "mean loss on D_f − on D_te (nats)", 9, interval="welch-t"
        ),
        Metric(
            "loss_gap_vs_retrained", "loss gap − retrained's",
            "loss gap minus the retrained model's, on the same rows (family unit)", 9,
            interval="welch-t",
        ),
        Metric(
            "attack_auc", "loss attack AUC", "AUC of the loss attack, D_f vs D_te (0.5: unseen)",
            9, bounds=_UNIT, interval="delong",
        ),
        Metric(
            "attack_auc_vs_retrained", "AUC − retrained's",
            "loss attack AUC minus the retrained model's, on the same texts", 9,
            bounds=(-1.0, 1.0), interval="delong-paired",
        ),
        Metric(
            "zlib_auc", "zlib attack AUC", "AUC of the zlib-ratio attack, D_f vs D_te", 9,
            bounds=_UNIT, interval="delong",
        ),
        Metric(
            "mink_auc", "Min-K% attack AUC", "AUC of the Min-K% (k = 20%) attack, D_f vs D_te",
            9, bounds=_UNIT, interval="delong",
        ),
        Metric(
            "text_auc", "whole-text attack AUC",
            "AUC of the loss attack on the whole text, question included", 9, bounds=_UNIT,
            interval="delong",
        ),
        Metric(
            "reference_p", "reference p", "split-level reference p-value (paper's U-test)", 3,
            interval="range", draws_in_json=True, long="reference p (paper's U-test)", log=True,
        ),
        Metric(
            "panel_p", "panel p", "panel p-value (calibrated U-test)", 9, interval="range",
            draws_in_json=True, log=True,
        ),
        Metric(
            "score_spread_corr_within", "score–spread r (within groups)",
            "score–spread correlation within a group of subsets", 9, bounds=(-1.0, 1.0),
            interval="range", term="score_spread_corr",
        ),
        Metric(
            "over_unlearning_p", "over-unlearning p", "over-unlearning test p-value", 9,
            gate="calibrated", log=True,
        ),
        Metric("acc_r", "Acc_r", "accuracy on retained data D_r (%)", 6, "%", bounds=_RATE),
        Metric(
            "acc_f", "Acc_f", "accuracy on the forget set D_f (%)", 6, "%", bounds=_RATE, bar=True
        ),
        Metric("acc_te", "Acc_te", "accuracy on test data D_te (%)", 6, "%", bounds=_RATE),
        Metric(
            "asr", "MIA ASR", "attack success rate (% of D_f predicted member)", 6, "%", 100,
            _RATE, bar=True,
        ),
    )
}  # fmt: skip

#: The metrics the Compare page offers as a bar chart, in table order.
BAR_METRICS: tuple[str, ...] = tuple(k for k, m in METRICS.items() if m.bar)

# Named handles of the metrics that code outside this table reads one by one: ``OTR.key``,
# ``OTR.label``, ``OTR.lo`` rather than the literal ``"otr"`` (tests/test_metric_vocabulary.py).
OTR = METRICS["otr"]
CALIBRATED_OTR = METRICS["calibrated_otr"]
F1 = METRICS["f1"]
CALIBRATED_F1 = METRICS["calibrated_f1"]
DEPENDENCE_SCORE = METRICS["dependence_score"]
OVER_UNLEARNED_RATE = METRICS["over_unlearned_rate"]
MMD_F1 = METRICS["mmd_f1"]
W2_F1 = METRICS["w2_f1"]
NULL_CALIBRATED_FPR = METRICS["null_calibrated_fpr"]
NULL_OVER_UNLEARNED_FPR = METRICS["null_over_unlearned_fpr"]
NULL_OUT_OF_TRAINING_FPR = METRICS["null_out_of_training_fpr"]
ACC_GAP = METRICS["acc_gap"]
LOSS_GAP = METRICS["loss_gap"]
LOSS_GAP_VS_RETRAINED = METRICS["loss_gap_vs_retrained"]
ATTACK_AUC = METRICS["attack_auc"]
ATTACK_AUC_VS_RETRAINED = METRICS["attack_auc_vs_retrained"]
ZLIB_AUC = METRICS["zlib_auc"]
MINK_AUC = METRICS["mink_auc"]
TEXT_AUC = METRICS["text_auc"]
REFERENCE_P = METRICS["reference_p"]
PANEL_P = METRICS["panel_p"]
SCORE_SPREAD_CORR_WITHIN = METRICS["score_spread_corr_within"]
OVER_UNLEARNING_P = METRICS["over_unlearning_p"]
ACC_R = METRICS["acc_r"]
ACC_F = METRICS["acc_f"]
ACC_TE = METRICS["acc_te"]
ASR = METRICS["asr"]

#: The classic metrics (method §6): the accuracies on D_r, D_f, D_te and the attack's success
#: rate, in table order.
CLASSIC_METRICS: tuple[Metric, ...] = (ACC_R, ACC_F, ACC_TE, ASR)


def metric_columns(name: str) -> tuple[str, ...]:
    """The flat columns of a ``ModelSummary`` field: a metric's columns, else ``(name,)``."""
    found = METRICS.get(name)
    return (name,) if found is None else found.columns


def interval_columns(name: str) -> tuple[str, str, str]:
    """A metric's value column and its interval's two columns (``otr``, ``otr_lo``, ``otr_hi``).

    Raises:
        KeyError: not a metric, or one without an interval.
    """
    metric = METRICS[name]
    if metric.lo is None or metric.hi is None:
        raise KeyError(f"{name} has no interval")
    return metric.key, metric.lo, metric.hi


def lo_column(name: str) -> str:
    """A metric's column of its interval's lower end (``otr_lo``).

    Raises:
        KeyError: not a metric, or one without an interval.
    """
    return interval_columns(name)[1]


def hi_column(name: str) -> str:
    """A metric's column of its interval's upper end (``otr_hi``).

    Raises:
        KeyError: not a metric, or one without an interval.
    """
    return interval_columns(name)[2]


def raw_column(name: str) -> str:
    """A gated metric's column of the value before the gate (``otr_raw``).

    Raises:
        KeyError: not a metric, or one without such a column.
    """
    column = METRICS[name].raw_column
    if column is None:
        raise KeyError(f"{name} keeps no value before the gate")
    return column
