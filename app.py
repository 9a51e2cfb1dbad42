"""SDE Explorer dashboard entry point (``streamlit run app.py``).

The workspace comes from ``$SDE_WORKSPACE`` (default ``assets/demo``) or a link's ``ws``
parameter; file inputs are limited to ``$SDE_DATA_ROOTS`` (default: the working directory and
``assets/``). Every page has its own URL (``/explore``, ``/compare`` …, listed in
``pages/__init__.py``) and keeps its settings and selection in the query string, so a copied
link reproduces the view; ``/`` forwards to the Answer page with the link's parameters.
"""

from __future__ import annotations

import streamlit as st

import sde_core
from pages import navigation_pages
from pages._display import preload_charts

st.set_page_config(page_title="SDE Explorer", layout="wide")
st.sidebar.caption(
    f"SDE Explorer · sde_core {sde_core.__version__} — does a model still depend on its "
    "forget set? Split-half HSIC against in- and out-of-training references."
)
with st.sidebar:
    preload_charts()
st.navigation(navigation_pages(), position="top").run()
