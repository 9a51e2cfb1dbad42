"""Streamlit helpers shared by the dashboard pages: the view (URL), settings, evaluations.

Every number shown comes from :mod:`sde_core`; this module only loads, caches and displays.

Views: a page starts with :func:`begin_page`, which returns the page's typed view decoded from
the link that opened it (:mod:`sde_core.services.view_state`), and ends with :func:`publish`,
which writes the page's view, with the workspace and the settings, back into the URL and shows
a copyable link to it. The session state stays the source of truth; a link is applied once,
when it arrives.

Caching: the dataset bundle and layer listings live in ``st.cache_resource`` keyed by content
hashes; evaluation results live in one process-wide
:class:`~sde_core.services.result_cache.ResultCache` keyed by ``(workspace hash, settings
dict, models)``, which this module hands to the evaluation cascade and cost policy of
:mod:`sde_core.services.cascade` and
:mod:`sde_core.services.evaluation` (this module adds the progress displays, Stop buttons and
confirmations around them). Activations always come from the on-disk
activation cache, so changing σ, bins or a plot option never re-extracts them, and finished
models are stored in the workspace's results store as they complete.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from pages import APP_ROOT
from pages import PAGES as NAV_PAGES
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.common.paths import allowed_roots, resolve_in_roots
from sde_core.common.sigma import MEDIAN, SQRT_DIM, Sigma, parse_sigma
from sde_core.common.validation import SIGMA_MIN
from sde_core.errors import SDEError
from sde_core.services.answer import verdict_notes
from sde_core.services.cascade import (
    EvalSettings,
    EvaluationCancelled,
    EvaluationResult,
    Evaluations,
    EvaluationSession,
    PartialEvaluation,
    Progress,
    StagedWork,
    process_cache,
)
from sde_core.services.evaluation import (
    Thumbnails,
    confirmation_token,
    priced_layers,
    runs_without_asking,
    thumbnails,
    thumbnails_key,
)
from sde_core.services.result_cache import ResultCache
from sde_core.services.view_state import (
    NUMBER_WIDGETS,
    PUBLIC_URL_ENV,
    SIGMA_WIDGET,
    PageView,
    decode,
    encode,
    hash_matches,
    link_hash,
    public_base_url,
    view_link,
)
from sde_core.services.workspace_info import (
    DatasetBundle,
    LayerInfo,
    Workspace,
    content_hash,
    layer_listing_key,
    load_bundle,
    load_workspace,
    model_layer_infos,
)
from sde_core.viz.figures import PLOTLY_CONFIG
from sde_core.viz.formatting import format_number, format_percent, style_table
from sde_core.viz.glossary import GLOSSARY, help_text
from sde_core.viz.verdicts import VERDICT_ICONS, explain_verdict

WS_KEY = "ws_path"
#: Session key of the open link's workspace as it was written, with the folder it resolved to.
WS_AS_SENT_KEY = "ws_as_sent"
STOP_KEY = "stop_requested"
SETTINGS_OWNER = "settings_workspace"
URL_KEY = "url_published"
CONFIRMED_KEY = "costs_confirmed"
#: Session key of a link whose workspace hash differs from the open workspace's.
MISMATCH_KEY = "link_mismatch"
#: The σ widget's choices -> the kind of σ they give (:class:`~sde_core.common.sigma.Sigma`):
#: the √d rule, a multiple f·√d (f in ``s_sigma_factor``), the median rule, a value
#: (``s_sigma_value``).
SIGMA_RULES = {
    f"√d rule ({SQRT_DIM})": SQRT_DIM,
    "multiple of √d": "factor",
    f"{MEDIAN} rule": MEDIAN,
    "value": "value",
}
#: Session keys of the evaluation settings (plain keys: they survive page switches); each
#: number setting of the sidebar lives in ``s_<name>``.
SETTING_KEYS = (
    "s_layer",
    "s_sigma_rule",
    "s_sigma_value",
    "s_sigma_factor",
    *(f"s_{s.name}" for s in NUMBER_WIDGETS),
)
#: Page name -> script (for ``st.page_link``).
PAGES = {name: script for name, (script, _, _) in NAV_PAGES.items()}
SHARE_HELP = (
    "Copy it (button at the right of the box) to share exactly this page, workspace, settings "
    "and selection. The link names the workspace folder and its content hash: a server whose "
    "folder holds other files says so instead of showing other numbers. Others can open it "
    f"only where this server is reachable (set ${PUBLIC_URL_ENV} to its public address)."
)


def default_workspace() -> str:
    """The workspace opened first: ``$SDE_WORKSPACE`` or the bundled demo."""
    return os.environ.get("SDE_WORKSPACE", "assets/demo")


# ------------------------------------------------------------------------------- views


def publish(view: PageView) -> None:
    """Write ``view`` with the open workspace (folder and content hash) and the session's
    settings into the URL, and show the link to it in the sidebar."""
    workspace = str(st.session_state.get(WS_KEY) or default_workspace())
    digest = workspace_digest(workspace)
    sent = st.session_state.get(WS_AS_SENT_KEY)
    if sent is not None and sent[1] == workspace:
        workspace = sent[0]
    settings = _session_settings() if all(k in st.session_state for k in SETTING_KEYS) else {}
    view = dataclasses.replace(
        view,
        workspace=workspace,
        workspace_hash=None if digest is None else link_hash(digest),
        settings=settings,
    )
    query = encode(view)
    st.query_params.from_dict(query)
    st.session_state[URL_KEY] = dict(query)
    base = public_base_url(st.context.url)
    with st.sidebar:
        st.markdown("**Link to this view**", help=SHARE_HELP)
        link = view_link(base, view.PAGE, query, pages=NAV_PAGES)
        st.code(link, language=None, wrap_lines=True)
        configured = os.environ.get(PUBLIC_URL_ENV, "").strip()
        if configured and base != configured:
            st.caption(f"${PUBLIC_URL_ENV} = {md_literal(configured)} is not an http(s) address: "
                       "the link uses this browser's address.")  # fmt: skip


def workspace_digest(path: str) -> str | None:
    """The content hash of the workspace at ``path`` (:func:`workspace_key`), or None when it
    cannot be opened or has no models."""
    try:
        return workspace_key(load_workspace(path))
    except SDEError:
        return None


def _candidate_workspaces(*extra: str) -> list[str]:
    """Workspaces this server can offer for a link: ``extra``, the default, the bundled demos."""
    demos = sorted(str(p.parent) for p in (app_root() / "assets").glob("*/workspace.toml"))
    found = []
    for path in dict.fromkeys([*extra, default_workspace(), *demos]):
        try:
            resolve_in_roots(path, allowed_roots(), what="workspace folder")
        except SDEError:
            continue
        found.append(path)
    return found


def _check_link_hash(linked_hash: str, linked_path: str | None) -> None:
    """Compare a link's workspace hash with the open workspace; remember a mismatch (and a
    workspace of this server that matches the link, if any) for :func:`_show_link_mismatch`."""
    path = str(st.session_state.get(WS_KEY) or default_workspace())
    digest = workspace_digest(path)
    if digest is not None and hash_matches(linked_hash, digest):
        st.session_state.pop(MISMATCH_KEY, None)
        return
    match = next(
        (
            p
            for p in _candidate_workspaces(*([linked_path] if linked_path else []))
            if p != path and hash_matches(linked_hash, workspace_digest(p) or "")
        ),
        None,
    )
    st.session_state[MISMATCH_KEY] = {
        "path": path,
        "linked": linked_hash,
        "open": digest,
        "match": match,
    }


def _open_matching(path: str) -> None:
    """Open the workspace that matches the link, keeping the link's settings (the link counts
    as applied, so its ``ws`` does not reopen the other workspace on the rerun)."""
    st.session_state[URL_KEY] = {k: str(v) for k, v in st.query_params.to_dict().items()}
    st.session_state[WS_KEY] = path
    st.session_state[SETTINGS_OWNER] = str(load_workspace(path, validate=False).root)
    st.session_state.pop(MISMATCH_KEY, None)


def _show_link_mismatch() -> None:
    """The mismatch between the link and the open workspace, while that workspace is open."""
    mismatch = st.session_state.get(MISMATCH_KEY)
    if not mismatch or mismatch["path"] != str(st.session_state.get(WS_KEY) or default_workspace()):
        return
    now = md_literal(mismatch["open"][:16]) if mismatch["open"] else "no hash (it cannot be opened)"
    st.warning(
        f"This link was made on a workspace with content hash {md_literal(mismatch['linked'])}, "
        f"but the workspace open here, {md_literal(mismatch['path'])}, has {now}: the numbers "
        "below are NOT the "
        "ones the link's sender saw.",
        icon=":material/link_off:",
    )
    if mismatch["match"]:
        st.button(
            f"Open {md_literal(mismatch['match'])}, which matches the link",
            on_click=_open_matching,
            args=(mismatch["match"],),
            type="primary",
            key="open_matching_workspace",
        )
    else:
        st.caption(
            "No workspace on this server has the link's hash: ask the sender for the workspace "
            "folder, or for the report, whose manifest pins every file."
        )


def begin_page(page: str) -> PageView:
    """Start a page: read the link that opened it.

    A link's ``ws`` parameter opens that workspace (inside the allowed folders) and its ``wsh``
    (the content hash of the workspace it was made on) is checked against the workspace then
    open: on a difference the page says so above everything else and offers a workspace of
    this server that matches, if one does. Every value of the link that cannot be used is
    named in a warning (the page keeps its current value). The link's other parameters are
    applied by the page (its fields of the returned view) and by :func:`settings_sidebar`.
    """
    incoming = {k: str(v) for k, v in st.query_params.to_dict().items()}
    fresh = bool(incoming) and incoming != st.session_state.get(URL_KEY)
    view, problems = decode(page, incoming if fresh else {})
    for problem in problems:
        st.warning(literal(problem))
    linked = view.workspace
    if linked:
        try:
            path = resolve_in_roots(linked, allowed_roots(), what="workspace folder")
            load_workspace(path, validate=False)
            st.session_state[WS_KEY] = str(path)  # the folder checked, as "Open folder" keeps
            # the link keeps the folder as its sender wrote it (a relative path stays relative:
            # a re-shared link neither leaks this server's layout nor names another checkout)
            st.session_state[WS_AS_SENT_KEY] = (linked, str(path))
        except SDEError as exc:
            shown = st.session_state.get(WS_KEY) or default_workspace()
            st.error(
                f"The link's workspace cannot be opened: {md_plain(exc)}. Showing the workspace "
                f"{md_literal(shown)} instead — its numbers are not the link's."
            )
    linked_hash = view.workspace_hash
    if linked_hash is not None:
        _check_link_hash(linked_hash, linked)
    _show_link_mismatch()
    return view


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


def literal(message: object) -> str:
    """A message shown as written: markdown's emphasis marks escaped (``0.5*sqrt_dim`` would
    otherwise lose its ``*`` and turn italic); code spans in backticks are kept."""
    parts = str(message).split("`")
    return "`".join(p if i % 2 else p.replace("*", "\\*") for i, p in enumerate(parts))


@contextmanager
def guarded(context: str) -> Iterator[None]:
    """Show any :class:`SDEError` raised inside as an inline error (with its fix), not a
    traceback; the rest of the page keeps running."""
    try:
        yield
    except SDEError as exc:
        st.error(f"{context}: {md_plain(exc)}")


def current_workspace() -> Workspace:
    """The open workspace; on a load error show it with a link to the Workspace page and stop."""
    path = st.session_state.setdefault(WS_KEY, default_workspace())
    try:
        ws = load_workspace(path)
    except SDEError as exc:
        st.error(f"Cannot open the workspace {md_literal(path)}: {md_plain(exc)}")
        st.page_link(PAGES["workspace"], label="Open or fix a workspace on the Workspace page")
        st.stop()
        raise  # unreachable: st.stop() ends the run
    if not ws.models:
        st.warning(
            f"The workspace {md_literal(path)} has no models yet: add checkpoints to evaluate."
        )
        st.page_link(PAGES["workspace"], label="Build or open a workspace")
        st.stop()
    return ws


@st.cache_resource(show_spinner="Loading the dataset…", max_entries=4)
def _bundle(root: str, dataset_key: str, _ws: Workspace) -> DatasetBundle:
    return load_bundle(_ws)


def dataset_bundle(ws: Workspace) -> DatasetBundle:
    """The workspace's dataset, loaded once per (folder, ``[dataset]`` table)."""
    return _bundle(str(ws.root), stable_hash(ws.dataset), ws)


