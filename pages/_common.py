"""The page frame shared by the dashboard pages: the open workspace, the link, the caches.

Every number shown comes from :mod:`sde_core`; the ``pages._*`` modules only load, cache and
display: this one the frame, :mod:`pages._settings` the settings sidebar, :mod:`pages._run`
the evaluations with their progress and Stop buttons, :mod:`pages._display` tables, charts and
verdicts.

Views: a page starts with :func:`open_page`, which reads the link that opened it
(:func:`begin_page`: the page's typed view decoded by :mod:`sde_core.services.view_state`),
opens the workspace (:func:`current_workspace`) and draws the settings sidebar; it ends with
:func:`publish`, which writes the page's view, with the workspace and the settings, back into
the URL and shows a copyable link to it. The session state stays the source of truth; a link
is applied once, when it arrives.

Caching: the dataset bundle and layer listings live in ``st.cache_resource`` keyed by content
hashes; evaluation results live in one process-wide
:class:`~sde_core.services.result_cache.ResultCache` (:mod:`pages._run`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar, cast

import streamlit as st

from pages import APP_ROOT
from pages import PAGES as NAV_PAGES
from pages._settings import SETTING_KEYS, SETTINGS_OWNER, session_settings, settings_sidebar
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.common.paths import allowed_roots, resolve_in_roots
from sde_core.errors import SDEError
from sde_core.services.cascade import EvalSettings
from sde_core.services.evaluation import (
    Thumbnails,
    thumbnails,
    thumbnails_key,
)
from sde_core.services.view_state import (
    PUBLIC_URL_ENV,
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

#: The view type of a page (:func:`open_page`).
V = TypeVar("V", bound=PageView)
WS_KEY = "ws_path"
#: Session key of this script run's workspace: ``(path, workspace, content hash or None)``,
#: loaded once a run by :func:`open_page` (:func:`current_workspace` with ``fresh``) and
#: hashed at most once a run (:func:`workspace_key`): at hundreds of models a load parses
#: every entry and a hash reads every checkpoint, and a page asked for both several times.
RUN_WS_KEY = "_run_workspace"
#: Session key of the open link's workspace as it was written, with the folder it resolved to.
WS_AS_SENT_KEY = "ws_as_sent"
URL_KEY = "url_published"
#: Session key of a link whose workspace hash differs from the open workspace's.
MISMATCH_KEY = "link_mismatch"
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


def publish(view: PageView) -> None:
    """Write ``view`` with the open workspace (folder and content hash) and the session's
    settings into the URL, and show the link to it in the sidebar."""
    workspace = str(st.session_state.get(WS_KEY) or default_workspace())
    digest = workspace_digest(workspace)
    sent = st.session_state.get(WS_AS_SENT_KEY)
    if sent is not None and sent[1] == workspace:
        workspace = sent[0]
    settings = session_settings() if all(k in st.session_state for k in SETTING_KEYS) else {}
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
    """The content hash of the workspace at ``path`` (:func:`workspace_key`; this run's
    workspace when it is the one at ``path``), or None when it cannot be opened or has no
    models."""
    run = st.session_state.get(RUN_WS_KEY)
    try:
        return workspace_key(run[1] if run and run[0] == path else load_workspace(path))
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


class PageFrame(NamedTuple, Generic[V]):
    """What :func:`open_page` drew: the page's view (from the link), the open workspace and
    the validated settings of the sidebar."""

    view: V
    ws: Workspace
    settings: EvalSettings


def open_page(page: str, view_type: type[V], *, redraw_in_fragment: bool = False) -> PageFrame[V]:
    """The frame every analysis page starts with, drawn once here: read the link
    (:func:`begin_page`), open the workspace (:func:`current_workspace`, which stops the page
    when it cannot be opened) and draw the settings sidebar
    (:func:`~pages._settings.settings_sidebar`, the link's settings applied first). The page
    ends with :func:`publish` of its own view.

    Args:
        page: the page's name (its URL path).
        view_type: the page's view class (the type :func:`begin_page` decodes for ``page``).
        redraw_in_fragment: the page draws the redraw-only settings (bins, α) in its own
            ``st.fragment`` (:func:`~pages._settings.redraw_settings`).
    """
    view = begin_page(page)
    ws = current_workspace(fresh=True)
    settings = settings_sidebar(ws, view, redraw_in_fragment=redraw_in_fragment)
    return PageFrame(cast(V, view), ws, settings)


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


def current_workspace(*, fresh: bool = False) -> Workspace:
    """The open workspace — loaded once a script run: ``fresh`` (:func:`open_page`, at the
    start of each page run) loads it, later calls of the run (and its fragments' reruns) get
    the same object; on a load error show it with a link to the Workspace page and stop."""
    path = st.session_state.setdefault(WS_KEY, default_workspace())
    run = st.session_state.get(RUN_WS_KEY)
    if not fresh and run and run[0] == path:
        return cast(Workspace, run[1])
    try:
        ws = load_workspace(path)
        st.session_state[RUN_WS_KEY] = (path, ws, None)
    except SDEError as exc:
        st.session_state.pop(RUN_WS_KEY, None)
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
    """Content hash of the workspace (data fingerprint, forget set, checkpoint hashes); for
    this run's workspace (:func:`current_workspace`) computed once a run."""
    run = st.session_state.get(RUN_WS_KEY)
    if run and run[1] is ws and run[2] is not None:
        return cast(str, run[2])
    digest = content_hash(ws, dataset_bundle(ws))
    if run and run[1] is ws:
        st.session_state[RUN_WS_KEY] = (run[0], ws, digest)
    return digest


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


def app_root() -> Path:
    """The folder of ``app.py`` (where the bundled demos live under ``assets/``)."""
    return APP_ROOT
