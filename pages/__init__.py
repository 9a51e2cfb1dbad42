"""The dashboard's pages, which ``app.py`` registers with ``st.navigation``, and the switch
that ends Streamlit's legacy multipage mode on a fresh server.

Why the switch is needed (docs/architecture.md, "Navigation"): a ``pages/`` folder next to the
main script makes Streamlit start every new server process in its legacy multipage mode (a
process-wide flag, set when the first browser session opens). In that mode a first request for
``/compare`` runs ``pages/compare.py`` on its own, without ``app.py``: no page config, no app
navigation. The mode ends for the whole process at the first call of ``st.navigation``. Every
page imports its helpers from this package, so the first page run of a fresh server imports it:
if the legacy mode is still on, :func:`_leave_legacy_mode` registers the app's navigation and
reruns the same URL (query included), which then runs through ``app.py``. Later runs find the
mode off, and the import is cached. The legacy page list is never shown
(``client.showSidebarNavigation = false`` in ``.streamlit/config.toml``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx

__all__ = ["APP_ROOT", "LANDING", "PAGES", "navigation_pages"]

#: The folder of ``app.py`` (``docs/`` and the bundled demos under ``assets/`` live there).
APP_ROOT = Path(__file__).resolve().parent.parent

#: URL path -> (script, title, icon), in navigation order.
PAGES: dict[str, tuple[str, str, str]] = {
    "answer": ("pages/answer.py", "Answer", ":material/traffic:"),
    "workspace": ("pages/workspace.py", "Workspace", ":material/folder_open:"),
    "explore": ("pages/explore.py", "Explore", ":material/query_stats:"),
    "compare": ("pages/compare.py", "Compare", ":material/leaderboard:"),
    "sweeps": ("pages/sweeps.py", "Sweeps", ":material/show_chart:"),
    "report": ("pages/report.py", "Report", ":material/description:"),
    "method": ("pages/method.py", "Method", ":material/menu_book:"),
}
#: The page ``/`` forwards to (with the link's query parameters).
LANDING = "answer"


def _forward_to(target: st.Page) -> Callable[[], None]:
    def land() -> None:
        st.switch_page(target, query_params=st.query_params.to_dict())

    return land


def navigation_pages() -> list[st.Page]:
    """The app's pages for ``st.navigation`` (fresh objects for each run): a hidden landing page
    at ``/`` that forwards to :data:`LANDING`, then the pages of :data:`PAGES`."""
    pages = {
        path: st.Page(script, title=title, icon=icon, url_path=path)
        for path, (script, title, icon) in PAGES.items()
    }
    landing = st.Page(_forward_to(pages[LANDING]), title="SDE Explorer", url_path="home",
                      default=True, visibility="hidden")  # fmt: skip
    return [landing, *pages.values()]


def _leave_legacy_mode() -> None:
    """End Streamlit's legacy multipage mode and rerun this URL through ``app.py`` (module
    docstring); nothing outside a script run or once the mode is off."""
    if get_script_run_ctx(suppress_warning=True) is None:
        return
    if not getattr(PagesManager, "uses_pages_directory", False):  # gone: no legacy mode
        return
    st.navigation(navigation_pages(), position="hidden")
    st.rerun()


_leave_legacy_mode()
