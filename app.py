"""SDE Explorer dashboard entry point (``streamlit run app.py``).

The workspace comes from ``$SDE_WORKSPACE`` (default ``assets/demo``); file inputs are limited
to ``$SDE_DATA_ROOTS`` (default: the working directory and ``assets/``). Pages live in
``pages/``; shared helpers in ``pages/_common.py`` and :mod:`sde_core.viz.ui_support`. Navigation is
declared before any heavy import so the page list appears at once.
"""

from __future__ import annotations

import streamlit as st

import sde_core

st.set_page_config(page_title="SDE Explorer", layout="wide")
navigation = st.navigation(
    [
        st.Page("pages/workspace.py", title="Workspace", icon=":material/folder_open:"),
        st.Page("pages/explore.py", title="Explore", icon=":material/query_stats:", default=True),
        st.Page("pages/compare.py", title="Compare", icon=":material/leaderboard:"),
        st.Page("pages/sweeps.py", title="Sweeps", icon=":material/show_chart:"),
        st.Page("pages/report.py", title="Report", icon=":material/description:"),
    ]
)
st.sidebar.caption(
    f"SDE Explorer · sde_core {sde_core.__version__} — does a model still depend on its "
    "forget set? Split-half HSIC against in- and out-of-training references."
)
navigation.run()