@st.cache_resource(show_spinner=False, max_entries=64)
def _thumbnails(ws_key: str, model: str, target: int, count: int, settings_key: str,
                _ws: Workspace, _settings: EvalSettings) -> Thumbnails | None:  # fmt: skip
    return thumbnails(_ws, dataset_bundle(_ws), _settings, model, target, count)


def cached_thumbnails(
    ws: Workspace, settings: EvalSettings, model: str, target: int, count: int
) -> Thumbnails | None:
    """:func:`~sde_core.services.evaluation.thumbnails`, kept per workspace, model, target and
    the settings they depend on (a σ, bins or α change reuses them: no model is run)."""
    return _thumbnails(workspace_key(ws), model, int(target), int(count),
                       thumbnails_key(settings), ws, settings)  # fmt: skip


def workspace_key(ws: Workspace) -> str:
    """Content hash of the workspace (data fingerprint, forget set, checkpoint hashes)."""
    return content_hash(ws, dataset_bundle(ws))


@st.cache_resource(show_spinner="Listing the model's layers…", max_entries=32)
def _layers(model_key: str, shape: tuple[int, ...], _ws: Workspace, name: str) -> list[LayerInfo]:
    return model_layer_infos(_ws, name, shape)


def model_layers(ws: Workspace, name: str) -> list[LayerInfo]:
    """The real layers of a model (aliases first) with their per-sample shapes, or the layers of
    its activations file."""
    key = layer_listing_key(ws, name)
    return _layers(key, tuple(dataset_bundle(ws).input_shape), ws, name)


