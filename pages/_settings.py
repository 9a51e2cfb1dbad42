"""The evaluation settings in the sidebar, drawn from the settings table
(:data:`sde_core.pipeline.settings.SETTINGS`): each setting's widget, label, bounds and group
come from its entry, so a new setting needs no page code.

Widget state is kept in plain session keys (``s_<name>``, :func:`bound`), so the values survive
page switches; :func:`settings_sidebar` returns the validated settings and
:func:`current_settings` reads them back with overrides.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import streamlit as st

import pages  # noqa: F401  (the legacy-mode switch runs first: pages/__init__.py)
from sde_core.common.markdown_text import md_plain
from sde_core.common.sigma import MEDIAN, SQRT_DIM, Sigma, parse_sigma
from sde_core.common.validation import SIGMA_MIN
from sde_core.errors import SDEError
from sde_core.services.cascade import EvalSettings
from sde_core.services.view_state import SIDEBAR_WIDGETS, SIGMA_WIDGET, PageView
from sde_core.services.workspace_info import Workspace
from sde_core.viz.glossary import help_text

SETTINGS_OWNER = "settings_workspace"
#: The settings-table group whose settings only redraw: the decision stage (the JSD histogram's
#: bins, the level α of the reference test) is recomputed from the cached H and never cached
#: itself (``sde_core/pipeline/evaluation/stages.py``), so a page that shows what they change
#: draws their widgets in its ``st.fragment`` (:func:`redraw_settings`): a change reruns that
#: fragment only, not the page (issue 33).
REDRAW_GROUP = "Decision"
#: The σ widget's choices -> the kind of σ they give (:class:`~sde_core.common.sigma.Sigma`):
#: the √d rule, a multiple f·√d (f in ``s_sigma_factor``), the median rule, a value
#: (``s_sigma_value``).
SIGMA_RULES = {
    f"√d rule ({SQRT_DIM})": SQRT_DIM,
    "multiple of √d": "factor",
    f"{MEDIAN} rule": MEDIAN,
    "value": "value",
}
#: Session keys of the evaluation settings (plain keys: they survive page switches); each
#: setting of the sidebar lives in ``s_<name>``.
SETTING_KEYS = (
    "s_layer",
    "s_sigma_rule",
    "s_sigma_value",
    "s_sigma_factor",
    *(f"s_{s.name}" for s in SIDEBAR_WIDGETS),
)


#: The settings that only redraw (:data:`REDRAW_GROUP`), in the table's order.
REDRAW_SETTINGS = tuple(s for s in SIDEBAR_WIDGETS if s.group == REDRAW_GROUP)
#: The sidebar's place of the redraw-only settings in the current script run (a page that draws
#: them in its fragment, :func:`redraw_slot`); one per script thread, reset by every sidebar.
_RUN = threading.local()


def _copy_widget(widget_key: str, key: str) -> None:
    st.session_state[key] = st.session_state[widget_key]


def bound(key: str) -> dict[str, Any]:
    """Widget kwargs that keep its value in the plain session key ``key``.

    Widget state is dropped on pages that do not show the widget; the value lives in ``key``
    instead, is copied into the widget before it is drawn and back when the user changes it.
    Use as ``st.number_input("n", **bound("s_subset_size"))``.
    """
    widget_key = f"w_{key}"
    st.session_state[widget_key] = st.session_state[key]
    return {"key": widget_key, "on_change": _copy_widget, "args": (widget_key, key)}


def _sigma_state(sigma: str | float) -> dict[str, Any]:
    """The σ widget's session values for a σ (rule choice, value, factor)."""
    spec = parse_sigma(sigma)
    factor = spec.sqrt_d_factor()
    kind = "factor" if factor not in (None, 1.0) else spec.kind
    state: dict[str, Any] = {"s_sigma_rule": next(k for k, v in SIGMA_RULES.items() if v == kind)}
    if kind == "value":
        state["s_sigma_value"] = spec.number
    if kind == "factor":
        state["s_sigma_factor"] = spec.number
    return state


def _init_settings(ws: Workspace) -> None:
    """Reset the settings widgets to the workspace's ``[defaults]`` when it changes."""
    owner = str(ws.root)
    if st.session_state.get(SETTINGS_OWNER) == owner and all(
        k in st.session_state for k in SETTING_KEYS
    ):
        return
    d = ws.defaults
    st.session_state.update(
        {
            SETTINGS_OWNER: owner,
            "s_layer": d.layer,
            "s_sigma_value": 1.0,
            "s_sigma_factor": 1.0,
            **_sigma_state(d.sigma),
            **{f"s_{s.name}": _value(s, getattr(d, s.name)) for s in SIDEBAR_WIDGETS},
        }
    )
    st.session_state.pop("compare_layers", None)
    st.session_state.pop("x_model", None)


def _apply_linked_settings(view: PageView) -> None:
    """Copy the settings a link carries into the session (their problems were named by
    :func:`begin_page`)."""
    for name, value in view.settings.items():
        if name == "sigma":
            st.session_state.update(_sigma_state(value))
        else:
            st.session_state[f"s_{name}"] = value  # the layer or a number setting


