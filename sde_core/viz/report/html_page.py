"""The report as one self-contained HTML file (:func:`build_html_report`: plotly.js inlined, no
network request) with the sections of :data:`REPORT_SECTIONS`. It embeds
:func:`~sde_core.viz.report.document.report_document` in a
``<script type="application/json" id="sde-report">`` element, so the HTML alone can be
verified; :func:`sde_core.viz.pdf.html_to_pdf` prints it to PDF.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sde_core import __version__
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_GAP,
    ACC_R,
    ACC_TE,
    ASR,
    CALIBRATED_F1,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    MMD_F1,
    NULL_CALIBRATED_FPR,
    NULL_OUT_OF_TRAINING_FPR,
    OTR,
    PANEL_P,
    REFERENCE_P,
    W2_F1,
)
from sde_core.viz.answer import ANSWER_COLOURS, answer_counts, make_scope, workspace_answer
from sde_core.viz.figures.comparison import comparison_bars
from sde_core.viz.figures.distributions import hsic_histogram
from sde_core.viz.figures.leaderboard import leaderboard_chart, leaderboard_table, leaderboard_text
from sde_core.viz.figures.small_multiples import MAX_SMALL_MULTIPLES, small_multiples
from sde_core.viz.figures.style import PLOTLY_CONFIG
from sde_core.viz.formatting import records
from sde_core.viz.glossary import glossary_table
from sde_core.viz.report.caveats import measured_caveats
from sde_core.viz.report.document import (
    REPORT_DATA_ID,
    AuditContext,
    _json_for_html,
    family_verdict_notes,
    manifest_family,
    report_document,
)
from sde_core.viz.report.meta_eval import FamilyCard, family_card
from sde_core.viz.report.tables import (
    COMPARISON_GROUPS,
    comparison_table,
    draws_table,
    manifest_tables,
    near_ties_table,
    null_calibration_text,
    settings_table,
)
from sde_core.viz.verdicts.explanation import verdict_table
from sde_core.viz.verdicts.labels import (
    CAN_CERTIFY,
    CANNOT_CERTIFY,
)
from sde_core.viz.verdicts.summary import summarize_verdict, summary_order

__all__ = [
    "REPORT_SECTIONS",
    "answer_html",
    "build_html_report",
    "print_ready",
    "report_figures",
]

#: The section titles of the HTML/PDF report, in order (the notes section only with notes).
REPORT_SECTIONS = (
    "The answer, per model",
    "Verdicts",
    "What SDE can and cannot certify",
    "Comparison",
    "Per-draw values",
    "Null calibration",
    "Charts",
    "What was evaluated",
    "Definitions",
    "Caveats",
)


def report_figures(result: Any) -> dict[str, go.Figure]:
    """The default charts of a report: OTR, calibrated OTR and (when computed) MIA ASR per model,
    the method leaderboard (with an unlearned model and per-draw values), the histograms of
    the first original, retrained and random model (paper Fig. 2) and, with two or more models,
    the first nine side by side on shared axes (:func:`small_multiples`)."""
    figs = {"OTR per model": comparison_bars(result.models, OTR.key)}
    if CALIBRATED_OTR.key in result.models:
        figs["Calibrated OTR per model"] = comparison_bars(result.models, CALIBRATED_OTR.key)
    if ASR.key in result.models and np.isfinite(result.models[ASR.key].astype(float)).any():
        figs["MIA attack success rate per model"] = comparison_bars(result.models, ASR.key)
    board = leaderboard_table(result.models, result.draws)
    if not board.empty and not result.draws.empty:
        figs["Method leaderboard"] = leaderboard_chart(board, result.models)
    for role in ("original", "retrained", "random"):
        found = result.models[result.models["role"] == role]
        if not found.empty:
            name = str(found.iloc[0]["name"])
            figs[f"H histograms: {name}"] = hsic_histogram(result, name)
    with_arrays = result.models_with_arrays()
    drawn = [str(n) for n in result.models["name"] if str(n) in with_arrays]
    names = drawn[:MAX_SMALL_MULTIPLES]  # the models whose H arrays the result holds
    if len(names) > 1:
        figs["H distributions side by side"] = small_multiples(result, names)
    return figs


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222;
       line-height: 1.45; padding: 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.hashes td { overflow-wrap: anywhere; }
figure { margin: 1.5em 0; }
figcaption { color: #666; font-size: 0.85em; }
code { font-family: ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; }
.meta { color: #666; font-size: 0.9em; }
.wide { overflow-x: auto; }
.verdict-not-forgotten { color: #b24000; font-weight: bold; }
.verdict-consistent-with-forgetting { color: #00795a; font-weight: bold; }
.verdict-over-unlearned { color: #8a5a00; font-weight: bold; }
.verdict-mixed, .verdict-inconclusive { color: #555; font-weight: bold; }
.answers { display: grid; grid-template-columns: repeat(3, 1fr); gap: 0.6em; margin: 0.8em 0; }
.answer { border: 1px solid #999; border-left: 5px solid #555; border-radius: 3px;
          padding: 0.25em 0.5em; break-inside: avoid; font-size: 0.8em; line-height: 1.3; }
.answer p { margin: 0.1em 0; }
.intro, .meta { font-size: 0.8em; margin: 0.25em 0; }
h1 { margin: 0 0 0.2em 0; }
.answer .head { font-weight: bold; }
.answer .caveat, .answer .check { color: #444; font-size: 0.92em; }
.answer.conflict .check { color: #8a0000; font-weight: bold; }
.answer.verdict-box-not-forgotten { border-left-color: #b24000; }
.answer.verdict-box-consistent-with-forgetting { border-left-color: #00795a; }
.answer.verdict-box-over-unlearned { border-left-color: #8a5a00; border-left-style: double;
                                     border-left-width: 7px; }
.audit { border-collapse: collapse; margin: 0.4em 0; }
.audit th { background: none; border: none; padding: 0 1em 0 0; }
.audit td { border: none; padding: 0; }
.check-report { font-size: 0.7em; color: #333; border-top: 1px solid #ccc; padding-top: 0.3em; }
.withheld-list { font-size: 0.85em; }
.verdict-conflicting-evidence { color: #b00020; font-weight: bold; }
.line { border: 1px solid #bbb; border-left: 6px solid #777; border-radius: 3px;
        padding: 0.1em 0.5em; margin: 0.2em 0; break-inside: avoid; font-size: 0.78em; }
.line p { margin: 0.08em 0; }
.line .word { font-weight: bold; text-transform: uppercase; letter-spacing: 0.03em; }
.line .nums, .line .own { color: #444; font-size: 0.92em; }
.line-green { border-left-color: #00795a; } .line-green .word { color: #00795a; }
.line-red { border-left-color: #b24000; } .line-red .word { color: #b24000; }
.line-orange { border-left-color: #c77700; background: #fff6e5; }
.line-orange .word { color: #8a5000; }
.line-gray { border-left-color: #777; } .line-gray .word { color: #555; }
.criterion, .shared { font-size: 0.78em; margin: 0.15em 0; }
.page1 { display: grid; grid-template-columns: 5fr 2fr; gap: 0.8em; align-items: start; }
.scope, .signer { border: 1px solid #999; padding: 0.3em 0.6em; font-size: 0.74em;
                  break-inside: avoid; margin-bottom: 0.5em; }
.scope ul { margin: 0.1em 0; padding-left: 1.2em; }
.scope table, .signer table { font-size: 1em; margin: 0.2em 0; }
.scope td, .scope th, .signer td, .signer th { border: none; padding: 0.05em 0.6em 0.05em 0; }
.signer .blank { border-bottom: 1px solid #333; min-width: 14em; display: inline-block; }
@media print {
  body { max-width: none; margin: 0; font-size: 9.5pt; }
  table { font-size: 7.5pt; }
  figure, tr, .answer { break-inside: avoid; }
  h2 { break-after: avoid; margin: 0.5em 0 0.3em 0; }
  .page-break { break-before: page; }
  .wide { overflow: visible; }
  .modebar-container, .modebar { display: none !important; }
}
@page {
  size: A4 landscape; margin: 12mm 12mm 14mm 12mm;
  @bottom-right { content: "page " counter(page) " of " counter(pages); font-size: 8pt;
                  color: #555; font-family: system-ui, sans-serif; }
}
"""

