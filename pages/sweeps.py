"""Sweeps page: F1 and OTR against σ, the layer, the subset size or the training checkpoint.

Read-only views first, answered on open from files and stores (nothing is computed): the
workspace's shipped sweep files (``*_sweep.csv``, e.g. the diffusion demo's Figure 6 sweep) and
the **Curves** of the models with intermediate checkpoints (OTR, calibrated OTR and the
behaviour gap per training epoch or unlearning step, with the best checkpoint by the stated
rule; :mod:`sde_core.services.curves`). Then running a new sweep.

Link parameters (besides the settings): ``sweep`` (sigma, layer, subset_size, checkpoint),
``values`` (the swept values, comma-separated), ``models``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pandas as pd
import streamlit as st

from pages._common import dataset_bundle, guarded, model_layers, open_page, publish
from pages._display import plot, table
from pages._run import evaluations, run_with_progress
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.common.paths import allowed_roots, resolve_in_roots
from sde_core.common.sigma import SIGMA_SYNTAX
from sde_core.services.cascade import EvalSettings, Progress
from sde_core.services.curves import (
    checkpoint_curves,
    curve_model_names,
    evaluate_missing_checkpoints,
    load_shipped_sweep,
    shipped_sweep_files,
    sweep_facets,
)
from sde_core.services.plans import plan_points, plan_runs
from sde_core.services.view_state import SweepsView, decode_list, restrict
from sde_core.services.workspace_info import Workspace, checkpoint_fractions
from sde_core.viz.figures.curves import curves_answer, curves_figure
from sde_core.viz.figures.sweeps import (
    PLAN_METRICS,
    SWEEP_METRICS,
    before_gate,
    paired_sweep_answer,
    plan_figure,
    shipped_sweep_answer,
    sweep_figure,
)
from sde_core.viz.ui_support import parse_int_values, parse_sigma_values

PARAMS = {
    "sigma": "σ (kernel bandwidth)",
    "layer": "layer",
    "subset_size": "subset size n",
    "checkpoint": "training checkpoint",
}


def value_key(param: str, settings: EvalSettings) -> str:
    """The session key of the widget holding the values of ``param``."""
    return {
        "sigma": f"sw_sigma_{settings.layer}",
        "layer": "sw_layers",
        "subset_size": "sw_sizes",
        "checkpoint": "sw_fractions",
    }[param]


def models_key(param: str) -> str:
    """The session key of the models multiselect (checkpoint sweeps have their own)."""
    return f"sw_models_{param == 'checkpoint'}"


def apply_link(view: SweepsView, ws: Workspace, settings: EvalSettings, original: str) -> None:
    """The link's swept parameter, values and models (those this workspace has)."""
    view, problems = restrict(view, {"models": [m.name for m in ws.models]})
    for problem in problems:
        st.warning(problem)
    if view.sweep is not None:
        st.session_state["sw_param"] = view.sweep
    param = st.session_state.get("sw_param", "sigma")
    if view.values is not None:
        key = value_key(param, settings)
        if param == "layer":
            st.session_state[key] = list(view.values)
        elif param == "checkpoint":
            try:
                wanted = [float(v) for v in view.values]
            except ValueError:
                shown = ", ".join(md_literal(v[:60]) for v in view.values[:10])
                st.warning(f"The link's values {shown} are not checkpoint fractions.")
            else:
                known = checkpoint_fractions(ws, original)
                st.session_state[key] = [f for f in known if f in wanted]
        else:
            st.session_state[key] = ", ".join(view.values)
    if view.models is not None:
        st.session_state[models_key(param)] = list(view.models)


def values_param(param: str, settings: EvalSettings) -> tuple[str, ...] | None:
    """The current values of ``param``'s widget, as the link carries them."""
    value = st.session_state.get(value_key(param, settings))
    if value is None:
        return None
    return tuple(decode_list(value)) if isinstance(value, str) else tuple(map(str, value))


