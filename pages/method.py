"""Method page: ``docs/method.md``, the project's definition of SDE, rendered offline.

Every metric's hover text links to a section here (``method#5-headline-metrics``), so the
definitions are one click away without the repository or a network connection.
"""

from __future__ import annotations

import streamlit as st

from pages import APP_ROOT
from sde_core.viz.glossary import METHOD_SECTIONS, glossary_table
from sde_core.viz.report.meta_eval import card_sentences, meta_eval_csv, read_card

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
card_file = meta_eval_csv("classifier", APP_ROOT)
card = read_card(card_file) if card_file is not None else None
with st.container(border=True, key="m_meta_eval"):
    st.markdown("**How often is it right?** Classifiers, measured on the mnist1d zoo (§17)")
    if card is None:
        st.caption("No meta-evaluation is shipped for this family yet (method §17).")
    else:
        for sentence in card_sentences(card):
            st.markdown(sentence)
        st.caption(
            "Checkpoints with known truth: retrained and original models from several seeds, "
            "unlearning methods at graded strengths, relearned and quantised models. One "
            "family, one dataset, one layer: REPRODUCTION.md, Meta-evaluation."
        )
if doc.is_file():
    st.markdown(doc.read_text(encoding="utf-8"))
else:
    st.error(f"{doc} is missing: the method document ships with the repository (docs/).")
st.header("Glossary", anchor="glossary")
st.caption("The definitions shown on hover across the dashboard and in the report.")
st.dataframe(glossary_table(), hide_index=True, key="m_glossary")
