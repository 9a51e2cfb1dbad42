"""The dashboard's pages and the frame each of them runs in (light: Streamlit only).

``app.py`` calls :func:`frame`: every page has its own URL path (``/workspace``,
``/explore``, ``/compare``, ``/sweeps``, ``/report``, ``/method``), so a link to any page works;
``/`` is a hidden landing page that forwards to Explore with the link's query parameters.

Why pages start with :func:`enter_through_app`: a ``pages/`` folder next to the main script
makes Streamlit start every new server process in its legacy multipage mode, in which a first
request for ``/compare`` runs ``pages/compare.py`` on its own, without ``app.py`` (no page
config, a page list made of file names). Streamlit leaves that mode for good as soon as any
session calls ``st.navigation`` (its documented switch). So a page that finds itself running
outside the app's frame runs the frame itself (:func:`frame`: page config, sidebar, the app's
``st.navigation``, which resolves the same page, query parameters included) and stops its own
run; widget events of that run (a button click) reach the page inside the frame. Pages
imported before they can call it (the Workspace page imports ``pages._common`` first) are
switched by :func:`leave_legacy_mode` instead, which reruns. The legacy page list is never
shown (``client.showSidebarNavigation = false``; the app's own navigation is at the top).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import streamlit as st

__all__ = ["PAGES", "app_pages", "enter_through_app", "frame", "leave_legacy_mode"]

#: URL path -> (script, title, icon), in navigation order.
PAGES: dict[str, tuple[str, str, str]] = {
    "workspace": ("pages/workspace.py", "Workspace", ":material/folder_open:"),
    "explore": ("pages/explore.py", "Explore", ":material/query_stats:"),
    "compare": ("pages/compare.py", "Compare", ":material/leaderboard:"),
    "sweeps": ("pages/sweeps.py", "Sweeps", ":material/show_chart:"),
    "report": ("pages/report.py", "Report", ":material/description:"),
    "method": ("pages/method.py", "Method", ":material/menu_book:"),
}
#: The page ``/`` forwards to.
LANDING = "explore"

_IN_APP: contextvars.ContextVar[bool] = contextvars.ContextVar("sde_in_app", default=False)


def app_pages() -> dict[str, st.Page]:
    """The app's pages (fresh objects for this run), keyed by URL path."""
    return {
        path: st.Page(script, title=title, icon=icon, url_path=path)
        for path, (script, title, icon) in PAGES.items()
    }


def _landing(target: st.Page) -> Callable[[], None]:
    def land() -> None:
        st.switch_page(target, query_params=st.query_params.to_dict())

    return land


def _navigation_pages() -> list[st.Page]:
    """The hidden landing page (the default, ``/``) followed by the app's pages."""
    pages = app_pages()
    landing = st.Page(_landing(pages[LANDING]), title="SDE Explorer", url_path="home",
                      default=True, visibility="hidden")  # fmt: skip
    return [landing, *pages.values()]


def frame() -> None:
    """The app's frame around every page: page config, sidebar caption, navigation, page."""
    import sde_core

    st.set_page_config(page_title="SDE Explorer", layout="wide")
    st.sidebar.caption(
        f"SDE Explorer · sde_core {sde_core.__version__} — does a model still depend on its "
        "forget set? Split-half HSIC against in- and out-of-training references."
    )
    page = st.navigation(_navigation_pages(), position="top")
    token = _IN_APP.set(True)
    try:
        page.run()
    finally:
        _IN_APP.reset(token)


def enter_through_app() -> None:
    """Run this page inside the app's frame when it runs on its own (module docstring)."""
    if _IN_APP.get():
        return
    frame()
    st.stop()


def leave_legacy_mode() -> None:
    """Switch Streamlit to the app's navigation and rerun, when not inside the frame."""
    if _IN_APP.get():
        return
    st.navigation(_navigation_pages(), position="hidden")
    st.rerun()


if __name__ == "__main__":  # run as a legacy "page" (/nav on a fresh server): hand over
    leave_legacy_mode()
