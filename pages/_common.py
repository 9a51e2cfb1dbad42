"""Streamlit helpers shared by the dashboard pages: workspace state, settings, evaluations.

Every number shown comes from :mod:`sde_core`; this module only loads, caches and displays.

Caching: the dataset bundle and layer listings live in ``st.cache_resource`` keyed by content
hashes; evaluation results live in one process-wide :class:`~sde_core.viz.ui_support.ResultCache`
keyed by ``(workspace hash, settings dict, models)``. Activations always come from the on-disk
activation cache, so changing σ, bins or a plot option never re-extracts them, and finished
models are stored in ``<workspace>/.sde-cache/results.sqlite`` as they complete.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import streamlit as st

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import SDEError
from sde_core.inputs.activations import LayerInfo, list_layers
from sde_core.inputs.data import DatasetBundle, load_dataset
from sde_core.inputs.models import load_checkpoint
from sde_core.pipeline.evaluate import EvalSettings, EvaluationResult, evaluate_workspace
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import Workspace, load_workspace, workspace_hash
from sde_core.viz.figures import PLOTLY_CONFIG
from sde_core.viz.ui_support import ResultCache

WS_KEY = "ws_path"
STOP_KEY = "stop_requested"
SETTINGS_OWNER = "settings_workspace"
#: Session keys of the evaluation settings (plain keys: they survive page switches).
SETTING_KEYS = (
    "s_layer",
    "s_sigma_rule",
    "s_sigma_value",
    "s_subset_size",
    "s_targets",
    "s_splits",
    "s_seed",
    "s_bins",
    "s_panel_size",
)
SIGMA_RULES = {"√d rule (sqrt_dim)": "sqrt_dim", "median rule": "median", "value": "value"}
PAGES = {
    "workspace": "pages/workspace.py",
    "explore": "pages/explore.py",
    "compare": "pages/compare.py",
    "sweeps": "pages/sweeps.py",
    "report": "pages/report.py",
}


def _leave_legacy_navigation() -> None:
    """Run every page through ``app.py``'s ``st.navigation``.

    Streamlit treats a ``pages/`` folder as its legacy multipage mode until ``app.py`` has called
    ``st.navigation`` once in the server process, so a first visit on a deep link (``/compare``)
    would run the page alone, with the legacy page list. Switch the process over and rerun.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


_leave_legacy_navigation()


class EvaluationCancelled(Exception):
    """Raised by the progress callback when the user pressed Stop."""


def default_workspace() -> str:
    """The workspace opened first: ``$SDE_WORKSPACE`` or the bundled demo."""
    return os.environ.get("SDE_WORKSPACE", "assets/demo")


def _copy_widget(widget_key: str, key: str) -> None:
    st.session_state[key] = st.session_state[widget_key]


def bound(key: str) -> dict[str, Any]:
    """Widget kwargs that keep its value in the plain session key ``key``.

    Widget state is dropped on pages that do not show the widget; the value lives in ``key``
    instead, is copied into the widget before it is drawn and back when the user changes it.
    Use as ``st.number_input("n", **bound("s_subset_size"))``.
    """
    widget_key = f"w_{key}"
    st.session_state[widget_key] = st.session_state[key]
    return {"key": widget_key, "on_change": _copy_widget, "args": (widget_key, key)}


@contextmanager
def guarded(context: str) -> Iterator[None]:
    """Show any :class:`SDEError` raised inside as an inline error (with its fix), not a
    traceback; the rest of the page keeps running."""
    try:
        yield
    except SDEError as exc:
        st.error(f"{context}: {exc}")


def current_workspace() -> Workspace:
    """The open workspace; on a load error show it with a link to the Workspace page and stop."""
    path = st.session_state.setdefault(WS_KEY, default_workspace())
    try:
        ws = load_workspace(path)
    except SDEError as exc:
        st.error(f"Cannot open the workspace {path}: {exc}")
        st.page_link(PAGES["workspace"], label="Open or fix a workspace on the Workspace page")
        st.stop()
        raise  # unreachable: st.stop() ends the run
    if not ws.models:
        st.warning(f"The workspace {path} has no models yet: add checkpoints to evaluate.")
        st.page_link(PAGES["workspace"], label="Build or open a workspace")
        st.stop()
    return ws


