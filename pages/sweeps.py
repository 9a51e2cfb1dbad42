"""Sweeps page: F1 and OTR against σ, the layer, the subset size or the training checkpoint."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from pages._common import (
    current_workspace,
    guarded,
    model_layers,
    plot,
    results_store,
    run_with_progress,
    settings_sidebar,
    shared_cache,
    workspace_key,
)
from sde_core.common.hashing import stable_hash
from sde_core.pipeline.evaluate import EvalSettings, Progress
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.sweeps import available_fractions, run_sweep, sigma_markers
from sde_core.pipeline.workspace import Workspace
from sde_core.viz.figures import plan_figure, sweep_figure
from sde_core.viz.ui_support import (
    allowed_roots,
    parse_int_values,
    parse_sigma_values,
    resolve_in_roots,
)

PARAMS = {
    "sigma": "σ (kernel bandwidth)",
    "layer": "layer",
    "subset_size": "subset size n",
    "checkpoint": "training checkpoint",
}


def sweep_values(ws: Workspace, settings: EvalSettings, param: str, original: str) -> list:
    """The widget for the values of ``param``; returns the parsed values."""
    if param == "sigma":
        dim = next(i.dim for i in model_layers(ws, original) if i.name == settings.layer)
        factors = (0.1, 0.3, 1.0, 3.0)
        default = ", ".join(f"{math.sqrt(dim) * f:.3g}" for f in factors)
        text = st.text_input(
            f"σ values (numbers, 'sqrt_dim' or 'median'; √d = {math.sqrt(dim):.3g} at "
            f"{settings.layer})",
            value=default,
            key=f"sw_sigma_{settings.layer}",
        )
        return parse_sigma_values(text)
    if param == "layer":
        names = [i.name for i in model_layers(ws, original)]
        default = [n for n in ("output", "logits", "penultimate") if n in names]
        return st.multiselect("Layers", names, default=default, key="sw_layers")
    if param == "subset_size":
        n = settings.subset_size
        default = ", ".join(str(v) for v in dict.fromkeys((max(4, n // 4), max(4, n // 2), n)))
        return parse_int_values(st.text_input("Subset sizes", value=default, key="sw_sizes"))
    fractions = available_fractions(ws.model(original))
    return st.multiselect(
        "Checkpoints (fraction of training)",
        fractions,
        default=[f for f in fractions if f > 0],
        format_func=lambda f: f"{100 * f:.0f}%",
        key="sw_fractions",
    )


def markers_of(ws: Workspace, settings: EvalSettings, model: str) -> dict[str, float]:
    """The √d and median σ of ``model`` at the settings' layer (cached by content hash)."""
    key = ("markers", workspace_key(ws), stable_hash(settings.result_key()), model)
    markers = shared_cache().get(key)
    if markers is None:
        markers = sigma_markers(ws, settings, model)
        shared_cache().put(key, markers)
    return markers


def run(
    ws: Workspace, settings: EvalSettings, param: str, values: list, models: list[str]
) -> pd.DataFrame | None:
    """Run (or fetch) the sweep with progress and Stop; None until the user starts it."""
    key = ("sweep", workspace_key(ws), stable_hash(settings.result_key()), param,
           stable_hash(values), tuple(models))  # fmt: skip
    cached = shared_cache().get(key)
    if cached is not None:
        return cached
    if not st.button("Run sweep", type="primary", key="sw_run"):
        st.info("Choose the values and press **Run sweep**; finished points are stored.")
        return None

    def work(progress: Progress) -> pd.DataFrame:
        store = results_store(ws)
        try:
            return run_sweep(ws, settings, param, values, models=models, store=store,
                             progress=progress)  # fmt: skip
        finally:
            if store is not None:
                store.close()

    table = run_with_progress(work, f"Sweeping {PARAMS[param]} over {len(values)} values…")
    if table is not None:
        shared_cache().put(key, table)
    return table


def plan_results() -> None:
    """Results of ``python -m sde_core run-plan`` (local or on Ray), read from its store.

    A plan running on a Ray cluster writes each job's rows as it finishes, so "Refresh" shows
    its progress while it runs.
    """
    path_text = st.text_input("Plan results store", value="runs/results.sqlite", key="pl_store")
    st.button("Refresh", key="pl_refresh", help="re-read the store (a running plan adds rows)")
    with guarded("Cannot read the plan results"):
        path = resolve_in_roots(path_text, allowed_roots(), what="results store", must_exist=False)
        if not path.is_file():
            st.info(f"No plan results at {path} yet: run `python -m sde_core run-plan PLAN`.")
            return
        with ResultsStore(path) as store:
            runs = store.list_runs()
            runs = runs[runs["workspace_hash"].str.startswith("plan:")]
            if runs.empty:
                st.info("No plan runs in this store yet: run `python -m sde_core run-plan PLAN`.")
                return
            labels = {int(r.id): f"{r.label} — run {r.id} ({r.status}, {r.units} jobs done)"
                      for r in runs.itertuples()}  # fmt: skip
            run_id = st.selectbox("Plan run", list(labels), format_func=labels.__getitem__,
                                  key="pl_run")  # fmt: skip
            tables = store.tables(run_id)
            points = store.rows(run_id, "points") if "points" in tables else pd.DataFrame()
        if points.empty:
            st.info("This run has no evaluation points (yet): toy runs are in REPRODUCTION.md.")
            return
        metric = st.radio("Metric", ["f1", "otr", "calibrated_otr"], horizontal=True,
                          key="pl_metric")  # fmt: skip
        plot(plan_figure(points, metric), "pl_fig")
        st.dataframe(points, hide_index=True, key="pl_table")


ws = current_workspace()
settings = settings_sidebar(ws)
st.title("Sweeps")
with st.expander("Experiment plans (the paper's protocols: `run-plan`, local or on Ray)"):
    plan_results()
st.caption(
    "Each point is a full evaluation from the cached activations; points already in the "
    "results store are read back. Other settings come from the sidebar."
)
originals = [m.name for m in ws.models if m.role == "original"] or [ws.models[0].name]
param = st.radio("Sweep", list(PARAMS), format_func=PARAMS.__getitem__, horizontal=True,
                 key="sw_param")  # fmt: skip
with guarded("Cannot run this sweep"):
    values = sweep_values(ws, settings, param, originals[0])
    names = [m.name for m in ws.models]
    default = originals[:1] + [m.name for m in ws.models if m.role == "retrained"][:1]
    models = st.multiselect(
        "Models",
        names,
        default=originals[:1] if param == "checkpoint" else default,
        key=f"sw_models_{param == 'checkpoint'}",
    )
    if not values or not models:
        st.info("Choose at least one value and one model.")
        st.stop()
    table = run(ws, settings, param, values, models)
    if table is not None:
        markers = markers_of(ws, settings, models[0]) if param == "sigma" else None
        left, right = st.columns(2)
        with left:
            plot(sweep_figure(table, "f1", markers=markers), "sw_f1")
        with right:
            plot(sweep_figure(table, "otr", markers=markers), "sw_otr")
        with st.expander("Sweep table"):
            st.dataframe(table, hide_index=True, key="sw_table")
