"""Each model's verdict in words a non-expert can read, with the evidence it rests on.

:func:`explain_verdict` is the one place that turns a row of an evaluation's ``models`` table
into sentences: the verdict, the test it rests on with its p-value and interval, what the
calibrated test says, how the model compares with the retrained one, and what SDE cannot
certify. The dashboard (Explore, Compare, Report) and the HTML/PDF report all show its text.

Rows may come from older or newer evaluations: a missing column is treated as "not computed",
a headline number that is NaN/None is withheld as *inconclusive* (with the row's
``inconclusive_reason`` when it has one, method §12), and a fourth calibrated verdict,
*over-unlearned*, is counted when the row has ``n_over_unlearned``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import METRICS, Estimate
from sde_core.viz.formatting import (
    format_estimate,
    format_interval,
    format_number,
    format_percent,
)

__all__ = [
    "CANNOT_CERTIFY",
    "CAN_CERTIFY",
    "VERDICT_ICONS",
    "VERDICT_LABELS",
    "VERDICT_STYLES",
    "NullCheckReading",
    "VerdictExplanation",
    "VerdictSummary",
    "caveat_list",
    "estimate_text",
    "explain_verdict",
    "null_check_readings",
    "over_unlearning_meaning",
    "over_unlearning_text",
    "retrain_row",
    "summarize_verdict",
    "summary_order",
    "verdict_label",
    "verdict_sentence",
    "verdict_table",
]

#: The model-level verdicts of :func:`verdict_label`.
VERDICT_LABELS = (
    "conflicting evidence",
    "not forgotten",
    "consistent with forgetting",
    "over-unlearned",
    "mixed",
    "inconclusive",
)

#: How each verdict is shown (a Streamlit alert kind; the report maps it to its CSS classes):
#: conflicting evidence is a warning that dominates its page, never a success.
VERDICT_STYLES = {
    "conflicting evidence": "warning",
    "not forgotten": "error",
    "consistent with forgetting": "success",
    "over-unlearned": "warning",
    "mixed": "info",
    "inconclusive": "info",
}
#: Each verdict's icon (Material icon names, as Streamlit writes them).
VERDICT_ICONS = {
    "conflicting evidence": ":material/warning:",
    "not forgotten": ":material/memory:",
    "consistent with forgetting": ":material/check_circle:",
    "over-unlearned": ":material/warning:",
    "mixed": ":material/contrast:",
    "inconclusive": ":material/help:",
}

#: What an SDE verdict can establish, for the report's "What SDE can and cannot certify".
CAN_CERTIFY = (
    "That, at the evaluated layer and settings, random subsets of the forget set are treated "
    "by the model like its training data (a trace of training remains) or like data it never "
    "saw, with the share of subsets and a 95% interval.",
    "That this holds against the model's own references — retained training data and unseen "
    "test data — checked by the paper's test and by a calibrated subset-level test whose false "
    "alarms are measured on your models.",
    "Exactly what was evaluated: the report pins the checkpoints, the data, the forget set, "
    "the settings, the seeds and the software, and `python -m sde_core verify` recomputes it.",
)
#: What it cannot.
CANNOT_CERTIFY = (
    "That the forget set was erased: 'consistent with forgetting' means this test found no "
    "trace; other attacks, other layers or larger subsets might.",
    "How much information about individual records remains, or whether any single record can "
    "be recovered: SDE compares whole subsets, not records.",
    "Anything when the references do not separate training from unseen data: such results are "
    "inconclusive, not evidence of forgetting.",
    "Models, data or settings other than the ones pinned in the manifest.",
)

_NAN = float("nan")


def _value(row: Mapping[str, Any], key: str) -> Any:
    """``row[key]``, or None when the column is absent (older/newer result tables)."""
    return row.get(key)


def _number(row: Mapping[str, Any], key: str) -> float:
    value = _value(row, key)
    if value is None or isinstance(value, str):
        return _NAN
    try:
        return float(value)
    except (TypeError, ValueError):
        return _NAN


def _flag(row: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = _value(row, key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return bool(value)


def _reason(row: Mapping[str, Any], key: str = "inconclusive_reason") -> str | None:
    value = _value(row, key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _p(value: float) -> str:
    return format_number(value, digits=2)


def over_unlearning_meaning(role: str) -> str:
    """What an over-unlearned forget set means for a model of ``role`` (completes a sentence).

    A model that never saw the forget set (retrained, random) cannot have overshot an
    unlearning: for it the finding says the forget set differs from the unseen data.
    """
    if role in ("retrained", "random"):
        return (
            "this model never saw the forget set, so the forget set itself differs from the "
            "unseen reference data; other models' over-unlearning findings may reflect that too."
        )
    return (
        "a change in how the model answers, not proof that it forgot: it can still classify the "
        "forget set well, and over-unlearned subsets are not counted as forgotten (method §9)."
    )


def _estimate(row: Mapping[str, Any], key: str) -> Estimate:
    """The metric ``key`` of a ``models`` row (a missing or non-numeric column is NaN: rows
    may come from older or newer evaluations)."""
    m = METRICS[key]
    value, lo, hi, raw = (_number(row, c) if c else _NAN for c in (m.key, m.lo, m.hi, m.raw_column))
    return Estimate(value, lo, hi, raw)


def estimate_text(row: Mapping[str, Any], key: str) -> str:
    """The metric ``key`` of a ``models`` row as ``"0.62 [0.48, 0.77]"`` (``"62% [48%, 77%]"``
    for a metric shown in %; value and 95% interval over the draws, method §12), ``"withheld"``
    when the gate withholds it and ``"n/a"`` when the row lacks it."""
    e = _estimate(row, key)
    return format_estimate(
        e.value, e.lo, e.hi, percent=METRICS[key].unit == "%", reason=row.get("inconclusive_reason")
    )


def over_unlearning_text(row: Mapping[str, Any]) -> str:
    """The model-level over-unlearning test of a ``models`` row as ``"yes (p = 1.2e-4)"`` /
    ``"no (p = 0.31)"``, ``"withheld"`` when the gate withholds it, else ``"n/a"``."""
    p = _number(row, "over_unlearning_p")
    if math.isnan(p):
        return "withheld" if _reason(row) else "n/a"
    return f"{'yes' if _flag(row, 'over_unlearned') else 'no'} (p = {_p(p)})"


def verdict_label(row: Mapping[str, Any]) -> str:
    """Short verdict of the paper's rule for one ``models`` row.

    Returns:
        ``"conflicting evidence"`` (the row's ``evidence_conflict``, method §9: SDE says
        forgotten or over-unlearned while the model still classifies D_f significantly better
        than unseen data), ``"inconclusive"`` (invalid references, or the OTR withheld/not
        computed), ``"over-unlearned"`` (the model-level over-unlearning test, method §9: the
        model's outputs on the targets are significantly flatter — lower-spread — than on
        unseen data), ``"not forgotten"`` (OTR's 95% interval below 50%), ``"consistent with
        forgetting"`` (interval above 50%) or ``"mixed"``.
    """
    e = _estimate(row, "otr")
    otr, lo, hi = e.value, e.lo, e.hi
    if _reason(row, "evidence_conflict"):
        return "conflicting evidence"
    if not _flag(row, "references_valid") or math.isnan(otr) or _reason(row):
        return "inconclusive"
    if _flag(row, "over_unlearned"):
        return "over-unlearned"
    if math.isnan(lo) or math.isnan(hi):
        return "mixed"
    if hi < 0.5:
        return "not forgotten"
    if lo > 0.5:
        return "consistent with forgetting"
    return "mixed"


@dataclass(frozen=True)
class VerdictExplanation:
    """One model's verdict in words.

    Attributes:
        label: :func:`verdict_label`.
        evidence: the test the verdict rests on, with its p-value and 95% interval.
        calibrated: what the calibrated subset-level test found (method §9).
        comparison: how the model compares with the retrained model.
        limits: what this result cannot certify.
        provisional: what is still running ("" when the evaluation is complete).
        short: the verdict in one short sentence (shown first; the rest behind an expander).
        text: all of it, as one paragraph.
    """

    label: str
    evidence: str
    calibrated: str
    comparison: str
    limits: str
    provisional: str = ""
    short: str = ""

    @property
    def headline(self) -> str:
        """The verdict as a heading (``"Not forgotten"``; ``"Provisional (draw 4 of 5): not
        forgotten"`` while the evaluation runs)."""
        if self.provisional:
            return f"Provisional ({self.provisional}): {self.label}"
        return self.label[:1].upper() + self.label[1:]

    @property
    def style(self) -> str:
        """How a page shows it: :data:`VERDICT_STYLES` (``"info"`` while provisional)."""
        return "info" if self.provisional else VERDICT_STYLES[self.label]

    @property
    def body(self) -> str:
        """The paragraph after the headline: evidence, calibrated test, comparison, limits."""
        parts = (self.evidence, self.calibrated, self.comparison, self.limits)
        return " ".join(p for p in parts if p)

    @property
    def text(self) -> str:
        """The full paragraph: ``"<Headline>. <body>"``."""
        return f"{self.headline}. {self.body}"


def _evidence(row: Mapping[str, Any], targets: int, label: str) -> str:
    p_ref = _number(row, "reference_p")
    e = _estimate(row, "otr")
    otr, interval = e.value, format_interval(e.lo, e.hi)
    reason = _reason(row)
    if reason is not None:
        return (
            f"{reason[:1].upper()}{reason[1:].rstrip('.')}: the headline numbers are "
            f"withheld. (The paper's split-level reference test gives p = {_p(p_ref)}; "
            f"{_split_level(row)}.)"
        )
    if label == "inconclusive":
        if math.isnan(otr):
            return "This evaluation did not compute an out-of-training rate."
        return (
            f"The paper's reference test (one-sided Mann–Whitney U on the "
            f"split-half HSIC of training vs unseen data) does not separate them "
            f"(p = {_p(p_ref)}, not below α), so every decision of the paper's rule is "
            "inconclusive — try another layer, σ, a larger n or more splits."
        )
    k_out = round(otr * targets)
    k_in = targets - k_out
    fpr = _number(row, "null_split_fpr")
    level = (
        ""
        if math.isnan(fpr) or not _count(row, "null_pairs")
        else f", a test that declared a difference in {format_percent(fpr)} of no-difference "
        "checks here"
    )
    test = (
        f"Under the paper's test (split-half HSIC with the Jensen–Shannon rule; references "
        f"valid by the paper's U-test, p = {_p(p_ref)}{level})"
    )
    stats = f"(OTR {format_percent(otr)}, 95% interval over the draws {interval})"
    if label == "conflicting evidence":
        conflict = str(_reason(row, "evidence_conflict"))
        return f"{test}, {k_out} of {targets} subsets of the forget set look unseen {stats}. " + (
            conflict[:1].upper() + conflict[1:]
        )
    if label == "over-unlearned":
        share = estimate_text(row, "over_unlearned_rate")
        return (
            f"{test}, {k_out} of {targets} subsets of the forget set look unseen {stats}, and "
            f"the model-level over-unlearning test finds the model's outputs on them "
            f"significantly flatter (lower spread) than on data it never saw (p = "
            f"{_p(_number(row, 'over_unlearning_p'))}; share over-unlearned {share}): "
            + over_unlearning_meaning(str(_value(row, "role")))
        )
    if label == "not forgotten":
        return (
            f"{test}, {k_in} of {targets} subsets of the forget set still look "
            f"like training data {stats}: the model has NOT forgotten them."
        )
    if label == "consistent with forgetting":
        return (
            f"{test}, {k_out} of {targets} subsets of the forget set look like unseen data {stats}."
        )
    return (
        f"{test}, {k_out} of {targets} subsets of the forget set look like unseen data "
        f"and {k_in} like training data {stats}: partial forgetting or a weak signal."
    )


def _split_level(row: Mapping[str, Any]) -> str:
    """The paper's split-level test's false-alarm rate as the null check measured it."""
    fpr = _number(row, "null_split_fpr")
    pairs = _count(row, "null_pairs")
    if math.isnan(fpr) or not pairs:
        return "its false-alarm rate was not measured (no null check)"
    return (
        f"on {pairs} pairs of disjoint unseen subsets, where no difference exists, it declared "
        f"one in {format_percent(fpr)} (its measured level)"
    )


def _count(row: Mapping[str, Any], key: str) -> int | None:
    value = _number(row, key)
    return None if math.isnan(value) else int(value)


def _calibrated(row: Mapping[str, Any], targets: int, label: str) -> str:
    if _value(row, "panel_valid") is None:
        return ""
    panel_p = _number(row, "panel_p")
    if not _flag(row, "panel_valid"):
        return (
            "The calibrated test's reference panels do not separate training from unseen data "
            f"(panel U-test p = {_p(panel_p)}), so the calibrated test is inconclusive."
        )
    n_in = _count(row, "n_in_training") or 0
    n_out = _count(row, "n_out_of_training") or 0
    n_inc = _count(row, "n_inconclusive") or 0
    over = _count(row, "n_over_unlearned")
    over_text = "" if over is None else f", {over} over-unlearned"
    e = _estimate(row, "calibrated_otr")
    cal, cal_lo, cal_hi = e.value, e.lo, e.hi
    cal_text = "withheld" if math.isnan(cal) else format_percent(cal)
    if not math.isnan(cal) and not math.isnan(cal_lo):
        cal_text += f", 95% interval {format_interval(cal_lo, cal_hi)}"
    text = (
        "The calibrated test (whole subsets ranked against panels of reference subsets, panel "
        f"U-test p = {_p(panel_p)}) finds {n_out} of {targets} subsets unseen-like, {n_in} "
        f"training-like{over_text} and {n_inc} inconclusive (calibrated OTR {cal_text})."
    )
    if (label == "not forgotten" and n_out > n_in) or (
        label == "consistent with forgetting" and n_in > n_out
    ):
        text += " The two tests disagree: treat this result with caution."
    if over:
        text += (
            " Over-unlearned subsets get flatter, lower-spread outputs than data the model never "
            "saw; they are not counted as forgotten (the calibrated OTR counts out-of-training "
            "verdicts only)."
        )
    return text


def _comparison(
    row: Mapping[str, Any], retrain: Mapping[str, Any] | None, draws: pd.DataFrame | None
) -> str:
    if _value(row, "role") == "retrained":
        return "This retrained model is the gold standard the other models are compared with."
    if _value(row, "role") == "random":
        return (
            "This randomly initialised model is the negative control: it has seen no data, so a "
            "'remembered' verdict here is a false alarm or a difference in the data themselves, "
            "not a trace of training."
        )
    if retrain is None:
        return (
            "There is no retrained model to compare with: add one (role 'retrained'), the gold "
            "standard of unlearning."
        )
    name = str(_value(retrain, "name"))
    who = "The retrained model" if name == "retrained" else f"The retrained model {name}"
    if verdict_label(retrain) == "inconclusive":
        return f"{who} gives no reference OTR (its result is inconclusive)."
    re = _estimate(retrain, "otr")
    re_otr, re_lo, re_hi = re.value, re.lo, re.hi
    ref = (
        f"{who} (the gold standard) has OTR {format_percent(re_otr)} "
        f"(95% interval {format_interval(re_lo, re_hi)})"
    )
    if verdict_label(row) == "inconclusive":
        return f"{ref}."
    where = _paired_where(row, retrain, draws)
    return f"{ref}: {where}.{_behaviour_vs_retrain(row, retrain)}"


def _points(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.0f}".replace("-", "−")


def _paired_where(
    row: Mapping[str, Any], retrain: Mapping[str, Any], draws: pd.DataFrame | None
) -> str:
    """Where the model stands against retraining by the paired test of method §15 (never by
    overlapping intervals): "within the uncertainty of it" only when the paired interval of
    ``model − retrained`` includes 0."""
    from sde_core.pipeline.evaluation.comparisons import compare_models

    name, ref = str(_value(row, "name")), str(_value(retrain, "name"))
    if draws is None or draws.empty:
        return (
            "the paired difference (method §15, on the Compare page) says whether the two "
            "differ; overlapping intervals alone do not"
        )
    both = pd.DataFrame([dict(row), dict(retrain)])
    d = compare_models(both, draws, name, ref, "otr").paired
    if d is None:
        return "the paired difference of their OTRs is withheld"
    shown = f"paired difference {_points(d.value)} points [{_points(d.lo)}, {_points(d.hi)}]"
    if d.lo <= 0 <= d.hi:
        return f"this model is within the uncertainty of it ({shown})"
    if d.hi < 0:
        return f"this model's OTR is lower, so it forgets less than retraining would ({shown})"
    return f"this model's OTR is higher than retraining's ({shown})"


def _behaviour_vs_retrain(row: Mapping[str, Any], retrain: Mapping[str, Any]) -> str:
    """The forget-set accuracy beside the retrained model's (method §9's behaviour check)."""
    acc_f, re_acc_f = _number(row, "acc_f"), _number(retrain, "acc_f")
    if math.isnan(acc_f) or math.isnan(re_acc_f):
        return ""
    return (
        f" On the forget set this model is right {format_number(acc_f)}% of the time, the "
        f"retrained model {format_number(re_acc_f)}% (unseen test data: "
        f"{format_number(_number(row, 'acc_te'))}% and "
        f"{format_number(_number(retrain, 'acc_te'))}%)."
    )


_LIMITS = {
    "not forgotten": (
        "What this cannot certify: how much of the forget set could be recovered — a trace is "
        "evidence of memory, not a measure of it."
    ),
    "consistent with forgetting": (
        "What this cannot certify: that the forget set was erased — this test found no trace, "
        "other attacks, layers or larger subsets might."
    ),
    "over-unlearned": (
        "What this cannot certify: forgetting — flatter outputs on the forget set say the model "
        "answers differently there, not that it no longer knows it; and the forget set stands "
        "out from unseen data, so an attacker may still tell it apart."
    ),
    "conflicting evidence": (
        "What this cannot certify: forgetting — the model's own behaviour on the forget set "
        "contradicts the SDE verdict; report both and do not treat the model as unlearned."
    ),
    "mixed": "What this cannot certify: neither forgetting nor memory is established here.",
    "inconclusive": (
        "What this cannot certify: anything about forgetting at these settings — inconclusive "
        "is not evidence of forgetting."
    ),
}


def explain_verdict(
    row: Mapping[str, Any],
    targets: int,
    retrain: Mapping[str, Any] | None = None,
    *,
    compare: bool = True,
    draws: pd.DataFrame | None = None,
    provisional: str = "",
    note: str = "",
) -> VerdictExplanation:
    """One model's verdict in words, with the evidence it rests on and its limits.

    Args:
        row: the model's row of the ``models`` table (a dict or a pandas Series).
        targets: T, the number of target subsets drawn (``result.settings.targets``).
        retrain: the retrained model's row, or None when the workspace has none.
        compare: include the comparison with the retrained model (False where the retrained
            model was not evaluated alongside, e.g. a one-model view).
        draws: the evaluation's ``draws`` table, for the paired difference to the retrained
            model (method §15); without it the comparison names no direction.
        provisional: what is still running ("draw 4 of 5"), when the evaluation is not
            complete: the headline then says the verdict is provisional.
        note: the model family's sentence every verdict carries (its ``verdict_note``, e.g.
            that SDE disagrees with behaviour on language models), added to the short
            sentence and the limits.

    Raises:
        SettingsError: ``targets`` is not a positive integer.
    """
    if isinstance(targets, bool) or not isinstance(targets, (int, np.integer)) or targets < 1:
        raise SettingsError(f"targets must be a positive number of draws; got {targets!r}")
    label = verdict_label(row)
    return VerdictExplanation(
        label=label,
        evidence=_evidence(row, int(targets), label),
        calibrated=_calibrated(row, int(targets), label),
        comparison=_comparison(row, retrain, draws) if compare else "",
        limits=_with_note(_LIMITS[label], note),
        provisional=provisional,
        short=_with_note(_sentence(row, int(targets), label), note),
    )


def _with_note(text: str, note: str) -> str:
    """``text`` followed by a family's verdict note (when there is one)."""
    return f"{text} {note.strip()}" if note.strip() else text


@dataclass(frozen=True)
class NullCheckReading:
    """One test's false-positive rate on the null check's disjoint unseen subsets (method §12).

    Attributes:
        test: ``"paper's split-level U-test"`` or ``"calibrated test"``.
        rate: the measured false-positive rate. trials: pairs (split-level test) or subsets
            (calibrated test) it was measured on. alpha: the test's nominal level.
        p_value: one-sided exact binomial p of ``rate·trials`` false positives at level
            ``alpha`` (small: the rate is significantly above the nominal level).
        passed: False when ``p_value < 0.05`` (the test fails its null check), True otherwise;
            None when the check did not run.
        text: one plain sentence.
    """

    test: str
    rate: float
    trials: int
    alpha: float
    p_value: float
    passed: bool | None
    text: str


def _reading(test: str, rate: float, trials: int, alpha: float) -> NullCheckReading:
    from scipy.stats import binomtest

    if math.isnan(rate) or trials < 1:
        text = f"The {test} has no null check at these settings (too few unseen rows)."
        return NullCheckReading(test, rate, trials, alpha, _NAN, None, text)
    hits = round(rate * trials)
    p = float(binomtest(hits, trials, alpha, alternative="greater").pvalue)
    passed = p >= 0.05
    level = format_percent(alpha, decimals=0 if alpha >= 0.01 else 1)
    verdict = (
        "passes: its false alarms are consistent with its nominal level"
        if passed
        else "FAILS: its false alarms are significantly above its nominal level"
    )
    text = (
        f"The {test} declared a difference in {hits} of {trials} ({format_percent(rate)}) "
        f"where none exists, at α = {level} — it {verdict} (binomial p = {_p(p)})."
    )
    return NullCheckReading(test, rate, trials, alpha, p, passed, text)


def null_check_readings(
    row: Mapping[str, Any], alpha: float, alpha_calibrated: float
) -> list[NullCheckReading]:
    """Both tests' null-check rates of one ``models`` row, each with a pass/fail.

    Args:
        row: the model's row (``null_pairs``, ``null_split_fpr``, ``null_calibrated_fpr``).
        alpha: the split-level test's level (settings ``alpha``).
        alpha_calibrated: the calibrated test's level (settings ``alpha_calibrated``).

    Returns:
        ``[split-level reading, calibrated reading, training reading]``: the split-level test
        is measured on the ``null_pairs`` pairs, the calibrated one on both subsets of every
        pair, and — when the row has ``null_train_subsets`` — the calibrated test's false
        "out-of-training" calls on the controlled training subsets.
    """
    pairs = _count(row, "null_pairs") or 0
    readings = [
        _reading("paper's split-level U-test", _number(row, "null_split_fpr"), pairs, alpha),
        _reading(
            "calibrated test", _number(row, "null_calibrated_fpr"), 2 * pairs, alpha_calibrated
        ),
    ]
    train = _count(row, "null_train_subsets")
    if train:
        readings.append(
            _reading(
                "calibrated test on training subsets (false out-of-training)",
                _number(row, "null_out_of_training_fpr"),
                train,
                alpha_calibrated,
            )
        )
    return readings


def verdict_sentence(
    row: Mapping[str, Any],
    targets: int,
    retrain: Mapping[str, Any] | None = None,
    *,
    draws: pd.DataFrame | None = None,
) -> str:
    """:func:`explain_verdict`'s full paragraph."""
    return explain_verdict(row, targets, retrain, draws=draws).text


def retrain_row(models: pd.DataFrame) -> dict[str, Any] | None:
    """The first retrained model's row of a ``models`` table, or None."""
    if "role" not in models:
        return None
    found = models[models["role"] == "retrained"]
    return None if found.empty else {str(k): v for k, v in found.iloc[0].items()}


def verdict_table(result: Any) -> pd.DataFrame:
    """One row per model: ``name``, ``role``, ``method``, ``verdict`` and ``explanation``."""
    retrain = retrain_row(result.models)
    rows = []
    for row in result.models.to_dict("records"):
        explained = explain_verdict(
            row, result.settings.targets, retrain, draws=getattr(result, "draws", None)
        )
        rows.append(
            {
                "name": row["name"],
                "role": row.get("role", ""),
                "method": row.get("method", ""),
                "verdict": explained.label,
                "explanation": explained.text,
            }
        )
    return pd.DataFrame(rows, columns=["name", "role", "method", "verdict", "explanation"])


# --------------------------------------------------------------------------- the short answer

#: Score–spread correlation from which "the score mostly measures spread" is the caveat.
SPREAD_CAVEAT_CORR = 0.9
#: The order of the report's answers: the audited (unlearned) models first, then the yardsticks.
_ROLE_ORDER = ("unlearned", "retrained", "original", "random")


@dataclass(frozen=True)
class VerdictSummary:
    """One model's answer in four lines, for the first page of a report.

    Attributes:
        name, role: the model.
        label: :func:`verdict_label`.
        sentence: the verdict as one sentence a non-expert can read.
        interval: the OTR with its 95% interval over the draws (``"withheld"`` with the gate).
        cross_check: what the second line of evidence says: the row's ``evidence_conflict``
            reason when it has one, else whether the calibrated test agrees.
        conflict: True when the cross-check contradicts the verdict.
        caveat: the one caveat that matters most for this verdict.
    """

    name: str
    role: str
    label: str
    sentence: str
    interval: str
    cross_check: str
    conflict: bool
    caveat: str


def _sentence(row: Mapping[str, Any], targets: int, label: str) -> str:
    name, role = str(_value(row, "name")), str(_value(row, "role") or "")
    otr = _number(row, "otr")
    k_out = 0 if math.isnan(otr) else round(otr * targets)
    k_in = targets - k_out
    if label == "inconclusive":
        why = _reason(row) or (
            "its references do not separate training from unseen data at these settings"
        )
        return f"No verdict for {name}: {why.rstrip('.')}."
    if label == "conflicting evidence":
        return (
            f"{name}: conflicting evidence — the dependence test and the model's own behaviour "
            "on the forget set disagree; do not treat it as unlearned."
        )
    if role == "retrained":
        return (
            f"{name} is the retrained yardstick (never trained on the forget set): {k_out} of "
            f"{targets} forget-set subsets look unseen to it — the rate a perfect unlearning "
            "should match."
        )
    if role == "random":
        return (
            f"{name} is the negative control (it saw no data): its verdict is "
            f"'{label}', which can only reflect differences in the data themselves."
        )
    if label == "not forgotten":
        return (
            f"{name} has NOT forgotten the forget set: {k_in} of {targets} subsets still look "
            "like its training data."
        )
    if label == "consistent with forgetting":
        return (
            f"{name} shows no trace of the forget set: {k_out} of {targets} subsets look like "
            "data it never saw."
        )
    if label == "over-unlearned":
        return (
            f"{name} over-unlearned: the forget set looks LESS familiar to it than data it "
            "never saw, which itself gives the forget set away."
        )
    return (
        f"{name} forgot partly or the signal is weak: {k_out} of {targets} subsets look unseen "
        f"and {k_in} like training data."
    )


def _interval(row: Mapping[str, Any]) -> str:
    e = _estimate(row, "otr")
    if math.isnan(e.value):
        return "OTR withheld" if _reason(row) else "OTR not computed"
    return f"OTR {format_percent(e.value)} (95% interval {format_interval(e.lo, e.hi)})"


def _cross_check(row: Mapping[str, Any], targets: int, label: str) -> tuple[str, bool]:
    conflict = _value(row, "evidence_conflict")
    if isinstance(conflict, str) and conflict.strip():
        return f"Evidence conflict: {conflict.strip().rstrip('.')}.", True
    if _value(row, "panel_valid") is None:
        return "No calibrated cross-check in this evaluation.", False
    if not _flag(row, "panel_valid"):
        return "Calibrated cross-check: inconclusive (its reference panels do not separate).", False
    e = _estimate(row, "calibrated_otr")
    cal, lo, hi = e.value, e.lo, e.hi
    if math.isnan(cal):
        return "Calibrated cross-check: withheld with the verdict.", False
    shown = format_percent(cal)
    if not math.isnan(lo):
        shown += f" (95% interval {format_interval(lo, hi)})"
    n_in = _count(row, "n_in_training") or 0
    n_out = _count(row, "n_out_of_training") or 0
    disagrees = (label == "not forgotten" and n_out > n_in) or (
        label == "consistent with forgetting" and n_in > n_out
    )
    if disagrees:
        return f"Calibrated cross-check DISAGREES: calibrated OTR {shown}.", True
    agrees = label in ("not forgotten", "consistent with forgetting", "over-unlearned")
    verb = "agrees" if agrees else "reads"
    return f"Calibrated cross-check {verb}: calibrated OTR {shown}.", False


def caveat_list(
    row: Mapping[str, Any], label: str, alpha: float, alpha_calibrated: float
) -> list[tuple[str, str]]:
    """Every caveat that applies to a verdict as ``(kind, text)``, the one that matters most
    first; kind is ``"spread"``, ``"null check"`` or ``"verdict"`` (the answer page states a
    kind every audited model shares once, and each model's own caveat beside it)."""
    role = _value(row, "role")
    if label == "inconclusive":
        return [
            ("verdict", "Inconclusive is not evidence of forgetting: try another layer, σ or a "
             "larger n.")
        ]  # fmt: skip
    if role == "random":
        return [
            ("verdict", "A negative control that looks like it 'remembers' means the forget "
             "set differs from the unseen data, not memory.")
        ]  # fmt: skip
    out = []
    corr = _number(row, "score_spread_corr")
    if label != "consistent with forgetting" and corr >= SPREAD_CAVEAT_CORR:
        out.append((
            "spread",
            f"The score tracks the spread of the outputs (r = {format_number(corr, digits=2)}): "
            "the verdict means 'spread like training data', a trace of training rather than "
            "proof of a deeper dependence.",
        ))  # fmt: skip
    split = null_check_readings(row, alpha, alpha_calibrated)[0]
    if split.passed is False:
        out.append((
            "null check",
            f"The paper's reference test declared a difference in {format_percent(split.rate)} "
            f"of no-difference checks at nominal {format_percent(alpha)}: its 'references "
            "valid' is weaker evidence than its p-value says.",
        ))  # fmt: skip
    if label == "conflicting evidence":
        text = (
            "SDE and what the model still does disagree: no verdict is certified; trust the "
            "behaviour (accuracy, loss, attack on D_f against unseen data) until they agree."
        )
    elif label == "over-unlearned":
        text = "An over-unlearned forget set stands out from unseen data: an attacker may see it."
    elif label == "not forgotten":
        text = (
            "A trace is evidence of memory, not a measure of it: how much of the forget set "
            "could be recovered is not established."
        )
    elif label == "consistent with forgetting":
        text = "No trace found is not proof of erasure: other attacks, layers or larger n might."
    else:
        text = "Neither forgetting nor memory is established at these settings."
    return [*out, ("verdict", text)]


def _caveat(row: Mapping[str, Any], label: str, alpha: float, alpha_calibrated: float) -> str:
    return caveat_list(row, label, alpha, alpha_calibrated)[0][1]


def summarize_verdict(
    row: Mapping[str, Any],
    targets: int,
    *,
    alpha: float = 0.01,
    alpha_calibrated: float = 0.05,
    note: str = "",
) -> VerdictSummary:
    """One model's answer: the verdict in a sentence, its interval, the cross-check, the caveat.

    Args:
        row: the model's row of the ``models`` table.
        targets: T (``result.settings.targets``).
        alpha, alpha_calibrated: the evaluation's levels (for the null-check caveat).
        note: the model family's verdict note (see :func:`explain_verdict`): added to the
            sentence, and the caveat that matters most.
    """
    label = verdict_label(row)
    cross, conflict = _cross_check(row, int(targets), label)
    return VerdictSummary(
        name=str(_value(row, "name")),
        role=str(_value(row, "role") or ""),
        label=label,
        sentence=_with_note(_sentence(row, int(targets), label), note),
        interval=_interval(row),
        cross_check=cross,
        conflict=conflict,
        caveat=note.strip() or _caveat(row, label, alpha, alpha_calibrated),
    )


def summary_order(models: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a ``models`` table in the order a report answers: unlearned models first,
    then the retrained, original and random ones (each group in table order)."""
    rows = [{str(k): v for k, v in r.items()} for r in models.to_dict("records")]

    def rank(row: dict[str, Any]) -> int:
        role = row.get("role")
        return _ROLE_ORDER.index(role) if role in _ROLE_ORDER else len(_ROLE_ORDER)

    return sorted(rows, key=rank)
