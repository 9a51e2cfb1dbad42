"""Models arriving on a page while an evaluation runs elsewhere.

An evaluation started from the command line (``python -m sde_core evaluate``, locally, on Ray
or on Slurm) or by a plan writes each finished model into the workspace's results store. When
the store holds such a *running* run at a page's settings with some but not all of the models
and an evaluation's driver is adding them
(:attr:`~sde_core.services.cascade.RunProgress.arriving`), the page shows the stored models'
results, labelled provisional, with the run's progress and time left, instead of evaluating
the missing models itself (which would duplicate the run): a polling fragment re-reads the
run's unit count every :data:`POLL_SECONDS` and reruns the page when models arrived, and the
user may refresh, or evaluate the rest in the page. A stalled run (no model for much longer
than its pace, :mod:`sde_core.pipeline.run_progress`) is said to have probably stopped, with
the same offer. Once every model is stored the page is as it always is.
"""

from __future__ import annotations

import streamlit as st

from pages._display import capitalised
from pages._run import evaluations
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.errors import SDEError
from sde_core.services.cascade import EvalSettings, EvaluationResult, RunProgress
from sde_core.services.workspace_info import Workspace

#: Seconds between two reads of a running run's progress by an open page.
POLL_SECONDS = 3.0
#: Session key of the settings (hashes) whose missing models the user asked the page to
#: evaluate itself.
EVALUATE_HERE_KEY = "live_evaluate_here"


def _token(settings: EvalSettings) -> str:
    return stable_hash(settings.result_key())


def live_run(ws: Workspace, settings: EvalSettings) -> RunProgress | None:
    """The running run at ``settings`` that has stored some, not all, of the models — which
    the page shows instead of evaluating them — or None: there is none, it cannot be read, or
    the user asked to evaluate the rest in the page."""
    if _token(settings) in st.session_state.get(EVALUATE_HERE_KEY, set()):
        return None
    try:
        progress = evaluations(ws).run_progress(settings)
    except SDEError:
        return None  # the evaluation path reads the store again and says why
    return progress if progress is not None and progress.arriving else None


def _evaluate_here(token: str) -> None:
    st.session_state.setdefault(EVALUATE_HERE_KEY, set()).add(token)


def provisional_result(
    ws: Workspace, settings: EvalSettings, progress: RunProgress, prefix: str,
    *, summary: bool = False,
) -> EvaluationResult | None:  # fmt: skip
    """The stored models of a partial running run at ``settings``
    (:meth:`~sde_core.services.cascade.Evaluations.stored` of those models only: the answer
    cached for them, never for every model), under a banner that says they are provisional,
    with the run's progress (redrawn every :data:`POLL_SECONDS`; the page reruns when models
    arrive), a Refresh button and one to evaluate the rest in the page.

    Args:
        prefix: the page's widget-key prefix (one set of buttons per page and layer).
        summary: read the stored models' headline rows and draws only
            (:meth:`~sde_core.services.cascade.Evaluations.stored_summary`), for a page of
            hundreds of models that reads the distributions of the models it draws.

    Returns:
        The stored models' result, or None when it cannot be read (the error is shown).
    """
    stored = set(progress.stored)
    names = [m.name for m in ws.models if m.name in stored]
    layer = md_literal(settings.layer)
    head = f"**Provisional: {progress.count} of {progress.total} models** at layer {layer}"
    if progress.stalled:
        st.warning(
            f"{head}. {capitalised(progress.stall_reason())}. "
            "Rerunning its command resumes it (the stored models are not recomputed), or "
            "evaluate the rest here."
        )
    else:
        st.info(f"{head}; a running evaluation is adding the rest, and this page shows them "
                "as they arrive.")  # fmt: skip
    _progress_line(ws, settings, progress.count, progress.stalled)
    left, right = st.columns(2)
    left.button("Refresh", key=f"{prefix}_live_refresh_{settings.layer}",
                help="Read the results store again now (the page also does every "
                f"{POLL_SECONDS:g} s).")  # fmt: skip
    right.button(
        "Evaluate the rest here", key=f"{prefix}_live_here_{settings.layer}",
        on_click=_evaluate_here, args=(_token(settings),),
        help="Evaluate the missing models in this page (the running evaluation may evaluate "
        "them too: each model is stored once, by whichever finishes first).",
    )  # fmt: skip
    try:
        source = evaluations(ws)
        return source.stored_summary(settings, names) if summary else source.stored(settings, names)
    except SDEError as exc:
        st.error(f"Cannot read the stored models: {md_plain(exc)}")
        return None


@st.fragment(run_every=POLL_SECONDS)
def _progress_line(ws: Workspace, settings: EvalSettings, count: int, stalled: bool) -> None:
    """The run's progress in words, re-read every :data:`POLL_SECONDS`; the whole page reruns
    when the count of stored models or the stall changed (the run finished, was deleted, or
    models arrived)."""
    try:
        now = evaluations(ws).run_progress(settings)
    except SDEError:
        return
    if now is None or now.count != count or now.stalled != stalled or not now.arriving:
        st.rerun(scope="app")
    st.caption(f"{capitalised(now.sentence())}.")