def layer_label(info: LayerInfo) -> str:
    """``"penultimate — (128,) · d = 128 · shortcut"`` / ``"conv1 — (32×14×14) · d = 32 ·
    Conv2d"``: no internal names (an alias says it is a shortcut, not which tap it reads; a
    private module class such as ``_Tap`` is shown as a hidden state)."""
    shape = "×".join(str(s) for s in info.output_shape)
    kind = info.module_type
    if kind.startswith("alias of"):
        kind = "shortcut"
    elif kind.startswith("_"):
        kind = "hidden state"
    return f"{info.name} — ({shape}) · d = {info.dim} · {kind}"


# ------------------------------------------------------------------------------- settings


def _sigma_state(sigma: str | float) -> dict[str, Any]:
    """The σ widget's session values for a σ (rule choice, value, factor)."""
    spec = parse_sigma(sigma)
    factor = spec.sqrt_d_factor()
    kind = "factor" if factor not in (None, 1.0) else spec.kind
    state: dict[str, Any] = {"s_sigma_rule": next(k for k, v in SIGMA_RULES.items() if v == kind)}
    if kind == "value":
        state["s_sigma_value"] = spec.number
    if kind == "factor":
        state["s_sigma_factor"] = spec.number
    return state


def _init_settings(ws: Workspace) -> None:
    """Reset the settings widgets to the workspace's ``[defaults]`` when it changes."""
    owner = str(ws.root)
    if st.session_state.get(SETTINGS_OWNER) == owner and all(
        k in st.session_state for k in SETTING_KEYS
    ):
        return
    d = ws.defaults
    st.session_state.update(
        {
            SETTINGS_OWNER: owner,
            "s_layer": d.layer,
            "s_sigma_value": 1.0,
            "s_sigma_factor": 1.0,
            **_sigma_state(d.sigma),
            **{f"s_{s.name}": _number(s, getattr(d, s.name)) for s in NUMBER_WIDGETS},
        }
    )
    st.session_state.pop("compare_layers", None)
    st.session_state.pop("x_model", None)


