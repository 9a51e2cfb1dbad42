"""Answer page (the landing view, ``/``): every audited model of the open workspace in one
line, judged by the workspace's criterion, with the scope of the answer in a box.

It reads the workspace's results store only (nothing is computed on open): when the store
does not hold every model at the settings shown, it says so and offers Explore and Compare.
"""

from __future__ import annotations

import streamlit as st

from pages._common import PAGES, dataset_bundle, guarded, open_page, publish, workspace_key
from pages._run import evaluate
from sde_core.errors import SDEError
from sde_core.services.answer import answer_scope, verdict_notes
from sde_core.services.cascade import EvalSettings, EvaluationResult
from sde_core.services.evaluation import stored_models
from sde_core.services.view_state import AnswerView
from sde_core.services.workspace_info import Workspace
from sde_core.viz.answer import AnswerLine, answer_counts, workspace_answer
from sde_core.viz.verdicts.labels import CANNOT_CERTIFY

#: The icon of each answer's badge.
ICONS = {
    "forgotten": ":material/check_circle:",
    "not forgotten": ":material/memory:",
    "over-unlearned": ":material/warning:",
    "conflicting evidence": ":material/warning:",
    "undecided": ":material/help:",
}


def answer_line(line: AnswerLine) -> None:
    """One model: its word, its sentence, the numbers under it and its caveat."""
    box = st.container(border=True)
    left, right = box.columns([1, 5])
    left.badge(line.label, color=line.colour, icon=ICONS[line.label])
    left.caption(f"{line.name}" + (f" · {line.method}" if line.method else ""))
    if line.label == "conflicting evidence":
        right.warning(f"**{line.sentence}**", icon=":material/warning:")
    else:
        right.markdown(f"**{line.sentence}**")
    right.caption(" · ".join((line.interval, line.vs_retrained, line.vs_original)))
    if line.caveat:
        right.caption(f"Caveat: {line.caveat}")
    with right.expander("Evidence"):
        for text in line.evidence:
            st.markdown(f"- {text}")


def scope_box(ws: Workspace, settings: EvalSettings, result: EvaluationResult) -> None:
    """What the answer covers (the draws each model ran), and what it cannot say."""
    bundle = None
    with guarded("The dataset's sizes are not shown"):
        bundle = dataset_bundle(ws)
    used = list(result.models.get("draws", ()))
    scope = answer_scope(ws, settings, bundle, len(result.models), used)
    box = st.container(border=True)
    box.markdown("**Scope and limitations**")
    rows = "\n".join(f"| {label} | {value} |" for label, value in scope.rows())
    box.markdown(f"| | |\n|---|---|\n{rows}")
    box.caption("Not established by this answer: " + " ".join(CANNOT_CERTIFY[:2]))


view, ws, settings = open_page("answer", AnswerView)
st.title("The answer")
criterion = ws.criterion
st.markdown(f"**Criterion:** {criterion.describe()}.")
names = [m.name for m in ws.models]
stored: set[str] = set()
try:
    stored = stored_models(ws, workspace_key(ws), settings)
except SDEError as exc:
    st.warning(f"The results store cannot be read ({exc}).")
result = evaluate(ws, settings, names) if set(names) <= stored else None
if result is None:
    st.info(
        "The workspace's results store holds no complete evaluation of every model at these "
        "settings, and this page computes nothing. Evaluate them on Compare (every model) or "
        "look at one model on Explore; the answer appears here once every model is stored."
    )
    left, right = st.columns(2)
    left.page_link(PAGES["compare"], label="Compare every model", icon=":material/leaderboard:")
    right.page_link(PAGES["explore"], label="Explore one model", icon=":material/query_stats:")
else:
    s = result.settings
    answer = workspace_answer(
        result.models, result.draws, criterion, s.targets,
        alpha=s.alpha, alpha_calibrated=s.alpha_calibrated,
        notes=verdict_notes(ws, s.layer),
    )  # fmt: skip
    if not answer.lines:
        st.info("This workspace has no audited model (role 'unlearned') to answer for.")
    else:
        st.markdown(f"### {answer_counts(answer.lines)}")
    for line in answer.lines:
        answer_line(line)
    if answer.shared_caveats:
        st.markdown("**Caveats** (each names the models it qualifies)")
        for text in answer.shared_caveats:
            st.caption(text)
    scope_box(ws, s, result)
    st.caption(
        "Differences are paired (the same reference draws for both models, method §15), in "
        "percentage points of the compared rate. The evidence of each model is on Explore; "
        "every model side by side on Compare; the signed report on Report."
    )
publish(AnswerView())
