"""SDE Explorer dashboard entry point (``streamlit run app.py``).

The workspace comes from ``$SDE_WORKSPACE`` (default ``assets/demo``) or a link's ``ws``
parameter; file inputs are limited to ``$SDE_DATA_ROOTS`` (default: the working directory and
``assets/``). Every page has its own URL (``/explore``, ``/compare`` …) and keeps its settings
and selection in the query string, so a copied link reproduces the view (``pages/_nav.py``
explains the navigation; ``pages/_common.py`` the shared helpers). Navigation is declared before
any heavy import so the page list appears at once.
"""

from __future__ import annotations

from pages._nav import frame

frame()