def _apply_linked_settings(view: PageView) -> None:
    """Copy the settings a link carries into the session (their problems were named by
    :func:`begin_page`)."""
    for name, value in view.settings.items():
        if name == "sigma":
            st.session_state.update(_sigma_state(value))
        else:
            st.session_state[f"s_{name}"] = value  # the layer or a number setting


def _session_settings() -> dict[str, Any]:
    """The settings of the session's widgets (unvalidated)."""
    s = st.session_state
    rule = SIGMA_RULES[s["s_sigma_rule"]]
    sigma = {
        "value": float(s["s_sigma_value"]),
        "factor": Sigma.times_sqrt_d(float(s["s_sigma_factor"])).setting(),
    }.get(rule, rule)
    return {
        "layer": s["s_layer"],
        "sigma": sigma,
        **{entry.name: _number(entry, s[f"s_{entry.name}"]) for entry in NUMBER_WIDGETS},
    }


def _number(entry: Any, value: Any) -> int | float:
    """``value`` as the type of the number setting ``entry`` (``int`` or ``float``)."""
    return int(value) if entry.kind == "int" else float(value)


def _number_input(entry: Any) -> None:
    """The sidebar's number input of ``entry``, a number setting of the settings table (its
    bounds, step, label and glossary help)."""
    lo, hi = entry.minimum, entry.maximum
    st.number_input(
        entry.widget_label,
        min_value=None if lo is None else _number(entry, lo),
        max_value=None if hi is None else _number(entry, hi),
        step=_number(entry, entry.step),
        help=help_text(entry.name),
        **bound(f"s_{entry.name}"),
    )


