"""The verdict words (:func:`verdict_label`), their styles and icons, what SDE can and cannot
certify, and how a row's estimates read.

Rows may come from older or newer evaluations: a missing column is treated as "not computed",
a headline number that is NaN/None is withheld as *inconclusive* (with the row's
``inconclusive_reason`` when it has one, method §12), and a fourth calibrated verdict,
*over-unlearned*, is counted when the row has ``n_over_unlearned``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sde_core.pipeline.evaluation.metric_table import METRICS, OTR, OVER_UNLEARNING_P, Estimate
from sde_core.viz.formatting import (
    format_estimate,
    format_number,
)

__all__ = [
    "CANNOT_CERTIFY",
    "CAN_CERTIFY",
    "VERDICT_ICONS",
    "VERDICT_LABELS",
    "VERDICT_STYLES",
    "estimate_text",
    "over_unlearning_meaning",
    "over_unlearning_text",
    "verdict_label",
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
    p = _number(row, OVER_UNLEARNING_P.key)
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
    e = _estimate(row, OTR.key)
    otr, lo, hi = e.value, e.lo, e.hi
    if _reason(row, "evidence_conflict"):
        return "conflicting evidence"
    if _reason(row, "class_wise_verdict"):  # class-wise forgetting: method §16's verdict
        return str(_reason(row, "class_wise_verdict"))
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


def _count(row: Mapping[str, Any], key: str) -> int | None:
    value = _number(row, key)
    return None if math.isnan(value) else int(value)