#: Glossary entries the report's tables and sentences use.
_REPORT_TERMS = (
    "h", "sigma", "layer", REFERENCE_P.key, "references_valid", "decision", OTR.key, "otr_ci",
    F1.key, DEPENDENCE_SCORE.key, "score", "spread", "score_spread_corr", PANEL_P.key, "p_in",
    "p_out", "verdict", CALIBRATED_OTR.key, CALIBRATED_F1.key, "n_over_unlearned",
    "null_split_fpr", NULL_CALIBRATED_FPR.key, NULL_OUT_OF_TRAINING_FPR.key, "panel_outliers",
    "inconclusive_reason", "evidence_conflict", ACC_GAP.key, MMD_F1.key, W2_F1.key,
    ACC_R.key, ACC_F.key, ACC_TE.key, ASR.key, "seconds", "eval_seconds", "subset_size", "targets",
    "splits", "panel_size", "seed", "alpha", "alpha_calibrated",
)  # fmt: skip


def _table_html(df: pd.DataFrame, *, hashes: bool = False) -> str:
    """A table; with ``hashes`` long hex digests may wrap anywhere inside their cells."""
    table = df.to_html(index=False, escape=True, na_rep="n/a", border=0)
    return f'<div class="wide{" hashes" if hashes else ""}">{table}</div>'


