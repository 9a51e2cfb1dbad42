"""Compare page: every model side by side at the chosen layers, with the Retrain reference."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from pages._common import (
    bound,
    current_settings,
    current_workspace,
    evaluate,
    guarded,
    model_layers,
    plot,
    settings_sidebar,
)
from sde_core.pipeline.evaluate import EvaluationResult
from sde_core.pipeline.workspace import Workspace
from sde_core.viz.figures import METRICS, comparison_bars, target_overlay
from sde_core.viz.ui_support import comparison_table

BAR_METRICS = ("otr", "calibrated_otr", "f1", "asr", "acc_f", "dependence_score")


def choose_layers(ws: Workspace) -> list[str]:
    """Layer multiselect (default: the Explore layer and the penultimate layer)."""
    reference = next((m.name for m in ws.models if m.role == "original"), ws.models[0].name)
    options = [info.name for info in model_layers(ws, reference)]
    if "compare_layers" not in st.session_state:
        wanted = [st.session_state.get("s_layer", "output"), "penultimate"]
        st.session_state["compare_layers"] = [x for x in dict.fromkeys(wanted) if x in options]
    return st.multiselect(
        "Layers (OTR, calibrated OTR, F1 and dependence score are per layer)",
        options,
        **bound("compare_layers"),
    )


def column_formats(table: pd.DataFrame) -> dict[str, Any]:
    """Display formats: percentages with one decimal, rates and scores with three digits."""
    config: dict[str, Any] = {}
    for column in table.columns:
        if column.endswith("(%)"):
            config[column] = st.column_config.NumberColumn(format="%.1f")
        elif column == "time (s)":
            config[column] = st.column_config.NumberColumn(format="%.2f")
        elif table[column].dtype.kind == "f":
            config[column] = st.column_config.NumberColumn(format="%.3f")
    return config


def charts(results: dict[str, EvaluationResult]) -> None:
    """A bar chart of one metric with intervals and the Retrain line; a target overlay."""
    left, right = st.columns(2)
    metric = left.selectbox(
        "Metric", BAR_METRICS, format_func=lambda m: METRICS[m].label, key="c_metric"
    )
    layer = right.selectbox("Layer of the chart", list(results), key="c_layer")
    result = results[layer]
    plot(comparison_bars(result.models, metric), "c_bars")
    names = result.models["name"].tolist()
    default = [n for n in names if n in ("original", "retrained")] or names[:2]
    chosen = st.multiselect(
        "Overlay the target histograms of 2–4 models",
        names,
        default=default,
        max_selections=4,
        key="c_overlay",
    )
    if len(chosen) >= 2:
        plot(target_overlay(result, chosen), "c_overlay_chart")
    else:
        st.info("Select at least two models to overlay their target histograms.")


ws = current_workspace()
settings_sidebar(ws)
st.title("Compare models")
with guarded("Cannot list the layers"):
    layers = choose_layers(ws)
    if not layers:
        st.info("Choose at least one layer.")
        st.stop()
    results: dict[str, EvaluationResult] = {}
    for layer in layers:
        result = evaluate(ws, current_settings(ws, layer=layer))
        if result is None:
            break
        results[layer] = result
    if len(results) == len(layers):
        table = comparison_table({layer: r.models for layer, r in results.items()})
        table = table.sort_values("role", key=lambda r: r != "retrained", kind="stable")
        retrained = table.loc[table["role"] == "retrained", "name"].tolist()
        st.caption(
            f"Reference: the retrained model {retrained[0]!r} (first row); click a column "
            "header to sort. Accuracies and ASR in %, rates in [0, 1], time in seconds."
            if retrained
            else "This workspace has no retrained model to compare with."
        )
        st.dataframe(table, hide_index=True, key="c_table", column_config=column_formats(table))
        charts(results)