@st.cache_resource(show_spinner="Loading the dataset…", max_entries=4)
def _bundle(root: str, dataset_key: str, _ws: Workspace) -> DatasetBundle:
    return load_dataset(_ws.dataset_spec())


def dataset_bundle(ws: Workspace) -> DatasetBundle:
    """The workspace's dataset, loaded once per (folder, ``[dataset]`` table)."""
    return _bundle(str(ws.root), stable_hash(ws.dataset), ws)


def workspace_key(ws: Workspace) -> str:
    """Content hash of the workspace (data fingerprint, forget set, checkpoint hashes)."""
    return workspace_hash(ws, data_fingerprint=dataset_bundle(ws).fingerprint)


@st.cache_resource(show_spinner="Listing the model's layers…", max_entries=32)
def _layers(checkpoint_sha: str, arch: str, shape: tuple[int, ...], _path: str) -> list[LayerInfo]:
    return list_layers(load_checkpoint(_path, arch=arch), shape)


def model_layers(ws: Workspace, name: str) -> list[LayerInfo]:
    """The real layers of a model (aliases first) with their per-sample shapes."""
    entry = ws.model(name)
    path = ws.path(entry.checkpoint)
    shape = tuple(dataset_bundle(ws).input_shape)
    return _layers(file_sha256(path), entry.arch, shape, str(path))


def layer_label(info: LayerInfo) -> str:
    """``"penultimate — (128,) · d = 128 · alias of head:input"``."""
    shape = "×".join(str(s) for s in info.output_shape)
    return f"{info.name} — ({shape}) · d = {info.dim} · {info.module_type}"


# ------------------------------------------------------------------------------- settings


def _init_settings(ws: Workspace) -> None:
    """Reset the settings widgets to the workspace's ``[defaults]`` when it changes."""
    owner = str(ws.root)
    if st.session_state.get(SETTINGS_OWNER) == owner and all(
        k in st.session_state for k in SETTING_KEYS
    ):
        return
    d = ws.defaults
    numeric = not isinstance(d.sigma, str)
    st.session_state.update(
        {
            SETTINGS_OWNER: owner,
            "s_layer": d.layer,
            "s_sigma_rule": "value"
            if numeric
            else next(k for k, v in SIGMA_RULES.items() if v == d.sigma),
            "s_sigma_value": float(d.sigma) if numeric else 1.0,
            "s_subset_size": int(d.subset_size),
            "s_targets": int(d.targets),
            "s_splits": int(d.splits),
            "s_seed": int(d.seed),
            "s_bins": int(d.bins),
            "s_panel_size": int(d.panel_size),
        }
    )
    st.session_state.pop("compare_layers", None)
    st.session_state.pop("x_model", None)


def settings_sidebar(ws: Workspace) -> EvalSettings:
    """Sidebar widgets of the evaluation settings; returns the validated settings.

    On invalid settings the error (with its fix) is shown and the page stops.
    """
    _init_settings(ws)
    with st.sidebar:
        st.subheader("Evaluation settings")
        st.caption(f"Workspace: **{ws.name or ws.root.name}** · defaults from its workspace.toml")
        st.radio("Kernel bandwidth σ", list(SIGMA_RULES), **bound("s_sigma_rule"))
        if st.session_state["s_sigma_rule"] == "value":
            st.number_input("σ value", min_value=1e-6, format="%.4g", **bound("s_sigma_value"))
        st.number_input("Subset size n", min_value=4, step=50, **bound("s_subset_size"))
        st.number_input("Target subsets T", min_value=2, step=10, **bound("s_targets"))
        st.number_input("Splits per subset K", min_value=2, step=50, **bound("s_splits"))
        st.number_input("Seed", min_value=0, step=1, **bound("s_seed"))
        with st.expander("More settings"):
            st.number_input("Histogram bins (JSD)", min_value=2, max_value=1000, **bound("s_bins"))
            st.number_input("Reference panel size R", min_value=3, **bound("s_panel_size"))
    return current_settings(ws)