def settings_sidebar(ws: Workspace, view: PageView | None = None) -> EvalSettings:
    """Sidebar widgets of the evaluation settings (built from the settings table); returns
    the validated settings.

    The settings of ``view``'s link (if any) are applied first. On invalid settings the error
    (with its fix) is shown and the page stops.
    """
    _init_settings(ws)
    if view is not None:
        _apply_linked_settings(view)
    sigma = SIGMA_WIDGET
    with st.sidebar:
        st.subheader("Evaluation settings")
        st.caption(
            f"Workspace: **{md_plain(ws.name or ws.root.name)}** · defaults from its workspace.toml"
        )
        st.radio(sigma.widget_label, list(SIGMA_RULES), help=help_text(sigma.name),
                 **bound("s_sigma_rule"))  # fmt: skip
        rule = SIGMA_RULES[st.session_state["s_sigma_rule"]]
        if rule == "value":
            st.number_input("σ value", min_value=SIGMA_MIN, format="%.4g", **bound("s_sigma_value"))
        elif rule == "factor":
            st.number_input("factor f of σ = f·√d", min_value=SIGMA_MIN, format="%.4g",
                            **bound("s_sigma_factor"))  # fmt: skip
        for entry in NUMBER_WIDGETS:
            if not entry.advanced:
                _number_input(entry)
        with st.expander("More settings"):
            for entry in NUMBER_WIDGETS:
                if entry.advanced:
                    _number_input(entry)
    return current_settings(ws)


def current_settings(ws: Workspace, **overrides: Any) -> EvalSettings:
    """The settings from the session (layer included), with ``overrides``; stops on errors."""
    _init_settings(ws)
    values = _session_settings()
    values.update(overrides)
    try:
        base = EvalSettings.from_mapping(dataclasses.asdict(ws.defaults))
        return base.with_overrides(**values)
    except SDEError as exc:
        st.error(f"Invalid settings: {md_plain(exc)}")
        st.stop()
        raise  # unreachable


# ------------------------------------------------------------------------------- evaluation
# The cascade (cache -> results store -> session) and the cost policy are in
# sde_core.services (cascade.py, evaluation.py); here are the Streamlit caches they are given
# and the progress displays, Stop buttons and confirmations around them.


def shared_cache() -> ResultCache:
    """The process-wide LRU of results, keyed by content hashes (workspace, settings, …); the
    server's launcher (``serve.py``) fills it with the default workspace's stored results."""
    return process_cache()


@st.cache_resource(show_spinner="Opening the workspace for interactive evaluation…",
                   max_entries=4)  # fmt: skip
def _session(root: str, ws_hash: str, _ws: Workspace) -> EvaluationSession:
    return EvaluationSession(_ws)


def evaluation_session(ws: Workspace) -> EvaluationSession:
    """The workspace's :class:`EvaluationSession` (one per folder and content hash): it keeps
    the activations and the stage cache between reruns, so a σ, bins or α change recomputes
    only what it changes (method §12)."""
    return _session(str(ws.root), workspace_key(ws), ws)


def _store_warning(exc: SDEError) -> None:
    st.warning(f"Results are not saved to disk ({exc}); they are kept for this session only.")


def evaluations(ws: Workspace) -> Evaluations:
    """The workspace's evaluations (:class:`~sde_core.services.cascade.Evaluations`) over this
    server's caches; a results store that cannot be opened is a warning, not an error.

    Raises:
        SDEError: the workspace's content hash cannot be computed (e.g. unreadable data).
    """
    return Evaluations(
        ws, workspace_key(ws), shared_cache(), lambda: evaluation_session(ws), _store_warning
    )


def _request_stop() -> None:
    st.session_state[STOP_KEY] = True