def session_settings() -> dict[str, Any]:
    """The settings of the session's widgets (unvalidated)."""
    s = st.session_state
    rule = SIGMA_RULES[s["s_sigma_rule"]]
    sigma = {
        "value": float(s["s_sigma_value"]),
        "factor": Sigma.times_sqrt_d(float(s["s_sigma_factor"])).setting(),
    }.get(rule, rule)
    return {
        "layer": s["s_layer"],
        "sigma": sigma,
        **{entry.name: _value(entry, s[f"s_{entry.name}"]) for entry in SIDEBAR_WIDGETS},
    }


def _value(entry: Any, value: Any) -> Any:
    """``value`` as the type of the sidebar setting ``entry`` (``int``, ``float``, ``bool`` or
    the text of a choice)."""
    kind = entry.kind
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    return bool(value) if kind == "bool" else str(value)


def _widget(entry: Any) -> None:
    """The sidebar's widget of ``entry``, a setting of the settings table: a number input (its
    bounds and step), a select box (its choices) or a checkbox, with its label and glossary
    help."""
    kwargs: dict[str, Any] = {"help": help_text(entry.name), **bound(f"s_{entry.name}")}
    if entry.widget == "choice":
        st.selectbox(entry.widget_label, entry.choices, **kwargs)
    elif entry.widget == "toggle":
        st.checkbox(entry.widget_label, **kwargs)
    else:
        lo, hi = entry.minimum, entry.maximum
        st.number_input(
            entry.widget_label,
            min_value=None if lo is None else _value(entry, lo),
            max_value=None if hi is None else _value(entry, hi),
            step=_value(entry, entry.step),
            format=None if entry.kind == "int" else "%.4g",
            **kwargs,
        )


def settings_sidebar(
    ws: Workspace, view: PageView | None = None, *, redraw_in_fragment: bool = False
) -> EvalSettings:
    """Sidebar widgets of the evaluation settings (built from the settings table: every setting
    with a sidebar widget, those with a ``group`` under its heading in "More settings"); returns
    the validated settings.

    The settings of ``view``'s link (if any) are applied first. On invalid settings the error
    (with its fix) is shown and the page stops. With ``redraw_in_fragment`` the redraw-only
    settings (:data:`REDRAW_SETTINGS`) get an empty place at their heading instead
    (:func:`redraw_slot`), which the page's fragment fills (:func:`redraw_settings`).
    """
    _RUN.slot = None
    _init_settings(ws)
    if view is not None:
        _apply_linked_settings(view)
    sigma = SIGMA_WIDGET
    with st.sidebar:
        st.subheader("Evaluation settings")
        st.caption(
            f"Workspace: **{md_plain(ws.name or ws.root.name)}** · defaults from its workspace.toml"
        )
        st.radio(sigma.widget_label, list(SIGMA_RULES), help=help_text(sigma.name),
                 **bound("s_sigma_rule"))  # fmt: skip
        rule = SIGMA_RULES[st.session_state["s_sigma_rule"]]
        if rule == "value":
            st.number_input("σ value", min_value=SIGMA_MIN, format="%.4g", **bound("s_sigma_value"))
        elif rule == "factor":
            st.number_input("factor f of σ = f·√d", min_value=SIGMA_MIN, format="%.4g",
                            **bound("s_sigma_factor"))  # fmt: skip
        groups: dict[str, list[Any]] = {}
        for entry in SIDEBAR_WIDGETS:
            if entry.group:
                groups.setdefault(entry.group, []).append(entry)
            else:
                _widget(entry)
        with st.expander("More settings"):
            for title, entries in groups.items():
                if title == REDRAW_GROUP and redraw_in_fragment:
                    _RUN.slot = st.container()
                    continue
                st.markdown(f"**{title}**")
                for entry in entries:
                    _widget(entry)
    return current_settings(ws)


def redraw_slot() -> Any:
    """The sidebar container that :func:`settings_sidebar` left for the redraw-only settings in
    this script run (``redraw_in_fragment=True``), or None."""
    return getattr(_RUN, "slot", None)


def redraw_settings(slot: Any) -> None:
    """The redraw-only settings' widgets (:data:`REDRAW_SETTINGS`) under their heading, in
    ``slot`` (:func:`redraw_slot`), or in the sidebar when it is None. Call it inside the
    page's ``st.fragment`` that draws what they change: a change then reruns that fragment
    only (Streamlit reruns the fragment whose body drew the widget, also into an outside
    container such as the sidebar)."""
    with slot if slot is not None else st.sidebar:
        st.markdown(f"**{REDRAW_GROUP}**")
        for entry in REDRAW_SETTINGS:
            _widget(entry)
        st.caption("A change here redraws the verdict and the charts only: no H is recomputed.")


def current_settings(ws: Workspace, **overrides: Any) -> EvalSettings:
    """The settings from the session (layer included), with ``overrides``; stops on errors."""
    _init_settings(ws)
    values = session_settings()
    values.update(overrides)
    try:
        base = EvalSettings.from_mapping(dataclasses.asdict(ws.defaults))
        return base.with_overrides(**values)
    except SDEError as exc:
        st.error(f"Invalid settings: {md_plain(exc)}")
        st.stop()
        raise  # unreachable
