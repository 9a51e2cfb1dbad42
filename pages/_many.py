"""Many models on a page (issue 39): the threshold above which the Compare and Report pages
show one page of models at a time, the store reads they answer from (every model's headline
rows first, the page's models in full) and the filter, group and page widget they share.
"""

from __future__ import annotations

import streamlit as st

from pages._display import table
from pages._run import evaluations
from sde_core.errors import SDEError
from sde_core.services.cascade import EvalSettings, EvaluationResult, slice_result
from sde_core.services.workspace_info import Workspace
from sde_core.viz.model_groups import (
    GROUP_KEYS,
    filter_models,
    group_summary,
    model_facets,
    page_count,
    page_of,
)

__all__ = ["MANY_MODELS", "PAGE_SIZE", "drawn_models", "many_models", "stored_answer"]

#: Above this many models a page shows one page of them at a time (filtered, grouped).
MANY_MODELS = 12
#: Models per page.
PAGE_SIZE = 20


def stored_answer(
    ws: Workspace, settings: EvalSettings, *, summary: bool = False
) -> EvaluationResult | None:
    """Every model at ``settings`` from the cache or the results store only — nothing is
    computed (:meth:`~sde_core.services.cascade.Evaluations.stored`; ``summary``: their
    headline rows and draws only, :meth:`~sde_core.services.cascade.Evaluations.stored_summary`);
    None when they do not hold all of them, or the store cannot be read (the evaluation path
    then says why)."""
    source = evaluations(ws)
    try:
        if summary:
            return source.stored_summary(settings)
        return source.stored(settings, [m.name for m in ws.models])
    except SDEError:
        return None


def drawn_models(
    ws: Workspace, result: EvaluationResult, names: list[str], summary: bool
) -> EvaluationResult:
    """``result`` for the models the page draws: a slice of it, or — when it is a summary
    (no distributions) — those models read in full from the store (their units only)."""
    if summary:
        try:
            full = evaluations(ws).stored(result.settings, names)
        except SDEError:
            full = None
        if full is not None:
            return full
    return slice_result(result, names)


def many_models(ws: Workspace, result: EvaluationResult, prefix: str, below: str) -> list[str]:
    """Filters, a grouped summary and a page selector for a workspace of many models; the
    names the page draws (this page's, plus the retrained model and the original, the
    references every comparison needs).

    Args:
        prefix: the page's widget-key prefix (``"c"``: ``c_f_methods``, ``c_page``, …).
        below: what the page draws of the page's models, for the caption ("the table,
            charts, …").
    """
    facets = model_facets(ws.models)
    st.subheader(f"{len(facets)} models: filter, group, page")
    left, middle, right = st.columns(3)
    methods = left.multiselect("Methods", sorted(set(facets["method"])), key=f"{prefix}_f_methods")
    roles = middle.multiselect("Roles", sorted(set(facets["role"])), key=f"{prefix}_f_roles")
    text = right.text_input("Name contains", key=f"{prefix}_f_text")
    names = filter_models(facets, methods=methods, roles=roles, text=text)
    by = st.multiselect("Group by", list(GROUP_KEYS), default=["method"], key=f"{prefix}_group_by")
    if by:
        chosen = result.models[result.models["name"].isin(names)]
        table(group_summary(chosen, facets, by), f"{prefix}_groups")
        st.caption(f"One row per group of {', '.join(by)} over the {len(names)} models "
                   "shown: calibrated OTR and OTR over the models whose numbers the gate "
                   "lets through (withheld ones counted apart), and how many are conflicting "
                   "evidence.")  # fmt: skip
    pages = page_count(len(names), PAGE_SIZE)
    page = int(st.number_input(f"Page (of {pages}, {PAGE_SIZE} models each)", 1, pages, 1,
                               key=f"{prefix}_page"))  # fmt: skip
    shown = page_of(names, page, PAGE_SIZE)
    references = [m.name for m in ws.models if m.role in ("retrained", "original")]
    st.caption(f"Showing {len(shown)} of {len(names)} models (page {page} of {pages}) in "
               f"{below}, with the retrained model and the original as references; the CSV "
               "download holds every model.")  # fmt: skip
    return [n for n in dict.fromkeys([*references, *shown]) if n in set(result.models["name"])]
