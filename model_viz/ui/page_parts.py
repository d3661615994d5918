"""Streamlit pieces every page ends with or shares: the related-concept expanders and the event list.

Kept here (not in each page) so the ten pages render them the same way; the pages pass in data
their ``model_viz`` module computed, so nothing here holds logic beyond layout.
"""

from __future__ import annotations
import streamlit as st
from .. import concepts
from ..families import DEFAULT_FAMILY, FAMILIES, ModelFamily
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


def model_family(page: str, lang: str) -> ModelFamily:
    """The page's Kimi-Linear / Kimi K3 choice (a horizontal radio keyed ``{page}_model_family``), as a
    :class:`~model_viz.families.ModelFamily`."""
    from .step_control import lang_keyed_choice

    key = lang_keyed_choice(st.radio, f"{page}_model_family", t("common.family.label", lang), list(FAMILIES),
                            DEFAULT_FAMILY, lang, horizontal=True, format_func=lambda k: t(FAMILIES[k].label, lang))
    return FAMILIES[key]
