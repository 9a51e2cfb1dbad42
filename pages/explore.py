"""Explore page: one model at one layer — verdict, histograms, decisions, calibrated panel.

Link parameters (besides the settings): ``model``, ``target`` (one target subset in the
histogram), ``control=1`` (the random-init negative control).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages._common import (
    View,
    begin_page,
    bound,
    current_settings,
    current_workspace,
    dataset_bundle,
    evaluate,
    fmt,
    fmt_p,
    guarded,
    headline_value,
    layer_label,
    metric,
    model_layers,
    pct,
    plot,
    settings_sidebar,
    show_verdict,
    table,
)
from sde_core.pipeline.evaluate import EvalSettings, EvaluationResult
from sde_core.pipeline.workspace import Workspace
from sde_core.services.evaluation import thumbnails
from sde_core.viz.figures import hsic_histogram, panel_figure, spread_figure
from sde_core.viz.formatting import format_interval
from sde_core.viz.links import decode_bool, decode_int

THUMBNAILS = 16
#: Verdict counts of the calibrated test (the ones a result has are shown).
COUNTS = {
    "n_in_training": "in-training",
    "n_out_of_training": "out-of-training",
    "n_over_unlearned": "over-unlearned",
    "n_inconclusive": "inconclusive",
}
HIST_MODES = ["all targets pooled", "one target subset"]
DECISION_HELP = {
    "D(S, S_IT)": "d_it",
    "D(S, S_OOT)": "d_oot",
    "median H": "h_median",
    "score s(S)": "score",
}


def apply_link(view: View, names: list[str]) -> None:
    """The link's model, target subset and negative-control switch."""
    model = view.get("model")
    if model is not None:
        if model in names:
            st.session_state["x_model"] = model
        else:
            st.warning(f"The link names a model {model!r} this workspace does not have.")
    target = view.get("target")
    if target is not None:
        value, problem = decode_int(target, "target")
        if problem:
            st.warning(f"The link's {problem}: showing all targets pooled.")
        else:
            st.session_state["x_hist_mode"] = HIST_MODES[1]
            st.session_state["x_target"] = value
    if view.get("control") is not None:
        st.session_state["x_negative"] = decode_bool(view.get("control") or "")


def pick_model_and_layer(ws: Workspace) -> str:
    """Model selector and layer picker (real layers with their shapes); returns the model."""
    names = [m.name for m in ws.models]
    originals = [m.name for m in ws.models if m.role == "original"]
    if st.session_state.get("x_model") not in names:
        st.session_state["x_model"] = originals[0] if originals else names[0]
    left, right = st.columns([1, 2])
    model = left.selectbox("Model", names, key="x_model")
    with guarded(f"Cannot list the layers of {model}"):
        layers = model_layers(ws, model)
        labels = {info.name: layer_label(info) for info in layers}
        if st.session_state.get("s_layer") not in labels:
            if st.session_state.get("s_layer"):
                st.warning(f"{model} has no layer {st.session_state['s_layer']!r}.")
            st.session_state["s_layer"] = "output" if "output" in labels else layers[0].name
        right.selectbox(
            "Layer (aliases first, then every module)",
            list(labels),
            format_func=labels.__getitem__,
            help="The activations compared: 'output' = softmax probabilities (the paper's h).",
            **bound("s_layer"),
        )
    return model


def headline(result: EvaluationResult, model: str) -> None:
    """The verdict in words, then the reference check, OTR with interval, F1, score and σ."""
    row = result.models.set_index("name").loc[model]
    record = {"name": model, **row.to_dict()}
    show_verdict(record, result.settings.targets, None, name=False, compare=False)
    valid = bool(row["references_valid"])
    cols = st.columns(5)
    metric(cols[0], "Reference U-test p", fmt_p(row["reference_p"]), "reference_p")
    with cols[0]:
        st.badge(
            "references valid" if valid else "references invalid",
            color="green" if valid else "red",
            icon=":material/check:" if valid else ":material/close:",
        )
    metric(cols[1], "OTR (out-of-training rate)", headline_value(row, "otr", pct), "otr")
    cols[1].caption(f"95% Wilson interval {format_interval(row['otr_lo'], row['otr_hi'])}")
    metric(cols[2], "Controlled F1", headline_value(row, "f1", fmt), "f1")
    metric(cols[3], "Dependence score", headline_value(row, "dependence_score", fmt),
           "dependence_score")  # fmt: skip
    metric(cols[4], "σ used", fmt(row["sigma"], 4), "sigma")
    cols[4].caption(f"layer {row['layer']}, d = {int(row['dim'])}")
    reason = row.get("inconclusive_reason")
    if isinstance(reason, str) and reason.strip():
        st.warning(f"**Inconclusive**: {reason.strip()} (method §12); the headline numbers are "
                   "withheld.")  # fmt: skip
    if not valid:
        st.warning(
            f"The references are invalid at this layer (p = {fmt_p(row['reference_p'])} ≥ α = "
            f"{result.settings.alpha}): H does not separate retained from unseen data, so every "
            "decision below is **inconclusive**. Try another layer (the softmax `output` is "
            "usually strongest), another σ, a larger subset size n or more splits K."
        )


