"""Explore page: one model at one layer — histograms, decisions, calibrated panel, controls."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages._common import (
    bound,
    current_settings,
    current_workspace,
    dataset_bundle,
    evaluate,
    fmt,
    guarded,
    layer_label,
    model_layers,
    plot,
    settings_sidebar,
)
from sde_core.inputs.activations import ActivationCache, get_activations
from sde_core.inputs.data import load_index_file
from sde_core.pipeline.evaluate import EvalSettings, EvaluationResult, draw_subsets
from sde_core.pipeline.workspace import Workspace
from sde_core.viz.figures import hsic_histogram, panel_figure, spread_figure

THUMBNAILS = 16


def pct(value: float) -> str:
    """A rate in [0, 1] as a whole percentage."""
    return f"{100 * float(value):.0f}%" if value == value else "n/a"


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
            st.session_state["s_layer"] = "output" if "output" in labels else layers[0].name
        right.selectbox(
            "Layer (aliases first, then every module)",
            list(labels),
            format_func=labels.__getitem__,
            **bound("s_layer"),
        )
    return model


def headline(result: EvaluationResult, model: str) -> None:
    """Reference check with its badge, OTR with interval, F1, dependence score and σ."""
    row = result.models.set_index("name").loc[model]
    valid = bool(row["references_valid"])
    cols = st.columns(5)
    cols[0].metric("Reference U-test p", fmt(row["reference_p"]))
    with cols[0]:
        st.badge(
            "references valid" if valid else "references invalid",
            color="green" if valid else "red",
            icon=":material/check:" if valid else ":material/close:",
        )
    cols[1].metric("OTR (out-of-training rate)", pct(row["otr"]))
    cols[1].caption(f"95% Wilson interval {pct(row['otr_lo'])}–{pct(row['otr_hi'])}")
    cols[2].metric("Controlled F1", fmt(row["f1"]))
    cols[3].metric("Dependence score", fmt(row["dependence_score"]))
    cols[4].metric("σ used", fmt(row["sigma"], 4))
    cols[4].caption(f"layer {row['layer']}, d = {int(row['dim'])}")
    if not valid:
        st.warning(
            f"The references are invalid at this layer (p = {fmt(row['reference_p'])} ≥ α = "
            f"{result.settings.alpha}): H does not separate retained from unseen data, so every "
            "decision below is **inconclusive**. Try another layer (the softmax `output` is "
            "usually strongest), another σ, a larger subset size n or more splits K."
        )


def decisions(result: EvaluationResult, model: str) -> None:
    """Histograms of H and the JSD decision of every target subset."""
    sub = result.subsets
    targets = sub[(sub["model"] == model) & (sub["kind"] == "target")]
    shown = st.radio(
        "Targets in the histogram",
        ["all targets pooled", "one target subset"],
        horizontal=True,
        key="x_hist_mode",
    )
    pick = None
    if shown == "one target subset":
        pick = st.number_input(
            "Target subset", min_value=0, max_value=len(targets) - 1, key="x_target"
        )
    plot(hsic_histogram(result, model, "pooled" if pick is None else [int(pick)]), "x_hist")
    st.markdown("**JSD decision per target subset** (D = Jensen–Shannon divergence, base 2)")
    table = targets[["index", "d_it", "d_oot", "decision", "h_median", "score", "spread"]]
    st.dataframe(
        table.rename(
            columns={
                "index": "target",
                "d_it": "D(S, S_IT)",
                "d_oot": "D(S, S_OOT)",
                "h_median": "median H",
                "score": "score s(S)",
            }
        ),
        hide_index=True,
        height=240,
        key="x_decisions",
    )


def calibrated(result: EvaluationResult, model: str) -> None:
    """The reference panel, calibrated p-values and verdict counts, and the spread control."""
    row = result.models.set_index("name").loc[model]
    cols = st.columns(5)
    cols[0].metric("Panel U-test p", fmt(row["panel_p"]))
    cols[1].metric("Calibrated OTR", pct(row["calibrated_otr"]))
    cols[2].metric("in-training", int(row["n_in_training"]))
    cols[3].metric("out-of-training", int(row["n_out_of_training"]))
    cols[4].metric("inconclusive", int(row["n_inconclusive"]))
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
        st.dataframe(
            targets[["index", "score", "spread", "p_in", "p_out", "verdict"]], hide_index=True
        )


def negative_control(result: EvaluationResult, model: str, control: str) -> None:
    """The same evaluation under the randomly initialised model, side by side."""
    rows = result.models.set_index("name")
    table = pd.DataFrame(
        {
            name: {
                "references valid": bool(rows.loc[name, "references_valid"]),
                "reference p": fmt(rows.loc[name, "reference_p"]),
                "OTR": pct(rows.loc[name, "otr"]),
                "calibrated OTR": pct(rows.loc[name, "calibrated_otr"]),
                "F1": fmt(rows.loc[name, "f1"]),
            }
            for name in (model, control)
        }
    )
    st.dataframe(table.astype(str), key="x_control_table")
    plot(hsic_histogram(result, control), "x_control_hist")


def thumbnails(ws: Workspace, settings: EvalSettings, model: str) -> None:
    """Inputs of one target subset with the model's predictions (image data only)."""
    bundle = dataset_bundle(ws)
    if not bundle.is_image:
        return
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    plan = draw_subsets(len(bundle.train), len(bundle.test), forget, settings)
    target = int(st.session_state.get("x_target", 0) or 0)
    idx = plan.targets[target][:THUMBNAILS]
    entry = ws.model(model)
    probs = get_activations(
        ws.path(entry.checkpoint),
        bundle,
        "train",
        "output",
        ActivationCache(ws.root / ".sde-cache" / "activations"),
        arch=entry.arch,
        indices=idx,
    )["output"]
    names = bundle.class_names or [str(c) for c in range(bundle.num_classes)]
    labels = bundle.train_labels[idx]
    captions = [
        f"{'✓' if p == y else '✗'} {names[p]}" + ("" if p == y else f" (is {names[y]})")
        for p, y in zip(probs.argmax(axis=1), labels, strict=True)
    ]
    st.markdown(f"**Target subset {target}: first {len(idx)} inputs, {model}'s predictions**")
    st.image(list(bundle.images("train", idx)), caption=captions, width=72, clamp=True)


ws = current_workspace()
settings_sidebar(ws)
st.title("Explore one model")
model = pick_model_and_layer(ws)
controls = [m.name for m in ws.models if m.role == "random" and m.name != model]
control = None
if controls and st.toggle(
    f"Negative control: also evaluate the random-init model {controls[0]!r}", key="x_negative"
):
    control = controls[0]
settings = current_settings(ws)
result = evaluate(ws, settings, [model] + ([control] if control else []))
if result is not None:
    headline(result, model)
    st.subheader("Split-half HSIC: references and targets")
    decisions(result, model)
    st.subheader("Calibrated evidence and spread control")
    calibrated(result, model)
    if control:
        st.subheader(f"Negative control: {control}")
        negative_control(result, model, control)
    with guarded("Cannot show the target inputs"):
        thumbnails(ws, settings, model)
