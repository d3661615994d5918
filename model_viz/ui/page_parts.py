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


def pool_charts(header: dict, views: list, i: int, lang: str, prefix: str) -> None:
    """The memory pool of a trace at step ``views[i]``, as the pool-map page draws it: bytes by page kind
    over the run and the budget strip of the step (the Lab and the Live page; chart keys ``{prefix}_pool_*``)."""
    from ..figures import pool_map as pm_fig

    cfg = {"displaylogo": False}
    sizes, budget = pm_fig.unit_bytes(header, views), pm_fig.budget_of(views)
    st.plotly_chart(pm_fig.pool_area_figure(views, i, lang=lang), key=f"{prefix}_pool_area", width="stretch",
                    config=cfg)
    st.plotly_chart(pm_fig.budget_strip_figure(views[i], sizes, budget, lang=lang), key=f"{prefix}_pool_strip",
                    width="stretch", config=cfg)