def _clear_stop() -> None:
    st.session_state[STOP_KEY] = False


def _show_stopped() -> None:
    st.info(
        "Stopped. Every model that had finished is kept in the workspace's results store and "
        "will not be recomputed."
    )
    st.button("Resume", on_click=_clear_stop, type="primary", key="resume_button")


def run_with_progress(work: Callable[[Progress], Any], what: str) -> Any:
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
            raise EvaluationCancelled(None)
        bar.progress(min(1.0, done / total) if total else 1.0, text=f"{stage}: {done}/{total}")

    try:
        return work(progress)
    except EvaluationCancelled:
        _show_stopped()
        return None
    finally:
        slot.empty()


def _label(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} models"


def evaluate(
    ws: Workspace, settings: EvalSettings, models: Sequence[str] | None = None
) -> EvaluationResult | None:
    """Evaluate (or fetch) ``models`` under ``settings``; errors are shown inline.

    Returns:
        The result, or None when evaluation failed (error shown) or was stopped.
    """
    try:
        source = evaluations(ws)
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {md_plain(exc)}")
        return None
    names = list(models) if models is not None else [m.name for m in ws.models]
    what = f"Evaluating {_label(names)} at layer {md_literal(settings.layer)}…"
    try:
        return source.evaluate(settings, names, lambda work: run_with_progress(work, what))
    except SDEError as exc:
        st.error(f"Evaluation failed: {md_plain(exc)}")
        return None


def _compare_progress(names: list[str], settings: EvalSettings) -> Any:
    """The Compare page's runner: a box with the overall and the per-model progress and Stop."""

    def run(work: StagedWork) -> EvaluationResult | None:
        if st.session_state.get(STOP_KEY):
            _show_stopped()
            return None
        slot = st.empty()
        box = slot.container(border=True)
        box.caption(f"Evaluating {len(names)} models at layer {md_literal(settings.layer)}…")
        overall = box.progress(0.0, text=f"model 1 of {len(names)}")
        bar = box.progress(0.0, text="loading the activations…")
        box.button("Stop", on_click=_request_stop, key=f"stop_compare_{settings.layer}")

        def on_update(part: PartialEvaluation) -> None:
            i = names.index(part.model)
            overall.progress(i / len(names), text=f"model {i + 1} of {len(names)}: {part.model}")
            bar.progress(part.done / part.total, text=f"{part.model}: {part.label}")

        try:
            return work(on_update, lambda: bool(st.session_state.get(STOP_KEY)))
        except EvaluationCancelled:
            _show_stopped()
            return None
        finally:
            slot.empty()

    return run


def compare_evaluate(ws: Workspace, settings: EvalSettings) -> EvaluationResult | None:
    """Every model at ``settings`` for the Compare page, with per-model progress and Stop
    (:meth:`~sde_core.services.cascade.Evaluations.compare`: cache, results store, or the
    session's Compare stages). Errors are shown inline.

    Returns:
        The result, or None when evaluation failed (error shown) or was stopped.
    """
    try:
        source = evaluations(ws)
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {md_plain(exc)}")
        return None
    names = [m.name for m in ws.models]
    what = f"Evaluating {_label(names)} at layer {md_literal(settings.layer)}…"
    try:
        return source.compare(
            settings,
            lambda work: run_with_progress(work, what),
            _compare_progress(names, settings),
        )
    except SDEError as exc:
        st.error(f"Evaluation failed: {md_plain(exc)}")
        return None


def affordable_layers(
    ws: Workspace, settings: EvalSettings, layers: Sequence[str], prefix: str
) -> list[str]:
    """The layers to evaluate every model at now, asking first where that is expensive.

    A layer is evaluated at once when it is ready or cheap
    (:func:`~sde_core.services.evaluation.runs_without_asking`, at a throughput measured on
    this machine); otherwise its cost is shown with a button, and it is evaluated once the
    user accepts.

    Args:
        prefix: the page's widget-key prefix (one button per page and layer).
    """
    ws_hash = workspace_key(ws)
    costs = priced_layers(
        ws, dataset_bundle(ws), settings, layers, ws_hash, shared_cache(),
        lambda name: st.spinner(f"Timing {name} on 256 rows to estimate the cost…"),
    )  # fmt: skip
    confirmed: set = st.session_state.setdefault(CONFIRMED_KEY, set())
    out = []
    for cost in costs:
        token = confirmation_token(ws_hash, settings, cost.layer)
        if runs_without_asking(cost) or token in confirmed:
            out.append(cost.layer)
            continue
        with st.container(border=True):
            st.markdown(f"{md_literal(cost.layer)} is not cached yet: {cost.describe()}.")
            if st.button(f"Evaluate {md_literal(cost.layer)}", key=f"{prefix}_go_{cost.layer}",
                         type="primary"):  # fmt: skip
                confirmed.add(token)
                st.rerun()
    return out


