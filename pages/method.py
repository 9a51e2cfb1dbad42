"""Method page: ``docs/method.md``, the project's definition of SDE, rendered offline.

Every metric's hover text links to a section here (``method#5-headline-metrics``), so the
definitions are one click away without the repository or a network connection.
"""

from __future__ import annotations

import streamlit as st

from pages import APP_ROOT
from sde_core.viz.glossary import METHOD_SECTIONS, glossary_table

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
if doc.is_file():
    st.markdown(doc.read_text(encoding="utf-8"))
else:
    st.error(f"{doc} is missing: the method document ships with the repository (docs/).")
st.header("Glossary", anchor="glossary")
st.caption("The definitions shown on hover across the dashboard and in the report.")
st.dataframe(glossary_table(), hide_index=True, key="m_glossary")
