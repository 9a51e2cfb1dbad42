""":func:`explain_verdict` is the one place that turns a row of an evaluation's ``models`` table
into sentences: the verdict, the test it rests on with its p-value and interval, what the
calibrated test says, how the model compares with the retrained one, and what SDE cannot
certify. The dashboard (Explore, Compare, Report) and the HTML/PDF report all show its text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_TE,
    CALIBRATED_OTR,
    OTR,
    OVER_UNLEARNED_RATE,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
)
from sde_core.viz.formatting import (
    format_interval,
    format_number,
    format_percent,
)
from sde_core.viz.verdicts.labels import (
    VERDICT_STYLES,
    _count,
    _estimate,
    _flag,
    _number,
    _p,
    _reason,
    _value,
    estimate_text,
    over_unlearning_meaning,
    verdict_label,
)
from sde_core.viz.verdicts.summary import _sentence, with_note

__all__ = [
    "VerdictExplanation",
    "explain_verdict",
    "retrain_row",
    "verdict_sentence",
    "verdict_table",
]


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
    p_ref = _number(row, REFERENCE_P.key)
    e = _estimate(row, OTR.key)
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
        share = estimate_text(row, OVER_UNLEARNED_RATE.key)
        return (
            f"{test}, {k_out} of {targets} subsets of the forget set look unseen {stats}, and "
            f"the model-level over-unlearning test finds the model's outputs on them "
            f"significantly flatter (lower spread) than on data it never saw (p = "
            f"{_p(_number(row, OVER_UNLEARNING_P.key))}; share over-unlearned {share}): "
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


def _calibrated(row: Mapping[str, Any], targets: int, label: str) -> str:
    if _value(row, "panel_valid") is None:
        return ""
    panel_p = _number(row, PANEL_P.key)
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
    e = _estimate(row, CALIBRATED_OTR.key)
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
    re = _estimate(retrain, OTR.key)
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
    d = compare_models(both, draws, name, ref, OTR.key).paired
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
    acc_f, re_acc_f = _number(row, ACC_F.key), _number(retrain, ACC_F.key)
    if math.isnan(acc_f) or math.isnan(re_acc_f):
        return ""
    return (
        f" On the forget set this model is right {format_number(acc_f)}% of the time, the "
        f"retrained model {format_number(re_acc_f)}% (unseen test data: "
        f"{format_number(_number(row, ACC_TE.key))}% and "
        f"{format_number(_number(retrain, ACC_TE.key))}%)."
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
        limits=with_note(_LIMITS[label], note),
        provisional=provisional,
        short=with_note(_sentence(row, int(targets), label), note),
    )


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