def _verdicts_html(table: pd.DataFrame, caveats: Mapping[str, str]) -> str:
    """The verdict table, each model's caveat beside its explanation."""
    rows = "".join(
        f"<tr><td>{html.escape(str(r['name']))}</td><td>{html.escape(str(r['role']))}</td>"
        f'<td class="verdict-{r["verdict"].replace(" ", "-")}">{html.escape(r["verdict"])}</td>'
        f"<td>{html.escape(r['explanation'])}</td>"
        f"<td>{html.escape(caveats.get(str(r['name']), ''))}</td></tr>"
        for r in records(table)
    )
    return (
        "<table><thead><tr><th>model</th><th>role</th><th>verdict</th><th>explanation</th>"
        '<th style="width: 22%">the caveat that matters for it</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def answer_html(
    result: Any, criterion: Criterion | None = None, manifest: Mapping[str, Any] | None = None
) -> str:
    """Page 1's answer: the criterion, one line per audited model (its word, sentence,
    interval, paired differences and own caveat), the caveats they share stated once, the
    yardsticks in a line each, and the scope-and-limitations box."""
    s = result.settings
    criterion = criterion or Criterion()
    notes = family_verdict_notes(result, manifest)
    answer = workspace_answer(
        result.models, result.draws, criterion, s.targets,
        alpha=s.alpha, alpha_calibrated=s.alpha_calibrated, notes=notes,
    )  # fmt: skip
    parts = [
        f'<p class="criterion"><strong>Criterion:</strong> {html.escape(criterion.describe())}.'
        f" <strong>Answer:</strong> {html.escape(answer_counts(answer.lines))}.</p>"
    ]
    for line in answer.lines:
        own = f'<p class="own">Caveat: {html.escape(line.caveat)}</p>' if line.caveat else ""
        nums = " · ".join((line.interval, line.vs_retrained, line.vs_original))
        parts.append(
            f'<div class="line line-{ANSWER_COLOURS[line.label]}"><p>'
            f'<span class="word">{html.escape(line.label)}</span> — '
            f"<strong>{html.escape(line.sentence)}</strong></p>"
            f'<p class="nums">{html.escape(nums)}</p>{own}</div>'
        )
    for text in answer.shared_caveats:
        parts.append(f'<p class="shared"><strong>Caveat:</strong> {html.escape(text)}</p>')
    yardsticks = [
        summarize_verdict(
            r,
            s.targets,
            alpha=s.alpha,
            alpha_calibrated=s.alpha_calibrated,
            note=notes.get(str(r["name"]), ""),
        )
        for r in summary_order(result.models)
        if r.get("role") != "unlearned"
    ]
    if yardsticks:
        items = "".join(
            f"<li><strong>{html.escape(a.name)}</strong> ({html.escape(a.role)}): "
            f"{html.escape(a.sentence)} {html.escape(a.interval)}.</li>"
            for a in yardsticks
        )
        parts.append(f'<ul class="shared">{items}</ul>')
    return "".join(parts)