def decisions(result: EvaluationResult, model: str) -> int | None:
    """Histograms of H and the JSD decision of every target subset; returns the shown target."""
    sub = result.subsets
    targets = sub[(sub["model"] == model) & (sub["kind"] == "target")]
    shown = st.radio("Targets in the histogram", HIST_MODES, horizontal=True, key="x_hist_mode")
    pick = None
    if shown == HIST_MODES[1]:
        if int(st.session_state.get("x_target") or 0) >= len(targets):
            st.session_state["x_target"] = 0
        pick = st.number_input(
            "Target subset", min_value=0, max_value=len(targets) - 1, key="x_target"
        )
    plot(hsic_histogram(result, model, "pooled" if pick is None else [int(pick)]), "x_hist")
    st.markdown("**JSD decision per target subset** (D = Jensen–Shannon divergence, base 2)")
    shown_table = targets[["index", "d_it", "d_oot", "decision", "h_median", "score", "spread"]]
    table(
        shown_table.rename(
            columns={
                "index": "target",
                "d_it": "D(S, S_IT)",
                "d_oot": "D(S, S_OOT)",
                "h_median": "median H",
                "score": "score s(S)",
            }
        ),
        "x_decisions",
        columns=DECISION_HELP,
        height=240,
    )
    return None if pick is None else int(pick)


def calibrated(result: EvaluationResult, model: str) -> None:
    """The reference panel, calibrated p-values and verdict counts, and the spread control."""
    row = result.models.set_index("name").loc[model]
    counts = [k for k in COUNTS if k in row.index and row[k] == row[k]]
    cols = st.columns(2 + len(counts))
    metric(cols[0], "Panel U-test p", fmt_p(row["panel_p"]), "panel_p")
    metric(cols[1], "Calibrated OTR", headline_value(row, "calibrated_otr", pct),
           "calibrated_otr")  # fmt: skip
    for col, key in zip(cols[2:], counts, strict=True):
        metric(col, COUNTS[key], str(int(row[key])), key)
    left, right = st.columns(2)
    with left:
        plot(panel_figure(result, model), "x_panel")
    with right:
        plot(spread_figure(result, model), "x_spread")
        st.caption(
            f"Score–spread correlation r = {fmt(row['score_spread_corr'])}: near 1, the score "
            "tracks how spread out the activations are (method §9) rather than a dependence "
            "between the halves. Null check: the paper's U-test flagged "
            f"{pct(row['null_split_fpr'])} of same-pool pairs, the calibrated test "
            f"{pct(row['null_calibrated_fpr'])}."
        )
    sub = result.subsets
    targets = sub[(sub["model"] == model) & (sub["kind"] == "target")]
    with st.expander("Calibrated p-values per target"):
        table(
            targets[["index", "score", "spread", "p_in", "p_out", "verdict"]].rename(
                columns={"index": "target"}
            ),
            "x_calibrated",
            notations={"p_in": "scientific", "p_out": "scientific"},
        )


def negative_control(result: EvaluationResult, model: str, control: str) -> None:
    """The same evaluation under the randomly initialised model, side by side."""
    rows = result.models.set_index("name")
    shown = pd.DataFrame(
        {
            name: {
                "references valid": "yes" if bool(rows.loc[name, "references_valid"]) else "no",
                "reference p": fmt_p(rows.loc[name, "reference_p"]),
                "OTR": pct(rows.loc[name, "otr"]),
                "calibrated OTR": pct(rows.loc[name, "calibrated_otr"]),
                "F1": fmt(rows.loc[name, "f1"]),
            }
            for name in (model, control)
        }
    )
    st.dataframe(shown.astype(str), key="x_control_table")
    plot(hsic_histogram(result, control), "x_control_hist")


def show_thumbnails(ws: Workspace, settings: EvalSettings, model: str, target: int) -> None:
    """Inputs of one target subset with the model's predictions (image data only)."""
    strip = thumbnails(ws, dataset_bundle(ws), settings, model, target, THUMBNAILS)
    if strip is None:
        return
    st.markdown(
        f"**Target subset {strip.target}: first {len(strip.indices)} inputs, {model}'s "
        f"predictions** ({sum(strip.correct)} of {len(strip.correct)} right)"
    )
    st.image(list(strip.images), caption=strip.captions, width=72, clamp=True)


view = begin_page("explore")
ws = current_workspace()
settings_sidebar(ws, view)
st.title("Explore one model")
names = [m.name for m in ws.models]
apply_link(view, names)
model = pick_model_and_layer(ws)
controls = [m.name for m in ws.models if m.role == "random" and m.name != model]
control = None
if controls and st.toggle(
    f"Negative control: also evaluate the random-init model {controls[0]!r}", key="x_negative"
):
    control = controls[0]
settings = current_settings(ws)
result = evaluate(ws, settings, [model] + ([control] if control else []))
target = None
if result is not None:
    headline(result, model)
    st.subheader("Split-half HSIC: references and targets")
    target = decisions(result, model)
    st.subheader("Calibrated evidence and spread control")
    calibrated(result, model)
    if control:
        st.subheader(f"Negative control: {control}")
        negative_control(result, model, control)
    with guarded("Cannot show the target inputs"):
        show_thumbnails(ws, settings, model, target or 0)
view.publish(
    {
        "model": model,
        "target": "" if target is None else str(target),
        "control": "1" if control else "",
    }
)
