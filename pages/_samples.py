"""The per-sample evidence section of a page (method §18): which forget samples still look
remembered, most remembered first, with a CSV of all."""

from __future__ import annotations

import streamlit as st

from pages._common import dataset_bundle
from pages._display import table
from sde_core.services.cascade import EvalSettings, EvaluationResult
from sde_core.services.evaluation import sample_evidence_table
from sde_core.services.workspace_info import Workspace

__all__ = ["SAMPLE_ROWS", "show_sample_evidence"]

#: Rows of the per-sample evidence table shown (the CSV holds every forget sample).
SAMPLE_ROWS = 20


def show_sample_evidence(
    ws: Workspace, settings: EvalSettings, result: EvaluationResult, model: str
) -> None:
    """Which forget samples still look remembered (method §18): the table, most remembered
    first, and its CSV."""
    evidence = sample_evidence_table(ws, dataset_bundle(ws), settings, result, model)
    shown = evidence.head(SAMPLE_ROWS)
    with st.expander(f"Which forget samples still look remembered under {model} (method §18)"):
        st.caption(
            "Each sample's evidence is attributed from the target subsets it is in: 1 is where "
            "training subsets sit, 0 where unseen subsets sit. One sample moves a subset of "
            f"{settings.subset_size} by 1/{settings.subset_size} of that gap, so a single "
            "sample's 95% interval is wide: the ranking tells groups apart (validated on a "
            "workspace with a known remembered half, method §18), it does not certify one "
            "sample."
        )
        table(shown, "x_samples")
        st.download_button("Every forget sample (CSV)", evidence.to_csv(index=False).encode(),
                           f"{model}-per-sample-evidence.csv", "text/csv",
                           key="x_samples_csv")  # fmt: skip
