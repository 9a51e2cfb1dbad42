"""Report page: verdicts with their evidence, what was evaluated, and the report files.

The HTML report opens offline, carries the manifest (checkpoint and data hashes, settings,
seeds, software) and embeds its JSON document; ``python -m sde_core verify`` re-checks it.
While an evaluation elsewhere is storing the models (:mod:`pages._live`), the page answers for
the stored ones, labelled provisional, and writes no report file until every model is stored.
"""

from __future__ import annotations

import hashlib
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from pages import APP_ROOT
from pages._common import dataset_bundle, guarded, open_page, publish
from pages._display import show_family_card, show_verdict, table
from pages._live import live_run, provisional_result
from pages._many import MANY_MODELS, drawn_models, many_models, stored_answer
from pages._paper import paper_export
from pages._run import affordable_layers, evaluate, shared_cache
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_plain
from sde_core.services.answer import verdict_notes, workspace_family
from sde_core.services.audit import build_manifest, report_file_stem, report_json_bytes
from sde_core.services.cascade import EvaluationResult, slice_result
from sde_core.services.report_bundle import SignedBundle, signed_report_zip
from sde_core.services.view_state import ReportView
from sde_core.services.workspace_info import Workspace
from sde_core.viz.figures.export import figure_to_image
from sde_core.viz.figures.style import plotly_config
from sde_core.viz.model_groups import verdict_counts
from sde_core.viz.pdf import html_to_pdf
from sde_core.viz.report.caveats import measured_caveats
from sde_core.viz.report.document import AuditContext, report_document
from sde_core.viz.report.exports import (
    tables_for_export,
    tables_to_zip,
    to_csv_bytes,
    to_json_bytes,
)
from sde_core.viz.report.html_page import build_html_report, report_figures
from sde_core.viz.report.meta_eval import family_card
from sde_core.viz.report.tables import (
    draws_table,
    manifest_tables,
    null_calibration_text,
    settings_table,
)
from sde_core.viz.verdicts.explanation import retrain_row
from sde_core.viz.verdicts.labels import CAN_CERTIFY, CANNOT_CERTIFY
from sde_core.viz.verdicts.summary import summarize_verdict, summary_order


def _key(result: EvaluationResult, *extra: Any) -> tuple:
    return (result.workspace_hash, stable_hash(result.settings.result_key()), *extra)


def manifest_of(ws: Workspace, result: EvaluationResult) -> dict[str, Any]:
    """The manifest of this evaluation (hashes every checkpoint once per result)."""
    key = ("manifest", *_key(result))
    manifest = shared_cache().get(key)
    if manifest is None:
        manifest = build_manifest(ws, result, bundle=dataset_bundle(ws))
        shared_cache().put(key, manifest)
    return manifest


def html_report(
    result: EvaluationResult, name: str, notes: str, manifest: dict, context: AuditContext,
    ws: Workspace,
) -> str:  # fmt: skip
    """The self-contained HTML report (built once per result, notes and context); its first
    page prints the SHA-256 of the JSON report the page offers next to it."""
    key = ("report", *_key(result, notes, context, ws.criterion))
    page = shared_cache().get(key)
    if page is None:
        page = build_html_report(
            result,
            name,
            notes=notes or None,
            manifest=manifest,
            file_hint=f"{report_file_stem(name)}.html",
            context=context,
            document_sha256=hashlib.sha256(to_json_document(result, manifest, context)).hexdigest(),
            criterion=ws.criterion,
        )
        shared_cache().put(key, page)
    return page


def answers(ws: Workspace, result: EvaluationResult) -> None:
    """One box per model (audited models first): the verdict in a sentence, its interval, the
    cross-check and the caveat that matters for it — the report's first page."""
    s = result.settings
    notes = verdict_notes(ws, s.layer)  # a language model's family note
    rows = summary_order(result.models)
    for start in range(0, len(rows), 3):
        for column, row in zip(st.columns(3), rows[start : start + 3], strict=False):
            a = summarize_verdict(
                row, s.targets, alpha=s.alpha, alpha_calibrated=s.alpha_calibrated,
                note=notes.get(str(row["name"]), ""),
            )  # fmt: skip
            box = column.container(border=True)
            box.markdown(f"**{md_plain(a.name)}** ({a.role}) — **{a.label}**")
            box.markdown(md_plain(f"{a.sentence} {a.interval}."))
            (box.error if a.conflict else box.caption)(md_plain(a.cross_check))
            box.caption(md_plain(f"Caveat: {a.caveat}"))


