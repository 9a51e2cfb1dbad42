"""The "export all for a paper" section of a page (Report, Compare): every figure of a result
(SVG, PDF) and every table (LaTeX, Markdown) in one ZIP, built on request
(:func:`~sde_core.viz.report.paper_export.paper_bundle`)."""

from __future__ import annotations

import streamlit as st

from pages._run import shared_cache
from sde_core.common.hashing import stable_hash
from sde_core.services.cascade import EvaluationResult
from sde_core.viz.report.paper_export import paper_bundle

__all__ = ["paper_export"]


def paper_export(result: EvaluationResult, name: str, prefix: str) -> None:
    """The section for ``result`` (its models as shown), its widgets keyed ``<prefix>paper``
    and ``<prefix>paper_zip``; the archive is kept per page, workspace, settings and models."""
    st.markdown(
        "**Export all for a paper**: every chart of these models as SVG and PDF (publication "
        "size, the same colours) and every table as LaTeX (booktabs) and Markdown, in one ZIP."
    )
    models = tuple(str(n) for n in result.models["name"])
    key = ("paper", prefix, result.workspace_hash, stable_hash(result.settings.result_key()),
           models)  # fmt: skip
    bundle = shared_cache().get(key)
    if bundle is None and st.button("Build the paper archive", key=f"{prefix}paper"):
        with st.spinner("Rendering every figure (one Chromium, about 1 s a figure) …"):
            bundle = paper_bundle(result)
        shared_cache().put(key, bundle)
    if bundle is not None:
        if bundle.figure_error:
            st.warning(f"Tables only, no figures: {bundle.figure_error}")
        st.download_button(f"Download the paper archive ({len(bundle.names)} files, ZIP)",
                           bundle.data, f"{name}-paper.zip", "application/zip",
                           key=f"{prefix}paper_zip")  # fmt: skip
