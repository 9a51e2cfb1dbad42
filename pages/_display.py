"""Display helpers of the dashboard pages: charts with the project's config, numbers as the
tables write them, tables with glossary tooltips, and a model's verdict in its style.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import pages  # noqa: F401  (the legacy-mode switch runs first: pages/__init__.py)
from sde_core.common.markdown_text import md_plain
from sde_core.viz.figures.style import PLOTLY_CONFIG
from sde_core.viz.formatting import format_number, format_percent, style_table
from sde_core.viz.glossary import GLOSSARY, help_text
from sde_core.viz.report.meta_eval import FamilyCard
from sde_core.viz.verdicts.explanation import explain_verdict
from sde_core.viz.verdicts.labels import VERDICT_ICONS

#: Key of the hidden chart that makes the browser load its chart library at the start of every
#: run (:func:`preload_charts`).
PRELOAD_KEY = "chart_preload"


def show_family_card(card: FamilyCard | None, key: str) -> None:
    """The "how often is it right" card of a model family (method §17), in a bordered box
    (nothing for None: the family's table is not in this installation)."""
    if card is None:
        return
    with st.container(border=True, key=key):
        st.markdown(f"**{md_plain(card.title)}**")
        for sentence in card.sentences:
            st.markdown(md_plain(sentence))
        if card.caption:
            st.caption(md_plain(card.caption))


def lazy_expander(label: str, key: str) -> Any:
    """A collapsed expander whose content runs only while it is open (Streamlit's stateful
    expander: opening or closing it reruns the page, and its ``.open`` says which); use as
    ``box = lazy_expander(…)`` / ``with box: if box.open: …``. For sections that cost time to
    compute or to draw and that most visitors do not open."""
    return st.expander(label, key=key, on_change="rerun")


def preload_charts() -> None:
    """Start the browser's load of plotly.js before the page has computed its first chart.

    Streamlit loads its chart code (several MB of JavaScript) only when the first chart arrives;
    on 2 cores compiling it took 1.2–1.5 s after that chart's data had come, and every chart of
    the page waited for it. An empty chart sent first, in a container hidden by its CSS class,
    starts that load while the browser is idle and the server still reads the results (cold
    Explore, first chart: median 8.0 s against 9.8 s without, 6 runs each; preloading the table
    grid and the code block as well gained nothing measurable and was left out). It is sent to
    browsers only (a request with a User-Agent: ``AppTest`` sessions have none, and their chart
    counts stay the page's own) and at the same place in every run, so no later element moves.
    """
    if not st.context.headers.get("User-Agent"):
        return
    st.html(f"<style>.st-key-{PRELOAD_KEY} {{display: none}}</style>")
    with st.container(key=PRELOAD_KEY):
        st.plotly_chart(go.Figure(), key=f"{PRELOAD_KEY}_figure", config={"staticPlot": True})


def plot(fig: Any, key: str | None = None) -> None:
    """Show a plotly figure with the project's chart config (camera button exports PNG)."""
    st.plotly_chart(fig, config=PLOTLY_CONFIG, key=key)


def capitalised(text: str) -> str:
    """``text`` with its first letter upper-case (a library sentence opening a caption)."""
    return f"{text[:1].upper()}{text[1:]}"


def fmt(value: Any, digits: int = 3) -> str:
    """A number for display (:func:`sde_core.viz.formatting.format_number`)."""
    return format_number(value, digits=digits)


def fmt_p(value: Any) -> str:
    """A p-value for display (scientific below 10⁻³, 2 significant digits)."""
    return format_number(value, digits=2)


def pct(value: Any) -> str:
    """A rate in [0, 1] as a whole percentage."""
    return format_percent(value)


def headline_value(row: Mapping[Any, Any] | pd.Series, key: str, show: Callable[[Any], str]) -> str:
    """A headline number as text; ``"withheld"`` when the gate withholds it with a reason
    (``inconclusive_reason``, method §12), ``"n/a"`` when it is missing."""
    value = row.get(key)
    reason = row.get("inconclusive_reason")
    withheld = value is None or (isinstance(value, float) and value != value)
    if withheld and isinstance(reason, str) and reason.strip():
        return "withheld"
    return show(value)


def metric(column: Any, label: str, value: str, key: str, **kwargs: Any) -> None:
    """``column.metric`` with the glossary definition of ``key`` on hover."""
    column.metric(label, value, help=help_text(key), **kwargs)


def table(
    df: pd.DataFrame,
    key: str,
    *,
    columns: Mapping[str, str] | None = None,
    pinned: Sequence[str] = (),
    **kwargs: Any,
) -> None:
    """A table with readable numbers and the glossary definitions on its column headers.

    Args:
        df: the table (numbers stay numbers: sorting and the CSV download keep precision).
        key: the element key.
        columns: displayed column name -> glossary key, for the header tooltips (columns whose
            name is itself a glossary key need no entry).
        pinned: columns kept in view while the table scrolls sideways (e.g. model, verdict).
    """
    config: dict[str, Any] = {}
    glossary_keys = dict(columns or {})
    for column in df.columns:
        name = str(column)
        entry = glossary_keys.get(name, name if name in GLOSSARY else None)
        if entry is not None or name in pinned:
            config[name] = st.column_config.Column(
                help=help_text(entry, link=None) if entry is not None else None,
                pinned=True if name in pinned else None,
            )
    st.dataframe(style_table(df), key=key, column_config=config, hide_index=True, **kwargs)


def show_verdict(
    row: Mapping[Any, Any],
    targets: int,
    retrain: Mapping[str, Any] | None,
    *,
    name: bool = True,
    compare: bool = True,
    draws: Any = None,
    provisional: str = "",
    note: str = "",
) -> None:
    """A model's verdict: its short sentence in the verdict's style (a warning for conflicting
    evidence, marked provisional while the evaluation runs), the evidence it rests on and what
    it cannot certify behind an expander; ``note``: its family's verdict note
    (:func:`~sde_core.services.answer.verdict_notes`)."""
    explained = explain_verdict(
        row, targets, retrain, compare=compare, draws=draws, provisional=provisional, note=note
    )
    who = f"{md_plain(row['name'])} ({row.get('role', '')}) — " if name else ""
    text = f"**{who}{explained.headline}.** {explained.short}"
    if provisional:
        text += " The verdict may change when the run completes."
    show = {"error": st.error, "warning": st.warning, "success": st.success}.get(
        explained.style, st.info
    )
    show(text, icon=VERDICT_ICONS.get(explained.label, ":material/info:"))
    with st.expander("Evidence and limits"):
        st.markdown(explained.body)