def verdicts(ws: Workspace, result: EvaluationResult) -> None:
    """One plain-language paragraph per model, with the evidence it rests on."""
    retrain = retrain_row(result.models)
    notes = verdict_notes(ws, result.settings.layer)  # a language model's family note
    for row in result.models.to_dict("records"):
        show_verdict(row, result.settings.targets, retrain, draws=result.draws,
                     note=notes.get(str(row["name"]), ""))  # fmt: skip


def certify() -> None:
    """What an SDE verdict can and cannot establish."""
    left, right = st.columns(2)
    left.markdown("**It can establish**\n\n" + "\n".join(f"- {t}" for t in CAN_CERTIFY))
    right.markdown("**It cannot establish**\n\n" + "\n".join(f"- {t}" for t in CANNOT_CERTIFY))


def report_downloads(result: EvaluationResult, name: str, manifest: dict, ws: Workspace) -> None:
    """The HTML, JSON and PDF report, and the signed report files."""
    left, middle, right, far = st.columns(4)
    context = AuditContext(
        purpose=left.text_input("Purpose (optional)", key="r_purpose",
                                placeholder="e.g. erasure request #17"),
        requester=middle.text_input("Requested by (optional)", key="r_requester"),
        operator=right.text_input("Operated by — the signer's name (optional)",
                                  key="r_operator"),
        role=far.text_input("The signer's role (optional)", key="r_role",
                            placeholder="e.g. data-protection officer"),
    )  # fmt: skip
    notes = st.text_area("Notes to include in the report (optional)", key="r_notes")
    page = html_report(result, name, notes, manifest, context, ws)
    stem = report_file_stem(name)
    left, middle, right = st.columns(3)
    left.download_button(
        "Download the HTML report",
        page,
        file_name=f"{stem}.html",
        mime="text/html",
        type="primary",
        icon=":material/download:",
        key="r_html",
    )
    middle.download_button(
        "Download the JSON report",
        to_json_document(result, manifest, context),
        file_name=f"{stem}.json",
        mime="application/json",
        icon=":material/data_object:",
        key="r_json",
        help="The numbers, verdicts and manifest that `python -m sde_core verify` re-checks.",
    )
    with right:
        pdf_key = ("pdf", *_key(result, notes, context))
        pdf = shared_cache().get(pdf_key)
        if pdf is None and st.button("Print the PDF (Chromium)", key="r_pdf_make"):
            with guarded("No PDF"), st.spinner("Printing the report with Chromium…"):
                with tempfile.TemporaryDirectory(prefix="sde-report-") as tmp:
                    source = Path(tmp) / f"{stem}.html"
                    source.write_text(page, encoding="utf-8")
                    pdf = html_to_pdf(source, Path(tmp) / f"{stem}.pdf").read_bytes()
                shared_cache().put(pdf_key, pdf)
        if pdf is not None:
            st.download_button("Download the PDF report", pdf, file_name=f"{stem}.pdf",
                               mime="application/pdf", key="r_pdf")  # fmt: skip
    sign(result, name, manifest, ws, notes, context)
    st.caption(
        f"Re-check a saved report against the workspace: `python -m sde_core verify "
        f"{stem}.json` (or the .html) — it re-hashes every file and recomputes every number, "
        "then answers **identical**; **equivalent** (exit 0: numbers moved only as far as "
        "another machine's last-bit differences allow — near-tie decisions and numbers within "
        "their conditioning, each named); or **differs** (exit 1: a file hash, a decision that "
        "is not a near-tie, or a number beyond its tolerance). Method §13. "
        "The command line signs too: `python -m sde_core report WORKSPACE --out DIR "
        "--sign-key KEY`."
    )