def current_settings(ws: Workspace, **overrides: Any) -> EvalSettings:
    """The settings from the session (layer included), with ``overrides``; stops on errors."""
    _init_settings(ws)
    s = st.session_state
    rule = SIGMA_RULES[s["s_sigma_rule"]]
    values = {
        "layer": s["s_layer"],
        "sigma": float(s["s_sigma_value"]) if rule == "value" else rule,
        "subset_size": int(s["s_subset_size"]),
        "targets": int(s["s_targets"]),
        "splits": int(s["s_splits"]),
        "seed": int(s["s_seed"]),
        "bins": int(s["s_bins"]),
        "panel_size": int(s["s_panel_size"]),
    }
    values.update(overrides)
    try:
        base = EvalSettings.from_mapping(dataclasses.asdict(ws.defaults))
        return base.with_overrides(**values)
    except SDEError as exc:
        st.error(f"Invalid settings: {exc}")
        st.stop()
        raise  # unreachable


# ------------------------------------------------------------------------------- evaluation


@st.cache_resource
def shared_cache() -> ResultCache:
    """The process-wide LRU of results, keyed by content hashes (workspace, settings, …)."""
    return ResultCache(max_entries=64)


def _request_stop() -> None:
    st.session_state[STOP_KEY] = True


def _clear_stop() -> None:
    st.session_state[STOP_KEY] = False


def results_store(ws: Workspace) -> ResultsStore | None:
    """The workspace's results store, or None (with a warning) when it cannot be opened."""
    try:
        return ResultsStore(workspace_store_path(ws.root))
    except SDEError as exc:
        st.warning(f"Results are not saved to disk ({exc}); they are kept for this session only.")
        return None


def _show_stopped() -> None:
    st.info(
        "Stopped. Every model that had finished is kept in the workspace's results store and "
        "will not be recomputed."
    )
    st.button("Resume", on_click=_clear_stop, type="primary", key="resume_button")


def run_with_progress(work: Callable[[Callable[[str, int, int], None]], Any], what: str) -> Any:
    """Run ``work(progress)`` with a progress bar, the current stage and a Stop button.

    Returns:
        ``work``'s result, or None when the user stopped it (finished units stay stored).
    """
    if st.session_state.get(STOP_KEY):
        _show_stopped()
        return None
    slot = st.empty()
    box = slot.container(border=True)
    box.caption(what)
    bar = box.progress(0.0, text="starting…")
    box.button("Stop", on_click=_request_stop, key=f"stop_{stable_hash(what)[:12]}")

    def progress(stage: str, done: int, total: int) -> None:
        if st.session_state.get(STOP_KEY):
            raise EvaluationCancelled(stage)
        bar.progress(min(1.0, done / total) if total else 1.0, text=f"{stage}: {done}/{total}")

    try:
        return work(progress)
    except EvaluationCancelled:
        _show_stopped()
        return None
    finally:
        slot.empty()


def evaluate(
    ws: Workspace, settings: EvalSettings, models: Sequence[str] | None = None
) -> EvaluationResult | None:
    """Evaluate (or fetch) ``models`` under ``settings``; errors are shown inline.

    Returns:
        The result, or None when evaluation failed (error shown) or was stopped.
    """
    try:
        ws_hash = workspace_key(ws)
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {exc}")
        return None
    names = tuple(models) if models is not None else tuple(m.name for m in ws.models)
    key = ("evaluation", ws_hash, stable_hash(settings.result_key()), names)
    cached = shared_cache().get(key)
    if cached is not None:
        return cached

    def work(progress: Callable[[str, int, int], None]) -> EvaluationResult:
        store = results_store(ws)
        try:
            return evaluate_workspace(
                ws, settings, models=list(names), store=store, progress=progress
            )
        finally:
            if store is not None:
                store.close()

    label = ", ".join(names) if len(names) <= 3 else f"{len(names)} models"
    try:
        result = run_with_progress(work, f"Evaluating {label} at layer {settings.layer!r}…")
    except SDEError as exc:
        st.error(f"Evaluation failed: {exc}")
        return None
    if result is not None:
        shared_cache().put(key, result)
    return result


def plot(fig: Any, key: str | None = None) -> None:
    """Show a plotly figure with the project's chart config (camera button exports PNG)."""
    st.plotly_chart(fig, config=PLOTLY_CONFIG, key=key)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for display (``"n/a"`` when missing)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.{digits}g}" if number == number else "n/a"


def app_root() -> Path:
    """The folder of ``app.py`` (where the bundled demos live under ``assets/``)."""
    return Path(__file__).resolve().parent.parent
