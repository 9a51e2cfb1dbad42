"""Evaluations on a page: the Streamlit caches handed to the evaluation cascade and the cost
policy of :mod:`sde_core.services` (``cascade.py``, ``evaluation.py``), and the progress
displays, Stop buttons and confirmations around them.

Evaluation results live in one process-wide
:class:`~sde_core.services.result_cache.ResultCache` keyed by ``(workspace hash, settings
dict, models)``. Activations always come from the on-disk activation cache, so changing σ,
bins or a plot option never re-extracts them, and finished models are stored in the
workspace's results store as they complete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from pages._common import dataset_bundle, workspace_key
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.errors import SDEError
from sde_core.services.cascade import (
    EvalSettings,
    EvaluationCancelled,
    EvaluationResult,
    Evaluations,
    EvaluationSession,
    Progress,
    Runner,
    process_cache,
)
from sde_core.services.evaluation import (
    confirmation_token,
    priced_layers,
    runs_without_asking,
)
from sde_core.services.result_cache import ResultCache
from sde_core.services.workspace_info import Workspace
from sde_core.viz.ui_support import Eta

STOP_KEY = "stop_requested"
CONFIRMED_KEY = "costs_confirmed"


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


def request_stop() -> None:
    st.session_state[STOP_KEY] = True


def _clear_stop() -> None:
    st.session_state[STOP_KEY] = False


def show_stopped() -> None:
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
        show_stopped()
        return None
    slot = st.empty()
    box = slot.container(border=True)
    box.caption(what)
    bar = box.progress(0.0, text="starting…")
    box.button("Stop", on_click=request_stop, key=f"stop_{stable_hash(what)[:12]}")

    eta = Eta()

    def progress(stage: str, done: int, total: int) -> None:
        if st.session_state.get(STOP_KEY):
            raise EvaluationCancelled(None)
        eta.update(stage, done, total)
        left = f" — {eta.text()}" if eta.text() else ""
        bar.progress(min(1.0, done / total) if total else 1.0,
                     text=f"{stage}: {done}/{total}{left}")  # fmt: skip

    try:
        return work(progress)
    except EvaluationCancelled:
        show_stopped()
        return None
    finally:
        slot.empty()


def models_label(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} models"


def evaluate(
    ws: Workspace, settings: EvalSettings, models: Sequence[str] | None = None
) -> EvaluationResult | None:
    """Evaluate (or fetch) ``models`` under ``settings``; errors are shown inline.

    Returns:
        The result, or None when evaluation failed (error shown) or was stopped.
    """
    names = list(models) if models is not None else [m.name for m in ws.models]
    return evaluate_with(
        ws, settings, names, lambda source, run: source.evaluate(settings, names, run)
    )


def evaluate_with(
    ws: Workspace,
    settings: EvalSettings,
    names: Sequence[str],
    call: Callable[[Evaluations, Runner], Any],
) -> EvaluationResult | None:
    """``call(source, run)`` on the workspace's evaluations, ``run`` drawing a progress bar
    and Stop button for ``names`` at ``settings``' layer; errors are shown inline.

    Returns:
        ``call``'s result, or None when evaluation failed (error shown) or was stopped.
    """
    try:
        source = evaluations(ws)
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {md_plain(exc)}")
        return None
    what = f"Evaluating {models_label(names)} at layer {md_literal(settings.layer)}…"
    try:
        return call(source, lambda work: run_with_progress(work, what))
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