# ------------------------------------------------------------------------------- display


def plot(fig: Any, key: str | None = None) -> None:
    """Show a plotly figure with the project's chart config (camera button exports PNG)."""
    st.plotly_chart(fig, config=PLOTLY_CONFIG, key=key)


def fmt(value: Any, digits: int = 3) -> str:
    """A number for display (:func:`sde_core.viz.formatting.format_number`)."""
    return format_number(value, digits=digits)


def fmt_p(value: Any) -> str:
    """A p-value for display (scientific below 10⁻³, 2 significant digits)."""
    return format_number(value, digits=2)


def pct(value: Any) -> str:
    """A rate in [0, 1] as a whole percentage."""
    return format_percent(value)


def headline_value(row: Mapping[str, Any], key: str, show: Callable[[Any], str]) -> str:
    """A headline number as text; ``"withheld"`` when the gate withholds it with a reason
    (``inconclusive_reason``, method §12), ``"n/a"`` when it is missing."""
    value = row.get(key)
    reason = row.get("inconclusive_reason")
    withheld = value is None or (isinstance(value, float) and value != value)
    if withheld and isinstance(reason, str) and reason.strip():
        return "withheld"
    return show(value)


def metric(column: Any, label: str, value: str, key: str, **kwargs: Any) -> None:
    """``column.metric`` with the glossary definition of ``key`` on hover."""
    column.metric(label, value, help=help_text(key), **kwargs)


def table(
    df: pd.DataFrame,
    key: str,
    *,
    columns: Mapping[str, str] | None = None,
    pinned: Sequence[str] = (),
    **kwargs: Any,
) -> None:
    """A table with readable numbers and the glossary definitions on its column headers.

    Args:
        df: the table (numbers stay numbers: sorting and the CSV download keep precision).
        key: the element key.
        columns: displayed column name -> glossary key, for the header tooltips (columns whose
            name is itself a glossary key need no entry).
        pinned: columns kept in view while the table scrolls sideways (e.g. model, verdict).
    """
    config: dict[str, Any] = {}
    glossary_keys = dict(columns or {})
    for column in df.columns:
        name = str(column)
        entry = glossary_keys.get(name, name if name in GLOSSARY else None)
        if entry is not None or name in pinned:
            config[name] = st.column_config.Column(
                help=help_text(entry, link=None) if entry is not None else None,
                pinned=True if name in pinned else None,
            )
    st.dataframe(style_table(df), key=key, column_config=config, hide_index=True, **kwargs)


def show_verdict(
    row: Mapping[str, Any],
    targets: int,
    retrain: Mapping[str, Any] | None,
    *,
    name: bool = True,
    compare: bool = True,
    draws: Any = None,
    provisional: str = "",
) -> None:
    """A model's verdict: its short sentence in the verdict's style (a warning for conflicting
    evidence, marked provisional while the evaluation runs), the evidence it rests on and what
    it cannot certify behind an expander."""
    layer = str(row.get("layer") or "")  # the family's verdict note (a language model's)
    note = verdict_notes(current_workspace(), layer).get(str(row.get("name")), "")
    explained = explain_verdict(
        row, targets, retrain, compare=compare, draws=draws, provisional=provisional, note=note
    )
    who = f"{md_plain(row['name'])} ({row.get('role', '')}) — " if name else ""
    text = f"**{who}{explained.headline}.** {explained.short}"
    if provisional:
        text += " The verdict may change when the run completes."
    show = {"error": st.error, "warning": st.warning, "success": st.success}.get(
        explained.style, st.info
    )
    show(text, icon=VERDICT_ICONS.get(explained.label, ":material/info:"))
    with st.expander("Evidence and limits"):
        st.markdown(explained.body)


def app_root() -> Path:
    """The folder of ``app.py`` (where the bundled demos live under ``assets/``)."""
    return APP_ROOT