def sign(result: EvaluationResult, name: str, manifest: dict, ws: Workspace, notes: str,
         context: AuditContext) -> None:  # fmt: skip
    """Sign the report files with the operator's Ed25519 key (a file on the server's machine,
    read where it lies, never uploaded or kept) and offer them as one ZIP."""
    with st.expander("Sign the report with your Ed25519 key"):
        left, right = st.columns([3, 2])
        key_file = left.text_input(
            "Private key file (a path on the machine that runs this dashboard)",
            key="r_sign_key", placeholder="~/.ssh/sde_ed25519",
            help="PEM or OpenSSH Ed25519 private key. It is read once to sign and never stored.",
        )  # fmt: skip
        password = right.text_input("Key password (if encrypted)", type="password",
                                    key="r_sign_password")  # fmt: skip
        with_pdf = st.checkbox("Include the PDF (Chromium)", value=True, key="r_sign_pdf")
        if st.button("Write and sign the report files", key="r_sign", type="primary"):
            with guarded("Not signed"), st.spinner("Writing and signing the report files…"):
                bundle: SignedBundle | None = signed_report_zip(
                    result, manifest, name, key_file, password=password, pdf=with_pdf,
                    notes=notes or None, context=context, criterion=ws.criterion,
                )  # fmt: skip
                st.session_state["r_signed"] = bundle
        bundle = st.session_state.get("r_signed")
        if bundle is not None:
            st.success(
                f"Signed with the key {bundle.fingerprint}: {', '.join(bundle.names)}. The "
                f"report's SHA-256 is {bundle.sha256}."
            )
            if bundle.pdf_error:
                st.warning(f"No PDF: {bundle.pdf_error}")
            st.download_button("Download the signed report (ZIP)", bundle.data,
                               file_name=f"{report_file_stem(name)}-signed.zip",
                               mime="application/zip", key="r_signed_zip")  # fmt: skip


def to_json_document(result: EvaluationResult, manifest: dict, context: AuditContext) -> bytes:
    """The report's JSON file as bytes (the same bytes ``python -m sde_core report`` writes),
    built once per result and context: it finds every model's near-ties (method §13)."""
    key = ("json", *_key(result, context))
    document = shared_cache().get(key)
    if document is None:
        document = report_json_bytes(report_document(result, manifest, context))
        shared_cache().put(key, document)
    return document


def table_downloads(result: EvaluationResult, name: str) -> None:
    """Every table as CSV/JSON, and a ZIP of them all."""
    table_rows(tables_for_export(result), name, "r")
    left, right = st.columns(2)
    fmt = left.radio("Archive format", ["csv", "json"], horizontal=True, key="r_zip_fmt")
    raw = right.checkbox("Include every raw H value (large)", key="r_zip_h")
    key = ("zip", *_key(result, fmt, raw))
    archive = shared_cache().get(key)
    if archive is None:
        archive = tables_to_zip(tables_for_export(result, include_h=raw), fmt)
        shared_cache().put(key, archive)
    st.download_button(f"All tables ({fmt.upper()} in a ZIP)", archive,
                       f"{name}-tables-{fmt}.zip", "application/zip", key="r_zip")  # fmt: skip


def evaluated(manifest: dict) -> None:
    """The manifest: workspace, data, checkpoint hashes, seeds, software, wall times."""
    for title, df in manifest_tables(manifest).items():
        st.markdown(f"**{title}**")
        table(df, f"r_manifest_{title}")


def charts(result: EvaluationResult, name: str) -> None:
    """The report's charts; the camera button exports PNG or SVG in the browser."""
    image = st.radio("Camera-button format", ["png", "svg"], horizontal=True, key="r_img_fmt")
    figures = report_figures(result)
    for i, fig in enumerate(figures.values()):
        st.plotly_chart(fig, config=plotly_config(f"{name}-chart-{i}", image), key=f"r_fig_{i}")
    paper_export(result, name, "r_")
    with st.expander("Render an image on the server (needs kaleido and Chromium)"):
        title = st.selectbox("Chart", list(figures), key="r_server_chart")
        if st.button("Render", key="r_render"):
            with guarded("Server-side export is unavailable"):
                data = figure_to_image(figures[title], image)
                st.download_button(f"Download {image.upper()}", data,
                                   f"{name}-chart.{image}", key="r_server_download")  # fmt: skip


