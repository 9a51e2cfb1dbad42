"""Each model's answer in a few lines (:func:`summarize_verdict`) and the caveats that qualify it,
for the first page of a report and the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR
from sde_core.viz.formatting import (
    format_interval,
    format_number,
    format_percent,
)
from sde_core.viz.verdicts.labels import (
    _count,
    _estimate,
    _flag,
    _number,
    _reason,
    _value,
    verdict_label,
)
from sde_core.viz.verdicts.null_check import null_check_readings

__all__ = ["VerdictSummary", "caveat_list", "summarize_verdict", "summary_order", "with_note"]


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
    if label == _reason(row, "class_wise_verdict") and _reason(row, "class_wise_sentence"):
        return str(_reason(row, "class_wise_sentence"))  # method §16's class-matched test
    otr = _number(row, OTR.key)
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
    e = _estimate(row, OTR.key)
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
    e = _estimate(row, CALIBRATED_OTR.key)
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
        note: the model family's verdict note (see
            :func:`~sde_core.viz.verdicts.explanation.explain_verdict`): added to the
            sentence, and the caveat that matters most.
    """
    label = verdict_label(row)
    cross, conflict = _cross_check(row, int(targets), label)
    return VerdictSummary(
        name=str(_value(row, "name")),
        role=str(_value(row, "role") or ""),
        label=label,
        sentence=with_note(_sentence(row, int(targets), label), note),
        interval=_interval(row),
        cross_check=cross,
        conflict=conflict,
        caveat=note.strip() or _caveat(row, label, alpha, alpha_calibrated),
    )


def with_note(text: str, note: str) -> str:
    """``text`` followed by a family's verdict note (when there is one)."""
    return f"{text} {note.strip()}" if note.strip() else text


def summary_order(models: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a ``models`` table in the order a report answers: unlearned models first,
    then the retrained, original and random ones (each group in table order)."""
    rows = [{str(k): v for k, v in r.items()} for r in models.to_dict("records")]

    def rank(row: dict[str, Any]) -> int:
        role = row.get("role")
        return _ROLE_ORDER.index(role) if role in _ROLE_ORDER else len(_ROLE_ORDER)

    return sorted(rows, key=rank)