def _scope_html(result: Any, manifest: Mapping[str, Any] | None, workspace_name: str) -> str:
    data = (manifest or {}).get("data", {})
    forget = (manifest or {}).get("forget_set", {}).get("size")
    kind = data.get("spec", {}).get("kind", "")
    text = f"{workspace_name}" + (f" ({kind})" if kind else "")
    if data.get("n_train") is not None:
        text += f": {data['n_train']} training rows, {data.get('n_test')} unseen"
    used = result.models.get("draws", ())
    scope = make_scope(result.settings, text, forget, len(result.models), list(used))
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in scope.rows()
    )
    limits = "".join(f"<li>{html.escape(t)}</li>" for t in CANNOT_CERTIFY[:3])
    return (
        f'<div class="scope"><strong>Scope and limitations</strong><table>{rows}</table>'
        f"<p>This answer does not establish:</p><ul>{limits}</ul></div>"
    )


def _signer_html(context: AuditContext | None, signed_by: str | None, date: str) -> str:
    def cell(value: str | None) -> str:
        return (
            html.escape(value.strip()) if value and value.strip() else '<span class="blank"></span>'
        )

    name = context.operator if context is not None else None
    role = context.role if context is not None else None
    key = (
        f"Ed25519 key <code>{html.escape(signed_by)}</code>"
        if signed_by
        else "not signed electronically"
    )
    return (
        '<div class="signer"><strong>Signed by</strong><table>'
        f"<tr><th>Name</th><td>{cell(name)}</td></tr>"
        f"<tr><th>Role</th><td>{cell(role)}</td></tr>"
        f"<tr><th>Date</th><td>{html.escape(date)}</td></tr>"
        f"<tr><th>Signature</th><td>{key}</td></tr></table></div>"
    )


