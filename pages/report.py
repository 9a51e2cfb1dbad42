"""Report page: plain-language verdicts, settings, caveats and downloads."""

from __future__ import annotations

import streamlit as st

from pages._common import (
    current_workspace,
    evaluate,
    guarded,
    settings_sidebar,
    shared_cache,
)
from sde_core.common.hashing import stable_hash
from sde_core.pipeline.evaluate import EvaluationResult
from sde_core.viz.figures import figure_to_image, plotly_config
from sde_core.viz.report import (
    CAVEATS,
    build_html_report,
    null_calibration_text,
    report_figures,
    settings_table,
    tables_for_export,
    tables_to_zip,
    to_csv_bytes,
    to_json_bytes,
    verdict_table,
)

VERDICT_ICONS = {
    "not forgotten": ":material/memory:",
    "consistent with forgetting": ":material/check_circle:",
    "inconclusive": ":material/help:",
}


def html_report(result: EvaluationResult, name: str, notes: str) -> str:
    """The self-contained HTML report (built once per result and notes)."""
    key = ("report", result.workspace_hash, stable_hash(result.settings.result_key()), notes)
    page = shared_cache().get(key)
    if page is None:
        page = build_html_report(result, name, notes=notes or None)
        shared_cache().put(key, page)
    return page


def verdicts(result: EvaluationResult) -> None:
    """One plain-language paragraph per model."""
    for row in verdict_table(result).to_dict("records"):
        icon = VERDICT_ICONS.get(row["verdict"], ":material/info:")
        st.markdown(
            f"{icon} **{row['name']}** ({row['role']}, {row['method'] or 'no method'}) — "
            f"*{row['verdict']}*: {row['explanation']}"
        )


def downloads(result: EvaluationResult, name: str) -> None:
    """HTML report, every table as CSV/JSON, and the charts."""
    notes = st.text_area("Notes to include in the report (optional)", key="r_notes")
    st.download_button(
        "Download the HTML report",
        html_report(result, name, notes),
        file_name=f"sde-report-{name}.html",
        mime="text/html",
        type="primary",
        icon=":material/download:",
        key="r_html",
    )
    tables = tables_for_export(result)
    st.markdown("**Tables**")
    for table, df in tables.items():
        a, b, c = st.columns([2, 1, 1])
        a.write(f"`{table}` — {len(df)} rows")
        b.download_button("CSV", to_csv_bytes(df), f"{name}-{table}.csv", "text/csv",
                          key=f"r_csv_{table}")  # fmt: skip
        c.download_button("JSON", to_json_bytes(df), f"{name}-{table}.json", "application/json",
                          key=f"r_json_{table}")  # fmt: skip
    left, right = st.columns(2)
    fmt = left.radio("Archive format", ["csv", "json"], horizontal=True, key="r_zip_fmt")
    raw = right.checkbox("Include every raw H value (large)", key="r_zip_h")
    key = ("zip", result.workspace_hash, stable_hash(result.settings.result_key()), fmt, raw)
    archive = shared_cache().get(key)
    if archive is None:
        archive = tables_to_zip(tables_for_export(result, include_h=raw), fmt)
        shared_cache().put(key, archive)
    st.download_button(
        f"All tables ({fmt.upper()} in a ZIP)",
        archive,
        f"{name}-tables-{fmt}.zip",
        "application/zip",
        key="r_zip",
    )


def charts(result: EvaluationResult, name: str) -> None:
    """The report's charts; the camera button exports PNG or SVG in the browser."""
    image = st.radio("Camera-button format", ["png", "svg"], horizontal=True, key="r_img_fmt")
    figures = report_figures(result)
    for i, fig in enumerate(figures.values()):
        st.plotly_chart(fig, config=plotly_config(f"{name}-chart-{i}", image), key=f"r_fig_{i}")
    with st.expander("Render an image on the server (needs kaleido and Chromium)"):
        title = st.selectbox("Chart", list(figures), key="r_server_chart")
        if st.button("Render", key="r_render"):
            with guarded("Server-side export is unavailable"):
                data = figure_to_image(figures[title], image)
                st.download_button(f"Download {image.upper()}", data,
                                   f"{name}-chart.{image}", key="r_server_download")  # fmt: skip


ws = current_workspace()
settings = settings_sidebar(ws)
st.title("Report")
name = ws.name or ws.root.name
result = evaluate(ws, settings)
if result is not None:
    st.subheader("Verdicts")
    verdicts(result)
    st.subheader("Downloads")
    downloads(result, name)
    st.subheader("Settings")
    st.dataframe(settings_table(result.settings), hide_index=True, key="r_settings")
    st.subheader("Caveats")
    for title, text in CAVEATS.items():
        st.markdown(f"**{title}.** {text}")
    st.markdown(null_calibration_text(result))
    st.subheader("Charts")
    charts(result, name)