#: A table's downloads: extension, writer, MIME type.
TABLE_FORMATS = (("csv", to_csv_bytes, "text/csv"), ("json", to_json_bytes, "application/json"))


def table_rows(
    tables: dict[str, pd.DataFrame], stem: str, key: str, *, deferred: bool = False
) -> None:
    """One row per table: its name and size, and its CSV and JSON download (``deferred``:
    their bytes are written when the button is clicked, not on every run — hundreds of
    models' tables)."""
    for label, df in tables.items():
        a, b, c = st.columns([2, 1, 1])
        a.write(f"`{label}` — {len(df)} rows")
        for column, (kind, write, mime) in zip((b, c), TABLE_FORMATS, strict=True):
            data = partial(write, df) if deferred else write(df)
            column.download_button(kind.upper(), data, f"{stem}-{label}.{kind}", mime,
                                   key=f"{key}_{kind}_{label}")  # fmt: skip


def verdict_line(models: pd.DataFrame, of: int | None = None) -> str:
    """How many of the models carry each verdict, in a sentence (the models table's labels);
    ``of``: the workspace's model count, when ``models`` are the ones stored so far."""
    counts = verdict_counts(models)
    parts = ", ".join(f"**{n}** {md_plain(label)}" for label, n in counts.items())
    scope = f"all {len(models)}" if of is None else f"the {len(models)} stored so far of {of}"
    return f"Verdicts of {scope} models: {parts}."


def provisional_report(ws: Workspace, stored: EvaluationResult, many: bool) -> None:
    """The answer for the models a running evaluation has stored so far (``stored``; its
    headline rows only when ``many``): their verdict counts, the answers and verdicts of those
    models (one page of them at many models), and no report file, table or chart — a report
    pins a complete run, written once every model is stored."""
    st.subheader("The answer so far (provisional)")
    st.markdown(verdict_line(stored.models, len(ws.models)))
    shown = stored
    if many:
        visible = many_models(ws, stored, "r", "the answers and verdicts below")
        shown = slice_result(stored, visible)
    st.subheader("The answer, per stored model")
    answers(ws, shown)
    st.subheader("Verdicts")
    verdicts(ws, shown)
    limits(ws)
    st.info(
        "The report files, tables and charts are written once every model is stored: a "
        "report pins a complete run. Each stored model's result is final; the counts grow as "
        "the rest arrive."
    )


def report_files(ws: Workspace, result: EvaluationResult, name: str, heading: str = "") -> None:
    """The report files of ``result`` under ``heading`` and what they pin (its manifest hashes
    the checkpoints of its models); why not, when the manifest cannot be built."""
    manifest = None
    with guarded("Cannot pin what was evaluated"):
        manifest = manifest_of(ws, result)
    if manifest is not None:
        if heading:
            st.subheader(heading)
        report_downloads(result, name, manifest, ws)
        st.subheader("What was evaluated")
        evaluated(manifest)


