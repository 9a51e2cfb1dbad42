"""Method page: ``docs/method.md``, the project's definition of SDE, rendered offline.

Every metric's hover text links to a section here (``method#5-headline-metrics``), so the
definitions are one click away without the repository or a network connection.
"""

from __future__ import annotations

import streamlit as st

from pages import APP_ROOT
from pages._common import WS_KEY, default_workspace
from pages._display import show_family_card
from sde_core.errors import SDEError
from sde_core.services.answer import workspace_family
from sde_core.services.workspace_info import load_workspace
from sde_core.viz.glossary import METHOD_SECTIONS, glossary_table
from sde_core.viz.report.meta_eval import family_card

doc = APP_ROOT / "docs" / "method.md"
with st.sidebar:
    st.markdown("**Sections**")
    st.markdown(
        "\n".join(
            f"- [{'§' + str(n) + ' ' if isinstance(n, int) else ''}{title}](#{anchor})"
            for n, (title, anchor) in METHOD_SECTIONS.items()
        )
        + "\n- [Glossary](#glossary)"
    )


def open_family() -> tuple[str, str]:
    """The open workspace's model family (name, label); the classifier's when it cannot be
    opened (the Method page never stops on a workspace problem)."""
    try:
        family = workspace_family(
            load_workspace(st.session_state.get(WS_KEY) or default_workspace())
        )
    except SDEError:
        return "classifier", "classifier"
    return family.name, family.label


show_family_card(family_card(*open_family(), root=APP_ROOT), "m_meta_eval")
if doc.is_file():
    st.markdown(doc.read_text(encoding="utf-8"))
else:
    st.error(f"{doc} is missing: the method document ships with the repository (docs/).")
st.header("Glossary", anchor="glossary")
st.caption("The definitions shown on hover across the dashboard and in the report.")
st.dataframe(glossary_table(), hide_index=True, key="m_glossary")
