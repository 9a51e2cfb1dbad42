"""The workspace's answer: every audited model judged by the workspace's criterion, one line
each, for the dashboard's landing page and the report's first page.

:func:`workspace_answer` turns an evaluation (its ``models`` and ``draws`` tables) and the
workspace's :class:`~sde_core.pipeline.criterion.Criterion` into one :class:`AnswerLine` per
unlearned model: a traffic-light word (:data:`ANSWER_LABELS`), one short sentence, the
interval, the paired differences to the retrained and the original model (method §15, the
paired test — never overlapping intervals), the one caveat that applies and the evidence
behind it (the paper's rule with its measured level). The sentences come from here and from
:mod:`sde_core.viz.verdicts` only, so the page, the report and the CLI say the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pandas as pd

from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.behaviour import memory_evidence, row_family
from sde_core.pipeline.evaluation.comparisons import (
    COMPARED_METRICS,
    Comparison,
    compare_models,
    first_with_role,
)
from sde_core.pipeline.evaluation.metric_table import METRICS
from sde_core.viz.behaviour_text import behaviour_text
from sde_core.viz.formatting import format_percent
from sde_core.viz.verdicts.labels import estimate_text, verdict_label
from sde_core.viz.verdicts.null_check import null_check_readings
from sde_core.viz.verdicts.summary import caveat_list, summarize_verdict

__all__ = [
    "ANSWER_COLOURS",
    "ANSWER_LABELS",
    "Answer",
    "AnswerLine",
    "Scope",
    "answer_counts",
    "difference_text",
    "draws_text",
    "judge",
    "make_scope",
    "paired_table",
    "workspace_answer",
]

#: The answer's words, in the order of a traffic light's severity.
ANSWER_LABELS = (
    "conflicting evidence",
    "not forgotten",
    "over-unlearned",
    "undecided",
    "forgotten",
)
#: A colour name Streamlit's badges and the report's CSS both know.
Colour = Literal["green", "red", "orange", "gray"]
#: Each answer's colour.
ANSWER_COLOURS: dict[str, Colour] = {
    "forgotten": "green",
    "not forgotten": "red",
    "over-unlearned": "red",
    "conflicting evidence": "orange",
    "undecided": "gray",
}


@dataclass(frozen=True)
class Scope:
    """What the answer covers, for its scope box.

    Attributes:
        data: the dataset in words. forget_size: |D_f|. layer, sigma, subset_size (n),
        design, seed: the settings. draws: the reference draws B the models ran, in words
        (under the precision design each model runs its own number). models: how many were
        evaluated.
    """

    data: str
    forget_size: int | None
    layer: str
    sigma: str
    subset_size: int
    draws: str
    design: str
    seed: int
    models: int

    def rows(self) -> list[tuple[str, str]]:
        """``(label, value)`` pairs, in reading order."""
        return [
            ("Data", self.data),
            ("Forget set", "unknown" if self.forget_size is None else f"{self.forget_size} rows"),
            ("Layer", self.layer),
            ("Kernel bandwidth σ", self.sigma),
            ("Subset size n", str(self.subset_size)),
            ("Reference draws B", self.draws),
            ("Design", self.design),
            ("Seed", str(self.seed)),
            ("Models evaluated", str(self.models)),
        ]


def draws_text(settings: Any, used: Sequence[Any] = ()) -> str:
    """The reference draws B in words: what the models ran (``used``, one count per model;
    ``"10–51 per model"``), or, before any ran, what the design asks for."""
    counts = sorted({int(b) for b in used if b is not None and b == b})
    if counts:
        span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        return f"{span} per model"
    if settings.precision > 0:
        return f"{settings.pilot_draws} to {settings.max_draws} per model (the design decides)"
    return str(settings.draws)


def make_scope(
    settings: Any, data: str, forget_size: int | None, models: int, draws: Sequence[Any] = ()
) -> Scope:
    """The :class:`Scope` of an answer at ``settings`` (an ``EvalSettings``); ``draws``: the
    number of reference draws each model ran (the ``models`` table's ``draws``)."""
    if settings.precision > 0:
        design = (
            f"precision target ±{settings.precision:g} (pilot {settings.pilot_draws} draws, at "
            f"most {settings.max_draws}; method §15)"
        )
    else:
        design = f"fixed: B = {settings.draws} reference draws, T = {settings.targets} targets each"
    return Scope(
        data=data,
        forget_size=forget_size,
        layer=str(settings.layer),
        sigma=str(settings.sigma),
        subset_size=int(settings.subset_size),
        draws=draws_text(settings, draws),
        design=design,
        seed=int(settings.seed),
        models=models,
    )


@dataclass(frozen=True)
class AnswerLine:
    """One audited model's answer.

    Attributes:
        name, method: the model.
        label: one of :data:`ANSWER_LABELS`. colour: :data:`ANSWER_COLOURS` of it.
        sentence: one short sentence.
        interval: the criterion's rate with its 95% interval over the draws.
        vs_retrained, vs_original: the paired differences (percentage points) in words.
        caveat: the one caveat of its own ("" when only the answer's shared ones apply).
        evidence: the longer evidence (the paper's rule with its measured level, the
            cross-check), for an expander.
        within_retraining: True only when the paired difference to the retrained model has
            an interval that includes 0 (the only case the phrase "within the uncertainty of
            retraining" may be used).
    """

    name: str
    method: str
    label: str
    colour: Colour
    sentence: str
    interval: str
    vs_retrained: str
    vs_original: str
    caveat: str
    evidence: tuple[str, ...]
    within_retraining: bool


def difference_text(comparison: Comparison | None, what: str) -> str:
    """A paired difference in percentage points: ``"−45 points [−77, −13] vs retrained
    (paired, 5 draws)"``; why not when it is withheld."""
    if comparison is None:
        return f"no {what} model"
    d = comparison.paired
    if d is None:  # the reason names the metric by its display name, not its column
        reason = comparison.reason.replace(comparison.metric, METRICS[comparison.metric].label)
        return f"vs {what}: not compared ({reason})"

    def pts(x: float) -> str:
        return "n/a" if not math.isfinite(x) else f"{100 * x:+.0f}".replace("-", "−")

    return f"{pts(d.value)} points [{pts(d.lo)}, {pts(d.hi)}] vs {what} (paired, {d.draws} draws)"


def _reason(row: Mapping[str, Any]) -> str:
    for key in ("inconclusive_reason",):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip().rstrip(".")
    if not bool(row.get("references_valid")):
        return (
            "the paper's reference test does not separate training from unseen data at this "
            "layer and σ, so no verdict is possible here"
        )
    return "its rate is not available"


def judge(
    row: Mapping[str, Any],
    criterion: Criterion,
    vs_retrained: Comparison | None,
    vs_original: Comparison | None = None,
) -> tuple[str, str]:
    """The criterion's word for one audited model and its sentence.

    Closeness to the retrained model counts as forgotten only where it means something: a
    model whose paired interval also lies inside the margin around the *original* is
    undecided (the test cannot tell the two references apart on this workspace), and one whose
    behaviour still fits D_f better than unseen data (:func:`memory_evidence`, with
    ``criterion.behaviour``) is conflicting evidence — never drawn as forgotten.

    Args:
        row: the model's ``models`` row.
        criterion: the workspace's criterion.
        vs_retrained: the paired comparison ``model − retrained`` of ``criterion.metric``
            (None: the workspace has no retrained model).
        vs_original: the paired comparison ``model − original`` (None: not known).
    """
    name = str(row.get("name"))
    conflict = row.get("evidence_conflict")
    if criterion.behaviour and isinstance(conflict, str) and conflict.strip():
        return "conflicting evidence", (
            f"{name}: conflicting evidence — the dependence test and the model's own behaviour "
            "on the forget set disagree; do not treat it as unlearned."
        )
    value = row.get(criterion.metric)
    if verdict_label(row) == "inconclusive" or value is None or not math.isfinite(float(value)):
        return "undecided", f"{name} is undecided: {_reason(row)}."
    if vs_retrained is None:
        return "undecided", (
            f"{name} is undecided: the criterion compares with a retrained model and this "
            f"workspace has none (the paper's rule alone reads '{verdict_label(row)}')."
        )
    d = vs_retrained.paired
    if d is None:
        reason = vs_retrained.reason.replace(criterion.metric, criterion.label)
        return "undecided", f"{name} is undecided: {reason}."
    m, what = criterion.margin, criterion.label
    band = f"±{100 * m:.0f}-point margin"
    gap = f"{abs(100 * d.value):.0f} points {'below' if d.value < 0 else 'above'}"
    if -m <= d.lo and d.hi <= m:
        memory = memory_evidence(row, row_family(row)) if criterion.behaviour else ""
        o = vs_original.paired if vs_original is not None else None
        if o is not None and -m <= o.lo and o.hi <= m:
            still = f" Its behaviour says it still remembers: {memory}." if memory else ""
            return "undecided", (
                f"{name} is undecided: its {what} is within {m:g} of the retrained model's and "
                f"also of the original's, so on this workspace the test cannot tell forgetting "
                f"from remembering (the retrained and the original model read alike).{still}"
            )
        if memory:
            return "conflicting evidence", (
                f"{name}: conflicting evidence — its {what} is within {m:g} of the retrained "
                f"model's, but the model still fits D_f better than unseen data ({memory}); do "
                "not treat it as unlearned."
            )
        return "forgotten", (
            f"{name} counts as forgotten: its {what} is within {m:g} of the retrained "
            f"model's (the paired interval lies inside the {band})."
        )
    if d.hi < -m:
        return "not forgotten", (
            f"{name} is not forgotten: its {what} is {gap} the retrained model's, beyond the "
            f"{band}."
        )
    if d.lo > m:
        return "over-unlearned", (
            f"{name} went past retraining: its {what} is {gap} the retrained model's, beyond "
            f"the {band} — over-unlearning, which itself can give the forget set away."
        )
    return "undecided", (
        f"{name} is undecided: its {what} is {gap} the retrained model's, but the paired "
        f"interval reaches across the {band}; more draws would decide."
    )


def _evidence(row: Mapping[str, Any], targets: int, alpha: float, alpha_cal: float) -> list[str]:
    summary = summarize_verdict(row, targets, alpha=alpha, alpha_calibrated=alpha_cal)
    split = null_check_readings(row, alpha, alpha_cal)[0]
    level = (
        "its level was not measured"
        if split.passed is None
        else f"its measured false-alarm rate on no-difference checks is "
        f"{format_percent(split.rate)} at nominal {format_percent(alpha)}"
        + ("" if split.passed else " — it fails its null check")
    )
    out = [
        f"The paper's rule (split-half HSIC with the Jensen–Shannon decision) reads "
        f"'{summary.label}': {summary.interval}; the paper's reference U-test behind it — "
        f"{level}.",
        summary.cross_check,
        f"The behaviour check (method §9): {behaviour_text(row)}.",
    ]
    conflict = row.get("evidence_conflict")
    if isinstance(conflict, str) and conflict.strip():
        out.append(conflict.strip())
    return out


@dataclass(frozen=True)
class Answer:
    """The workspace's answer.

    Attributes:
        lines: one :class:`AnswerLine` per audited model, in table order.
        shared_caveats: the caveats every audited model shares, stated once (each line's
            ``caveat`` is then its own, or "" when it has none besides the shared ones).
    """

    lines: tuple[AnswerLine, ...]
    shared_caveats: tuple[str, ...]


def _range(rows: Sequence[Mapping[str, Any]], key: str, percent: bool) -> str:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "n/a"
    show = format_percent if percent else (lambda v: f"{v:.2f}")
    lo, hi = show(min(values)), show(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _shared_text(kind: str, rows: Sequence[Mapping[str, Any]], alpha: float) -> str:
    if kind == "spread":
        return (
            "For every audited model the score tracks the spread of the outputs (r = "
            f"{_range(rows, 'score_spread_corr', False)}): the paper's verdicts mean 'spread "
            "like training data', a trace of training rather than proof of a deeper dependence."
        )
    return (
        "For every audited model the paper's reference test fails its null check: it declared "
        f"a difference in {_range(rows, 'null_split_fpr', True)} of no-difference checks at "
        f"nominal {format_percent(alpha)}, so its 'references valid' is weaker evidence than "
        "its p-value says."
    )


def workspace_answer(
    models: pd.DataFrame,
    draws: pd.DataFrame,
    criterion: Criterion,
    targets: int,
    *,
    alpha: float = 0.01,
    alpha_calibrated: float = 0.05,
    notes: Mapping[str, str] | None = None,
) -> Answer:
    """The :class:`Answer` of an evaluation: one line per unlearned model.

    Args:
        models, draws: the evaluation's ``models`` and ``draws`` tables.
        criterion: the workspace's criterion. targets: T (``settings.targets``).
        alpha, alpha_calibrated: the evaluation's levels (for the caveats and the evidence).
        notes: model name → its family's verdict note, added to its line's sentence
            (:func:`sde_core.services.answer.verdict_notes`).
    """
    retrained, original = first_with_role(models, "retrained"), first_with_role(models, "original")
    rows: list[dict[str, Any]] = [
        {str(k): v for k, v in r.items()}
        for r in models.to_dict("records")
        if r.get("role") == "unlearned"
    ]
    caveats = [caveat_list(r, verdict_label(r), alpha, alpha_calibrated) for r in rows]
    # a kind every decided model shares is stated once (an inconclusive model has only its own)
    kinds = [{k for k, _ in c} for r, c in zip(rows, caveats, strict=True)
             if verdict_label(r) != "inconclusive"]  # fmt: skip
    shared = sorted(set.intersection(*kinds) - {"verdict"}) if len(kinds) > 1 else []
    lines = []
    for row, own in zip(rows, caveats, strict=True):
        name = str(row["name"])
        vs_re = (
            compare_models(models, draws, name, retrained, criterion.metric)
            if retrained is not None and not draws.empty
            else None
        )
        vs_or = (
            compare_models(models, draws, name, original, criterion.metric)
            if original is not None and not draws.empty
            else None
        )
        label, sentence = judge(row, criterion, vs_re, vs_or)
        note = (notes or {}).get(name, "").strip()
        sentence = f"{sentence} {note}" if note else sentence
        within = (
            vs_re is not None
            and vs_re.paired is not None
            and (vs_re.paired.lo <= 0 <= vs_re.paired.hi)
        )
        mine = [text for kind, text in own if kind not in shared]
        method = str(row.get("method") or "")
        lines.append(
            AnswerLine(
                name=name,
                method="" if method == name else method,
                label=label,
                colour=ANSWER_COLOURS[label],
                sentence=sentence,
                interval=f"{criterion.label} {estimate_text(row, criterion.metric)}",
                vs_retrained=difference_text(vs_re, "retrained"),
                vs_original=difference_text(vs_or, "original"),
                caveat=mine[0] if mine else "",
                evidence=tuple(_evidence(row, targets, alpha, alpha_calibrated)),
                within_retraining=within,
            )
        )
    decided = [r for r in rows if verdict_label(r) != "inconclusive"]
    common = [_shared_text(k, decided, alpha) for k in shared]
    # a caveat several lines would repeat word for word is stated once, naming its models
    repeated: dict[str, list[str]] = {}
    for line in lines:
        if line.caveat:
            repeated.setdefault(line.caveat, []).append(line.name)
    for text, names in repeated.items():
        if len(names) > 1:
            common.append(f"For {', '.join(names)}: {text}")
    lines = [
        replace(line, caveat="") if len(repeated.get(line.caveat, [])) > 1 else line
        for line in lines
    ]
    return Answer(tuple(lines), tuple(common))


def answer_counts(lines: Sequence[AnswerLine]) -> str:
    """``"2 forgotten, 5 not forgotten"`` (in :data:`ANSWER_LABELS` order)."""
    counts = {label: sum(line.label == label for line in lines) for label in ANSWER_LABELS}
    return ", ".join(f"{n} {label}" for label, n in counts.items() if n) or "no audited model"


def _ci(d: Any, scale: float, digits: int) -> str:
    lo, hi = d.lo * scale, d.hi * scale
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]".replace("-", "−")


def paired_table(models: pd.DataFrame, draws: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The paired differences ``a − b`` of every compared rate (method §15) for reading: the
    rate's display name, the difference and both intervals in the rate's shown unit
    (percentage points for a rate shown in %, F1 units for F1 — named in ``unit``), the
    draws and why a difference is withheld."""
    rows = []
    for metric in COMPARED_METRICS:
        c = compare_models(models, draws, a, b, metric)
        m = METRICS[metric]
        p, u = c.paired, c.unpaired
        digits = 0 if m.unit == "%" else 2
        rows.append({
            "rate": m.label,
            "unit": "points" if m.unit == "%" else f"{m.label} units",
            "difference": None if p is None else round(p.value * m.scale, 6),
            "95% CI, paired": "withheld" if p is None else _ci(p, m.scale, digits),
            "95% CI, as if unpaired": "" if u is None else _ci(u, m.scale, digits),
            "draws": None if p is None else p.draws,
            "why withheld": c.reason,
        })  # fmt: skip
    return pd.DataFrame(rows)