def many_report(ws: Workspace, every: EvaluationResult, summary: bool, name: str) -> None:
    """The report of a workspace of many models (issue 39): the verdicts of every model in one
    line and grouped, then the answers, verdicts and per-draw values of one page of models (a
    slice of ``every``), their distributions — charts, report files — read in full on request
    or for the charts (``summary``: ``every`` holds headline rows and draws only)."""
    st.subheader("The answer, over every model")
    st.markdown(verdict_line(every.models))
    visible = many_models(
        ws, every, "r", "the answers, verdicts, per-draw values, tables and charts below"
    )
    shown = slice_result(every, visible)
    st.subheader("The answer, per model (this page)")
    answers(ws, shown)
    st.subheader("Verdicts (this page)")
    verdicts(ws, shown)
    limits(ws)
    st.subheader("Report files")
    scopes = {
        "page": f"this page's {len(visible)} models",
        "every": f"all {len(every.models)} models",
    }
    scope = st.radio("The report files cover", list(scopes), format_func=scopes.__getitem__,
                     horizontal=True, key="r_files_scope")  # fmt: skip
    st.caption(
        "The HTML, JSON and PDF report (and the signed files) hold the verdicts, numbers and "
        "charts of the models they cover, and their manifest hashes those models' checkpoints; "
        f"with all {len(every.models)} models they read every model's distributions from the "
        "results store and hash every checkpoint. Every model's numbers are in the tables "
        "below (CSV or JSON) whichever you choose."
    )
    if st.toggle("Build the report files", key="r_t_files"):
        with st.spinner("Reading the models and hashing their checkpoints…"):
            covered = drawn_models(ws, every, visible, summary) if scope == "page" else (
                evaluate(ws, every.settings) if summary else every
            )  # fmt: skip
        if covered is not None:
            report_files(ws, covered, name)
    evidence(every, shown, " (this page)")
    st.subheader("Tables")
    st.markdown(f"**Every model** ({len(every.models)}): the headline numbers and the per-draw "
                "values, from the results store.")  # fmt: skip
    table_rows({"models": every.models, "draws": every.draws}, f"{name}-all", "r_all",
               deferred=True)  # fmt: skip
    if st.toggle("This page's tables in full (subsets, verdicts, H values)", key="r_t_tables"):
        table_downloads(drawn_models(ws, every, visible, summary), name)
    st.subheader("Charts (this page)")
    if st.toggle("Charts of this page's models (reads their distributions)", key="r_t_charts"):
        charts(drawn_models(ws, every, visible, summary), name)


def caveats(result: EvaluationResult) -> None:
    """The caveats measured on this evaluation and its null calibration (written once per
    result: a binomial test per model)."""
    key = ("caveats", *_key(result))
    texts = shared_cache().get(key)
    if texts is None:
        texts = (measured_caveats(result), null_calibration_text(result))
        shared_cache().put(key, texts)
    st.subheader("Caveats")
    st.caption("Measured on this evaluation (method §12), not quoted from the paper.")
    for title, text in texts[0].items():
        st.markdown(f"**{title}.** {text}")
    st.markdown(texts[1])


def limits(ws: Workspace) -> None:
    """What SDE can and cannot certify, and how often it is right for this model family."""
    st.subheader("What SDE can and cannot certify")
    certify()
    family = workspace_family(ws)
    show_family_card(family_card(family.name, family.label, root=APP_ROOT), "r_meta_eval")


def evidence(result: EvaluationResult, drawn: EvaluationResult, scope: str = "") -> None:
    """The settings and the caveats of ``result``, and the per-draw values of ``drawn`` (its
    page of models at many models: ``scope`` says so in the heading)."""
    st.subheader("Settings")
    st.dataframe(settings_table(result.settings), hide_index=True, key="r_settings")
    caveats(result)
    per_draw = draws_table(drawn)
    if not per_draw.empty:
        st.subheader(f"Per-draw values{scope}")
        st.caption(DRAWS_CAPTION)
        st.dataframe(per_draw, hide_index=True, key="r_draws")


#: What the per-draw table shows.
DRAWS_CAPTION = (
    "Each of the B independent reference draws on its own (method §12); the headline "
    "numbers combine them with the intervals named in the comparison."
)


view, ws, settings = open_page("report", ReportView)
st.title("Report")
name = ws.name or ws.root.name
many = len(ws.models) > MANY_MODELS
# a running evaluation elsewhere is storing the models: the stored ones, provisional (_live)
live = live_run(ws, settings)
# at many models the store's headline rows answer first (nothing to compute, so no cost to
# price); the distributions are read for the page's models (many_report)
summary = stored_answer(ws, settings, summary=True) if many and live is None else None
result = None
if live is not None:
    stored = provisional_result(ws, settings, live, "r", summary=many)
    if stored is not None:
        provisional_report(ws, stored, many)
elif summary is not None:
    result = summary
elif affordable_layers(ws, settings, [settings.layer], "r"):
    result = evaluate(ws, settings)
if result is not None and many:
    many_report(ws, result, summary is not None, name)
elif result is not None:
    st.subheader("The answer, per model")
    answers(ws, result)
    st.subheader("Verdicts")
    verdicts(ws, result)
    limits(ws)
    report_files(ws, result, name, "Report files")
    evidence(result, result)
    st.subheader("Tables")
    table_downloads(result, name)
    st.subheader("Charts")
    charts(result, name)
publish(ReportView())