def print_ready(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` without fill patterns (Chromium prints a patterned fill as a raster
    image per bar, which made a demo's PDF 85 MB): patterned traces keep their outline, drawn
    heavier, over a light fill; bars keep their text labels, which say what the patterns did."""
    out = go.Figure(fig)
    for trace in out.data:
        marker = getattr(trace, "marker", None)
        pattern = getattr(marker, "pattern", None) if marker is not None else None
        shape = getattr(pattern, "shape", None) if pattern is not None else None
        if not shape or (not isinstance(shape, str) and not any(shape)):
            continue
        trace.marker.pattern = None
        if trace.type == "histogram":
            trace.marker.line.width = 2.5
            trace.opacity = 0.35
    return out


def _comparison_html(models: pd.DataFrame, draws: pd.DataFrame) -> str:
    """The comparison as two tables, the reasons numbers are withheld as a list below, and the
    method leaderboard (the paired differences, method §15)."""
    table = comparison_table(models)
    parts = [
        f"<h3>{html.escape(title)}</h3>"
        + _table_html(table[[c for c in columns if c in table.columns]])
        for title, columns in COMPARISON_GROUPS.items()
    ]
    withheld = [(r["model"], r["why withheld"]) for r in records(table) if r["why withheld"]]
    if withheld:
        items = "".join(
            f"<li><strong>{html.escape(str(m))}</strong>: {html.escape(str(why))}</li>"
            for m, why in withheld
        )
        parts.append(f'<p>Why numbers are withheld (method §12):</p><ul class="withheld-list">'
                     f"{items}</ul>")  # fmt: skip
    board = leaderboard_table(models, draws)
    if not board.empty and not draws.empty:
        parts.append(
            "<h3>Method leaderboard</h3><p>Each unlearned model minus the retrained model and "
            "minus the original, paired draw by draw (method §15), closest to retraining first; "
            "'within the uncertainty of' means the paired interval contains 0.</p>"
            + _table_html(leaderboard_text(board))
        )
    return "".join(parts)


def _audit_html(context: AuditContext | None) -> str:
    rows = context.items() if context is not None else []
    if not rows:
        return ""
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="audit">{cells}</table>'


def _check_html(file_hint: str, document_sha256: str | None, signed_by: str | None) -> str:
    digest = (
        f"The report's data document (<code>{html.escape(_json_name(file_hint))}</code>) has "
        f"SHA-256 <code>{html.escape(document_sha256)}</code>. "
        if document_sha256
        else ""
    )
    signed = (
        f"It is signed with the operator's Ed25519 key <code>{html.escape(signed_by)}</code> "
        f"(<code>{html.escape(_stem(file_hint))}.sig.json</code>); compare that fingerprint "
        "with the one the operator published. "
        if signed_by
        else "This report is not signed. "
    )
    return (
        f'<p class="check-report"><strong>Checking this report.</strong> {digest}{signed}'
        f"<code>python -m sde_core verify {html.escape(file_hint)}</code> re-hashes every "
        "file the manifest names, recomputes every number and checks the signature; "
        "<code>--signature-only</code> checks only that no byte changed.</p>"
    )


def _footer_css(title: str, document_sha256: str | None) -> str:
    """The printed footer of every page: the report and its SHA-256 (the page number is at
    the right, from the static style)."""
    text = " ".join((title + (f" · SHA-256 {document_sha256}" if document_sha256 else "")).split())
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ")
    return (
        f'@page {{ @bottom-left {{ content: "{quoted}"; font-size: 7pt; color: #555; '
        "font-family: ui-monospace, monospace; } }"
    )


def _stem(file_hint: str) -> str:
    for suffix in (".html", ".htm", ".json", ".pdf"):
        if file_hint.lower().endswith(suffix):
            return file_hint[: -len(suffix)]
    return file_hint


def _json_name(file_hint: str) -> str:
    return f"{_stem(file_hint)}.json"


def _family_card(result: Any, manifest: Mapping[str, Any] | None) -> FamilyCard | None:
    """The "how often is it right" card of the report's model family (none without a
    manifest, which is what names the family)."""
    family = manifest_family(result, manifest)
    return None if family is None else family_card(family.name, family.label)


def _certify_html(card: FamilyCard | None = None) -> str:
    can = "".join(f"<li>{html.escape(t)}</li>" for t in CAN_CERTIFY)
    cannot = "".join(f"<li>{html.escape(t)}</li>" for t in CANNOT_CERTIFY)
    found = f"<p><strong>It can establish:</strong></p><ul>{can}</ul>" + (
        f"<p><strong>It cannot establish:</strong></p><ul>{cannot}</ul>"
    )
    if card is None:
        return found
    said = "".join(f"<p>{html.escape(t)}</p>" for t in card.sentences)
    caption = f"<p><em>{html.escape(card.caption)}</em></p>" if card.caption else ""
    return f"{found}<h3>{html.escape(card.title)}</h3>{said}{caption}"


def _manifest_html(manifest: Mapping[str, Any] | None, file_hint: str) -> str:
    if manifest is None:
        return (
            "<p>This report was built without a manifest: it does not pin the checkpoints or "
            "the data and cannot be verified.</p>"
        )
    parts = [
        "<p>Everything below pins what was evaluated. To re-check this report against the "
        f"workspace, run <code>python -m sde_core verify {html.escape(file_hint)}</code>: it "
        "re-hashes every file, recomputes every number and says, per model, whether it is "
        "<em>identical</em>; <em>equivalent</em> — numbers moved only as far as another "
        "machine's last-bit differences allow (a decision that is a near-tie, a number within "
        "its conditioning; each moved field is named; method §13); or what <em>differs</em> "
        "(a file hash, a decision that is not a near-tie, a number beyond its tolerance).</p>"
    ]
    for title, table in manifest_tables(manifest).items():
        parts.append(f"<h3>{html.escape(title)}</h3>")
        parts.append(_table_html(table, hashes=True))
    return "".join(parts)


def build_html_report(
    result: Any,
    workspace_name: str,
    figures: Mapping[str, go.Figure] | Sequence[go.Figure] | None = None,
    notes: str | None = None,
    manifest: Mapping[str, Any] | None = None,
    file_hint: str = "REPORT.html",
    *,
    context: AuditContext | None = None,
    document_sha256: str | None = None,
    signed_by: str | None = None,
    criterion: Criterion | None = None,
) -> str:
    """A self-contained HTML report of an evaluation (opens offline: plotly.js is inlined once).

    The first page answers: who asked and why (``context``), one box per model with its verdict
    in a sentence, its paired differences and its own caveat (:func:`answer_html`), and how
    to check the report. Printed, every page is numbered.

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`.
        workspace_name: shown in the title.
        figures: charts to embed, as ``{title: figure}`` or a list (default
            :func:`report_figures`).
        notes: free text from the user (escaped; blank lines separate paragraphs).
        manifest: what was evaluated (:func:`sde_core.services.audit.build_manifest`); without
            it the report says it cannot be verified.
        file_hint: the file name shown in the ``verify`` command.
        context: purpose, requester and operator, printed when given.
        document_sha256: the SHA-256 of the report's JSON file, printed on the first page.
        signed_by: the fingerprint of the key that signs the report files, if any.
        criterion: the workspace's criterion of forgetting (default: :class:`Criterion`'s).

    Returns:
        The HTML document with the sections of :data:`REPORT_SECTIONS` (and the notes), and the
        :func:`report_document` embedded for ``verify``.
    """
    if figures is None:
        figures = report_figures(result)
    items = list(figures.items()) if isinstance(figures, Mapping) else [(None, f) for f in figures]
    charts = []
    for i, (title, fig) in enumerate(items):
        caption = f"<figcaption>{html.escape(title)}</figcaption>" if title else ""
        body = print_ready(fig).to_html(
            full_html=False, include_plotlyjs=i == 0, config=PLOTLY_CONFIG, default_width="100%"
        )
        charts.append(f"<figure>{body}{caption}</figure>")
    caveats = "".join(
        f"<li><strong>{html.escape(t)}.</strong> {html.escape(text)}</li>"
        for t, text in measured_caveats(result).items()
    )
    s = result.settings
    family_notes = family_verdict_notes(result, manifest)
    model_caveats = {
        str(r["name"]): summarize_verdict(
            r,
            s.targets,
            alpha=s.alpha,
            alpha_calibrated=s.alpha_calibrated,
            note=family_notes.get(str(r["name"]), ""),
        ).caveat
        for r in records(result.models)
    }
    per_draw = draws_table(result)
    draws_html = (
        "<p>Each draw's own statistics (method §12: independent references, panels, targets "
        "and controls per draw; the headline numbers combine them — rates and F1 with a "
        "Korn–Graubard interval, the dependence score with Fieller's, p-values as the median "
        "and range). Numbers the gate withholds are withheld here too.</p>" + _table_html(per_draw)
        if not per_draw.empty
        else "<p>This result has no per-draw values.</p>"
    )
    notes_html = ""
    if notes and notes.strip():
        paragraphs = [p.strip() for p in notes.split("\n\n") if p.strip()]
        notes_html = "<h2>Notes</h2>" + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"SDE report: {workspace_name}"
    document = _json_for_html(report_document(result, manifest, context))
    sections = dict(
        zip(
            REPORT_SECTIONS,
            (
                '<div class="page1"><div>'
                + answer_html(result, criterion, manifest)
                + "</div><div>"
                + _scope_html(result, manifest, workspace_name)
                + _signer_html(context, signed_by, now)
                + _check_html(file_hint, document_sha256, signed_by)
                + "</div></div>",
                _verdicts_html(verdict_table(result), model_caveats),
                _certify_html(_family_card(result, manifest)),
                _comparison_html(result.models, result.draws),
                draws_html,
                f"<p>{html.escape(null_calibration_text(result))}</p>",
                "".join(charts) or "<p>No charts.</p>",
                _manifest_html(manifest, file_hint)
                + f"<h3>Settings</h3>{_table_html(settings_table(result.settings))}"
                + "<h3>Near-ties</h3><p>Decisions whose inputs lie within float tolerance of "
                "their boundary: another machine may flip them, and the numbers built on them "
                "may move accordingly (method §13).</p>" + _table_html(near_ties_table(result)),
                _table_html(glossary_table(_REPORT_TERMS)),
                f"<ul>{caveats}</ul>",
            ),
            strict=True,
        )
    )
    page_break = '<div class="page-break"></div>'  # printed, the answers fill page 1
    body = "\n".join(
        f"{page_break if i == 1 else ''}<h2>{html.escape(t)}</h2>\n{content}"
        for i, (t, content) in enumerate(sections.items())
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_STYLE}{_footer_css(title, document_sha256)}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
{_audit_html(context)}
<p class="meta">Generated {now} by sde_core {html.escape(__version__)}
 · workspace hash {html.escape(str(result.workspace_hash))}
 · {len(result.models)} models · layer {html.escape(str(s.layer))}</p>
<p class="intro">Split-half Dependence Evaluation (SDE) asks whether subsets of the forget set
still look like the model's training data (in-training) or like data it never saw
(out-of-training). The out-of-training rate (OTR) is the share of {s.targets} random
forget-set subsets of {s.subset_size} rows that look unseen: higher means more forgetting;
the retrained model, which never saw the forget set, is the yardstick.</p>
{body}
{notes_html}
<script type="application/json" id="{REPORT_DATA_ID}">{document}</script>
</body>
</html>
"""
