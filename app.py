"""SDE Explorer dashboard entry point (``streamlit run app.py``).

The full dashboard (Workspace, Explore, Compare, Sweeps, Report pages) is built on
:mod:`sde_core` in a later milestone; this page states what the library already offers.
"""

from __future__ import annotations

import streamlit as st

import sde_core

st.set_page_config(page_title="SDE Explorer", layout="wide")
st.title("SDE Explorer")
st.caption(f"sde_core {sde_core.__version__} — Split-half Dependence Evaluation of unlearning")
st.markdown(
    """
Check whether a model has really **unlearned** a forget set, without retraining a reference
model: split a subset of the data in halves, measure the kernel dependence (HSIC) between the
model's activations on the halves, and compare with known in-training and out-of-training
references.

**Available now** in the `sde_core` library: the split-half HSIC engine, the paper's decision
rule (JSD, Mann-Whitney reference check, OTR, F1, dependence score), calibrated subset-level
evidence with a null check and a spread control, and MMD / Wasserstein baselines.

**Coming next** in this dashboard: Workspace, Explore, Compare, Sweeps and Report pages on the
bundled demo workspace.
"""
)
