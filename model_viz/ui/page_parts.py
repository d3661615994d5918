"""Streamlit pieces every page ends with or shares: the related-concept expanders and the event list.

Kept here (not in each page) so the ten pages render them the same way; the pages pass in data
their ``model_viz`` module computed, so nothing here holds logic beyond layout.
"""

from __future__ import annotations
import streamlit as st
from .. import concepts
from ..i18n import t


def concept_expanders(concept_ids, lang: str) -> None:
    """The page's "related concepts" section: one expander per concept id, with its concept-map text."""
    st.subheader(t("common.concepts.title", lang))
    for cid in concept_ids:
        c = concepts.get(cid)
        with st.expander(f"{c.title[lang]} · `{cid}`"):
            st.markdown(concepts.concept_markdown(cid, lang))


def event_list(title: str, lines: list[str], none_text: str) -> None:
    """A bold title and a bullet list of this step's events, or ``none_text`` in italics."""
    st.markdown(f"**{title}**")
    st.markdown("\n".join(f"- {ln}" for ln in lines) if lines else f"*{none_text}*")
