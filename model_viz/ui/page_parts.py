"""Streamlit pieces every page ends with or shares: the related-concept expanders, the event list, and
the tabs of one engine step that the Lab and the Live page both draw (:func:`step_chain`,
:func:`step_pool`, :func:`step_cache`, from :class:`~model_viz.figures.step_views.StepFigures`).

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


CFG = {"displaylogo": False}


def step_chain(shown, lang: str, prefix: str) -> None:
    """The execution chain of one step: the packed batch, the kernel grid beside the timeline, and a
    verify step's drafts and rollback (chart keys ``{prefix}_batch``, ``_grid``, ``_timeline``, ``_verify_step``)."""
    st.plotly_chart(shown.batch, key=f"{prefix}_batch", width="stretch", config=CFG)
    c_grid, c_time = st.columns([5, 7])
    c_grid.plotly_chart(shown.grid, key=f"{prefix}_grid", width="stretch", config=CFG)
    c_time.plotly_chart(shown.timeline, key=f"{prefix}_timeline", width="stretch", config=CFG)
    if shown.verify is not None:
        st.plotly_chart(shown.verify, key=f"{prefix}_verify_step", width="stretch", config=CFG)
        st.dataframe(shown.verify_rows, hide_index=True, width="stretch")


def step_pool(shown, lang: str, prefix: str) -> None:
    """The memory pool at one step, as the pool-map page draws it: bytes by page kind over the run, the
    budget strip of the step and its pool events (chart keys ``{prefix}_pool_area``, ``_pool_strip``)."""
    st.plotly_chart(shown.pool_area, key=f"{prefix}_pool_area", width="stretch", config=CFG)
    st.plotly_chart(shown.pool_strip, key=f"{prefix}_pool_strip", width="stretch", config=CFG)
    event_list(t("pool_map.events_title", lang), shown.pool_events, t("pool_map.events_none", lang))


def step_cache(tv, shown, lang: str, prefix: str) -> None:
    """The prefix cache at one step: the radix tree or the block table of the snapshot that step shows
    (a malformed snapshot is a message; the other tabs still draw), then the step's cache events."""
    if tv.cache_error is not None:
        st.error(tv.cache_error.message(lang))
    snaps = tv.trees or tv.blocks
    if shown.cache is not None:
        k = shown.cache_snapshot
        label = snaps[k].label if hasattr(snaps[k], "label") else snaps[k].get("label", "")
        st.caption(t("common.cache.snapshot_note", lang, label=label, k=k + 1, n=len(snaps)))
        st.plotly_chart(shown.cache, key=f"{prefix}_{'tree' if tv.trees else 'blocks'}", width="stretch", config=CFG)
    else:
        st.caption(t("common.cache.no_snapshot_yet" if snaps else "common.cache.none", lang))
    event_list(t("lab.cache_events", lang), shown.cache_lines, t("lab.cache_none", lang))
