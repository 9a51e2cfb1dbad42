"""The per-sample evidence section of a page (method §18): which forget samples still look
remembered, most remembered first, with a CSV of all."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st

from pages._common import dataset_bundle
from pages._display import lazy_expander, table
from pages._run import evaluation_session
from sde_core.services.cascade import EvalSettings, EvaluationResult
from sde_core.services.samples import (
    drill_down_models,
    lm_completions,
    sample_behaviour,
    sample_evidence_table,
    target_members,
)
from sde_core.services.workspace_info import Workspace

__all__ = [
    "SAMPLE_ROWS", "behaviour_caption", "forget_sample_evidence", "show_completions",
    "show_sample_evidence", "show_target_members",
]  # fmt: skip

#: Rows of the per-sample evidence table shown (the CSV holds every forget sample).
SAMPLE_ROWS = 20
#: Images in the gallery of the most remembered samples.
GALLERY = 8


def show_sample_evidence(
    ws: Workspace, settings: EvalSettings, model: str, evidence: Callable[[], pd.DataFrame]
) -> None:
    """Which forget samples still look remembered (method §18), in an expander that runs only
    while it is open: the table ``evidence()`` (:func:`forget_sample_evidence`), most
    remembered first, with what the model, the original and the retrained model do on each, a
    gallery of the first ones (images) and the CSV of all."""
    box = lazy_expander(f"Which forget samples still look remembered under {model} "
                        "(method §18)", "x_samples_open")  # fmt: skip
    with box:
        if not box.open:
            return
        bundle = dataset_bundle(ws)
        every = evidence()
        shown = every.head(SAMPLE_ROWS)
        compared = drill_down_models(ws, model)
        cache = evaluation_session(ws).cache
        behaviour = sample_behaviour(ws, bundle, settings, compared, shown["row"].tolist(),
                                     cache)  # fmt: skip
        if behaviour is not None:
            shown = shown.merge(behaviour, on="row", how="left")
        st.caption(
            "Each sample's evidence is attributed from the target subsets it is in: 1 is where "
            "training subsets sit, 0 where unseen subsets sit. One sample moves a subset of "
            f"{settings.subset_size} by 1/{settings.subset_size} of that gap, so a single "
            "sample's 95% interval is wide: the ranking tells groups apart (validated on a "
            "workspace with a known remembered half, method §18), it does not certify one "
            "sample."
        )
        if behaviour is not None:
            st.caption(behaviour_caption(behaviour, compared, model))
        table(shown, "x_samples")
        images = bundle.images("train", shown["row"].head(GALLERY).to_numpy())
        if images is not None:
            st.caption(f"The {len(images)} most remembered forget samples (row of D_tr, evidence)")
            first = shown.head(len(images))
            captions = [
                f"{r} · {e:.2g}" for r, e in zip(first["row"], first["evidence"], strict=True)
            ]
            st.image(list(images), width=72, clamp=True, caption=captions)
        st.download_button("Every forget sample (CSV)", every.to_csv(index=False).encode(),
                           f"{model}-per-sample-evidence.csv", "text/csv",
                           key="x_samples_csv")  # fmt: skip


def behaviour_caption(behaviour: pd.DataFrame, compared: list[str], model: str) -> str:
    """What the behaviour columns beside each sample say, by what they hold (a classifier's
    confidence and loss, or a language model's or a denoiser's per-row loss)."""
    if any(c.startswith("confidence · ") for c in behaviour.columns):
        return (
            f"Beside each sample: the confidence in its true class and the loss under "
            f"{', '.join(compared)} — a sample the retrained model gets wrong but {model} "
            "still gets right is one its behaviour still remembers."
        )
    what = next(c for c in behaviour.columns if c != "row").rsplit(" · ", 1)[0]
    return (
        f"Beside each sample: its {what} under {', '.join(compared)} (method §9; lower is "
        f"more like a training member) — a sample on which {model}'s loss is still as low "
        "as the original's, well below the retrained model's, is one its behaviour still "
        "remembers."
    )


def forget_sample_evidence(
    ws: Workspace, settings: EvalSettings, result: EvaluationResult, model: str
) -> pd.DataFrame:
    """Every forget sample's evidence under ``model`` (:func:`sample_evidence_table`), which
    the drill-down and the most-remembered table share."""
    return sample_evidence_table(ws, dataset_bundle(ws), settings, result, model)


def show_target_members(
    ws: Workspace, settings: EvalSettings, result: EvaluationResult, model: str, target: int,
    evidence: Callable[[], pd.DataFrame],
) -> None:  # fmt: skip
    """The drill-down of one target subset to its members, in an expander that runs only
    while it is open: each one's per-sample evidence (method §18, from ``evidence()``:
    :func:`forget_sample_evidence`) and what the model, the original and the retrained model do
    on it, with a CSV of the whole subset."""
    compared = drill_down_models(ws, model)
    box = lazy_expander(f"Target subset {target}: its {settings.subset_size} members, their "
                        f"evidence and what {', '.join(compared)} do on each",
                        "x_members_open")  # fmt: skip
    with box:
        if not box.open:
            return
        members = target_members(ws, dataset_bundle(ws), settings, result, model, target,
                                 evaluation_session(ws).cache, evidence())  # fmt: skip
        st.caption(
            "Each member's per-sample evidence (1 ≈ where training subsets sit, 0 ≈ where "
            "unseen subsets sit; method §18) with its 95% interval and its rank among the "
            "forget samples (1 = most remembered), in the subset's order: the members with "
            "the highest evidence are the ones that raise this subset's score most."
        )
        behaviour = members.drop(columns=["evidence", "low", "high", "rank"])
        if len(behaviour.columns) > 1:
            st.caption(behaviour_caption(behaviour, compared, model))
        table(members, "x_members", height=320)
        st.download_button(f"Target subset {target}'s members (CSV)",
                           members.to_csv(index=False).encode(),
                           f"{model}-target-{target}-members.csv", "text/csv",
                           key="x_members_csv")  # fmt: skip


def show_completions(
    ws: Workspace, settings: EvalSettings, model: str, target: int, rows: list[int]
) -> None:
    """Behind a toggle (it runs each model): the greedy completions of a language model's
    texts by ``model``, the original and the retrained model side by side (method §18)."""
    compared = drill_down_models(ws, model)
    if not st.toggle(
        f"Completions: what {', '.join(compared)} write after the start of each text "
        "(greedy decoding; runs each model once)",
        key="x_completions",
    ):
        return
    written = lm_completions(ws, dataset_bundle(ws), settings, compared, rows)
    if written is None:
        st.caption("No completions: these models are not language models with weights.")
        return
    shares = ", ".join(
        f"{name} {written[f'match · {name}'].mean():.0%} "
        f"({int((written[f'match · {name}'] == 1).sum())} of {len(rows)} exact)"
        for name in compared
    )
    st.caption(
        f"Each text is cut before its answer (a text without one: at half its tokens); each "
        "model continues the prompt with its most likely token, as many tokens as the "
        "reference holds. match: the share of the reference's tokens written back at their "
        f"own position — target subset {target}'s first {len(rows)} texts: {shares}. A model "
        "that still knows the facts writes them back; the retrained model never saw them. "
        "Tokens the question already gives (a name, the template's words) are matched by "
        "every model: compare the models, not the share with 100%."
    )
    table(written, "x_completions_table", height=320)
