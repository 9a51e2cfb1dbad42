"""The per-sample evidence section of a page (method §18): which forget samples still look
remembered, most remembered first, with a CSV of all."""

from __future__ import annotations

import streamlit as st

from pages._common import dataset_bundle
from pages._display import table
from sde_core.services.cascade import EvalSettings, EvaluationResult
from sde_core.services.samples import drill_down_models, sample_behaviour, sample_evidence_table
from sde_core.services.workspace_info import Workspace

__all__ = ["SAMPLE_ROWS", "show_sample_evidence"]

#: Rows of the per-sample evidence table shown (the CSV holds every forget sample).
SAMPLE_ROWS = 20
#: Images in the gallery of the most remembered samples.
GALLERY = 8


def show_sample_evidence(
    ws: Workspace, settings: EvalSettings, result: EvaluationResult, model: str
) -> None:
    """Which forget samples still look remembered (method §18): the table, most remembered
    first, with what the model, the original and the retrained model do on each (classifiers),
    a gallery of the first ones (images) and the CSV of all."""
    bundle = dataset_bundle(ws)
    evidence = sample_evidence_table(ws, bundle, settings, result, model)
    shown = evidence.head(SAMPLE_ROWS)
    compared = drill_down_models(ws, model)
    behaviour = sample_behaviour(ws, bundle, settings, compared, shown["row"].tolist())
    if behaviour is not None:
        shown = shown.merge(behaviour, on="row", how="left")
    with st.expander(f"Which forget samples still look remembered under {model} (method §18)"):
        st.caption(
            "Each sample's evidence is attributed from the target subsets it is in: 1 is where "
            "training subsets sit, 0 where unseen subsets sit. One sample moves a subset of "
            f"{settings.subset_size} by 1/{settings.subset_size} of that gap, so a single "
            "sample's 95% interval is wide: the ranking tells groups apart (validated on a "
            "workspace with a known remembered half, method §18), it does not certify one "
            "sample."
        )
        if behaviour is not None:
            st.caption(
                f"Beside each sample: the confidence in its true class and the loss under "
                f"{', '.join(compared)} — a sample the retrained model gets wrong but {model} "
                "still gets right is one its behaviour still remembers."
            )
        table(shown, "x_samples")
        images = bundle.images("train", shown["row"].head(GALLERY).to_numpy())
        if images is not None:
            st.caption(f"The {len(images)} most remembered forget samples (row of D_tr, evidence)")
            first = shown.head(len(images))
            captions = [
                f"{r} · {e:.2g}" for r, e in zip(first["row"], first["evidence"], strict=True)
            ]
            st.image(list(images), width=72, clamp=True, caption=captions)
        st.download_button("Every forget sample (CSV)", evidence.to_csv(index=False).encode(),
                           f"{model}-per-sample-evidence.csv", "text/csv",
                           key="x_samples_csv")  # fmt: skip