def sweep_values(ws: Workspace, settings: EvalSettings, param: str, original: str) -> list:
    """The widget for the values of ``param``; returns the parsed values."""
    key = value_key(param, settings)
    if param == "sigma":
        dim = next(i.dim for i in model_layers(ws, original) if i.name == settings.layer)
        # as rules, √d itself among them: the points are paired with the sidebar's σ (√d by
        # default) on the same draws, and the answer says which σ beats it (method §15)
        st.session_state.setdefault(key, "0.1*sqrt_dim, 0.3*sqrt_dim, sqrt_dim, 3*sqrt_dim")
        text = st.text_input(
            f"σ values (comma-separated; √d = {math.sqrt(dim):.3g} at {settings.layer})",
            help=f"Each σ is {SIGMA_SYNTAX}.",
            key=key,
        )
        return parse_sigma_values(text)
    if param == "layer":
        names = [i.name for i in model_layers(ws, original)]
        preferred: list[str] = [n for n in ("output", "logits", "penultimate") if n in names]
        # a denoiser: its output at every listed noise level (method §14)
        preferred = preferred or [n for n in names if n.startswith("denoised@")]
        st.session_state.setdefault(key, preferred)
        st.session_state[key] = [n for n in st.session_state[key] if n in names]
        return st.multiselect("Layers", names, key=key)
    if param == "subset_size":
        n = settings.subset_size
        default = ", ".join(str(v) for v in dict.fromkeys((max(4, n // 4), max(4, n // 2), n)))
        st.session_state.setdefault(key, default)
        return parse_int_values(st.text_input("Subset sizes", key=key))
    fractions = checkpoint_fractions(ws, original)
    st.session_state.setdefault(key, [f for f in fractions if f > 0])
    return st.multiselect(
        "Checkpoints (fraction of training)",
        fractions,
        format_func=lambda f: f"{100 * f:.0f}%",
        key=key,
    )


def markers_of(ws: Workspace, settings: EvalSettings, model: str) -> dict[str, float]:
    """The √d and median σ of ``model`` at the settings' layer (cached by content hash)."""
    return evaluations(ws).sigma_markers(settings, model)


def run(
    ws: Workspace, settings: EvalSettings, param: str, values: list, models: list[str]
) -> pd.DataFrame | None:
    """Run (or fetch) the sweep with progress and Stop; None until the user starts it."""

    def when_asked(work: Callable[[Progress], pd.DataFrame]) -> pd.DataFrame | None:
        # asked only when the session has no answer: the forecast, read from the store
        forecast = evaluations(ws).sweep_forecast(settings, param, values, models,
                                                  dataset_bundle(ws).fingerprint)  # fmt: skip
        if not st.button(f"Run sweep ({forecast.sentence()})", type="primary", key="sw_run"):
            st.info("Choose the values and press **Run sweep**; finished points are stored.")
            return None
        return run_with_progress(work, f"Sweeping {PARAMS[param]} over {len(values)} values…")

    return evaluations(ws).sweep(settings, param, values, models, when_asked)


def plan_results() -> None:
    """Results of ``python -m sde_core run-plan`` (local or on Ray), read from its store.

    A plan running on a Ray cluster writes each job's rows as it finishes, so "Refresh" shows
    its progress while it runs.
    """
    path_text = st.text_input("Plan results store", value="runs/results.sqlite", key="pl_store")
    st.button("Refresh", key="pl_refresh", help="re-read the store (a running plan adds rows)")
    with guarded("Cannot read the plan results"):
        path = resolve_in_roots(path_text, allowed_roots(), what="results store", must_exist=False)
        runs = plan_runs(path)
        if runs.empty:
            st.info(f"No plan runs in {path} yet: run `python -m sde_core run-plan PLAN`.")
            return
        labels = {int(cast(int, r.id)): f"{r.label} — run {r.id} ({r.status}, {r.units} jobs done)"
                  for r in runs.itertuples()}  # fmt: skip
        run_id = st.selectbox("Plan run", list(labels), format_func=labels.__getitem__,
                              key="pl_run")  # fmt: skip
        points = plan_points(path, run_id)
        if points.empty:
            st.info("This run has no evaluation points (yet): toy runs are in REPRODUCTION.md.")
            return
        metric = st.radio("Metric", list(PLAN_METRICS), format_func=PLAN_METRICS.__getitem__,
                          horizontal=True, key="pl_metric")  # fmt: skip
        by_layer = False
        if str(points["param"].iloc[0]) == "sigma" and points["layer"].nunique() > 1:
            by_layer = st.radio("Against", ["σ", "layer (a denoiser: its noise level)"],
                                horizontal=True, key="pl_axis") != "σ"  # fmt: skip
        plot(plan_figure(points, metric, by_layer=by_layer), "pl_fig")
        table(points, "pl_table")


def shipped_sweep(path: Path) -> None:
    """A sweep file the workspace ships, drawn as it is: its answer first, then its charts."""
    sweep = load_shipped_sweep(path)
    facets = sweep_facets(sweep)
    st.markdown(f"**{md_literal(path.name)}** — {md_plain(shipped_sweep_answer(sweep))}")
    part = sweep
    if facets:
        facet = facets[0]
        levels = sorted(sweep[facet].dropna().unique().tolist())
        level = st.select_slider(facet.replace("_", " "), levels, key=f"ss_{path.stem}_{facet}")
        part = sweep[sweep[facet] == level]
    paired = paired_sweep_answer(part)
    if paired:
        st.markdown(md_plain(paired))
    raw = st.toggle("Show the numbers before the gate (not a verdict)", key=f"ss_{path.stem}_raw")
    shown = before_gate(part) if raw else part
    for metric, column in zip(SWEEP_METRICS, st.columns(len(SWEEP_METRICS)), strict=True):
        with column:
            fig = sweep_figure(shown, metric)
            if raw:
                fig.update_layout(title={"text": f"{SWEEP_METRICS[metric]} before the gate — "
                                         "not a verdict"})  # fmt: skip
            plot(fig, f"ss_{path.stem}_{metric}")
    with st.expander(f"{path.name}: the rows"):
        table(part, f"ss_{path.stem}_table")


def curves_view(ws: Workspace, settings: EvalSettings) -> None:
    """The Curves view: the stored curves of the models with checkpoints, answer first."""
    names = curve_model_names(ws)
    unlearned = [m.name for m in ws.models if m.name in names and m.role != "original"]
    st.session_state.setdefault("cv_models", (unlearned or names)[:1])
    chosen = st.multiselect("Models with checkpoints", names, key="cv_models")
    width = st.number_input("W: the best checkpoint's calibrated OTR lies within ±W of the "
                            "retrained model's", 0.01, 1.0, 0.1, 0.01, key="cv_width")  # fmt: skip
    if not chosen:
        st.info("Choose a model with checkpoints.")
        return
    curves = checkpoint_curves(ws, settings, chosen, fingerprint=dataset_bundle(ws).fingerprint,
                               width=float(width))  # fmt: skip
    for line in curves_answer(curves):
        st.markdown(line)
    st.caption(f"Best-checkpoint rule: {md_plain(curves.rule)}.")
    checkpoints = curves.table[curves.table["point"] == "checkpoint"]
    if not checkpoints["stored"].any():
        st.info("None of these checkpoints is stored at these settings: evaluate them below "
                "or with `python -m sde_core evaluate-checkpoints WORKSPACE`.")  # fmt: skip
    else:
        plot(curves_figure(curves.table, reference=curves.reference, width=float(width),
                           best=curves.best), "cv_fig")  # fmt: skip
    with st.expander("Curve table"):
        table(curves.table, "cv_table")
    if curves.missing:
        guess = f"~{curves.seconds:.0f} s" if curves.seconds is not None else "time unknown"
        if st.button(f"Evaluate the {curves.missing} missing checkpoint(s) (forecast {guess})",
                     key="cv_run"):  # fmt: skip
            done = run_with_progress(
                lambda progress: evaluate_missing_checkpoints(ws, settings, chosen, progress),
                f"Evaluating {curves.missing} checkpoint(s)…",
            )
            if done is not None:
                st.rerun()


view, ws, settings = open_page("sweeps", SweepsView)
st.title("Sweeps")
files = shipped_sweep_files(ws)
if files:
    st.subheader("Shipped sweeps")
    for file in files:
        with guarded(f"Cannot show the sweep file {file.name}"):
            shipped_sweep(file)
if curve_model_names(ws):
    st.subheader("Curves: checkpoints of a run")
    with guarded("Cannot show the checkpoint curves"):
        curves_view(ws, settings)
st.subheader("Run a sweep")
with st.expander("Experiment plans (the paper's protocols: `run-plan`, local or on Ray)"):
    plan_results()
st.caption(
    "Each point is a full evaluation from the cached activations; points already in the "
    "results store are read back. Other settings come from the sidebar."
)
originals = ws.named("original") or [ws.models[0].name]
apply_link(view, ws, settings, originals[0])
param = st.radio("Sweep", list(PARAMS), format_func=PARAMS.__getitem__, horizontal=True,
                 key="sw_param")  # fmt: skip
models: list[str] = []
with guarded("Cannot run this sweep"):
    values = sweep_values(ws, settings, param, originals[0])
    names = [m.name for m in ws.models]
    default = originals[:1] + ws.named("retrained")[:1]
    st.session_state.setdefault(models_key(param), originals[:1] if param == "checkpoint"
                                else default)  # fmt: skip
    models = st.multiselect("Models", names, key=models_key(param))
    if not values or not models:
        st.info("Choose at least one value and one model.")
    else:
        sweep = run(ws, settings, param, values, models)
        if sweep is not None:
            markers = markers_of(ws, settings, models[0]) if param == "sigma" else None
            paired = paired_sweep_answer(sweep)
            if paired:
                st.markdown(md_plain(paired))
            for metric, column in zip(SWEEP_METRICS, st.columns(len(SWEEP_METRICS)), strict=True):
                with column:
                    plot(sweep_figure(sweep, metric, markers=markers), f"sw_{metric}")
            with st.expander("Sweep table"):
                table(sweep, "sw_table")
publish(SweepsView(sweep=param, values=values_param(param, settings), models=tuple(models)))
