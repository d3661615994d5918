"""Page: the concept-to-source map and a minimal reading order (article 9.4, 9.5).

Widgets only; the rows and the reading order come from ``model_viz.concept_page``.
"""

import streamlit as st

from model_viz import concept_page as cp
from model_viz.i18n import t

lang = st.session_state.get("lang", "en")
KEY = "cm_step"


def _move(delta: int) -> None:
    st.session_state[KEY] = cp.clamp_step(st.session_state.get(KEY, 0) + delta)


st.title(t("cmap.title", lang))
st.markdown(t("cmap.intro", lang))

query = st.text_input(t("cmap.filter", lang), key="cm_filter")
rows = cp.concept_rows(lang, query)
if rows:
    st.dataframe([{t(f"cmap.col.{k}", lang): r[k] for k in cp.COLUMNS} for r in rows], key="cm_table",
                 hide_index=True, width="stretch")
else:
    st.info(t("cmap.no_match", lang, query=query))

st.subheader(t("cmap.order_title", lang))
st.markdown(t("cmap.order_intro", lang))
st.session_state[KEY] = cp.clamp_step(st.session_state.get(KEY))
step = st.session_state[KEY]
last = len(cp.READING_ORDER) - 1
c_prev, c_next, c_slider = st.columns([1.6, 1.6, 7], vertical_alignment="bottom")
c_prev.button(t("common.prev", lang), key="cm_prev", on_click=_move, args=(-1,), disabled=step == 0, width="stretch")
c_next.button(t("common.next", lang), key="cm_next", on_click=_move, args=(1,), disabled=step == last, width="stretch")
c_slider.slider(t("cmap.step_label", lang), 0, last, key=KEY)
st.markdown(cp.reading_step_markdown(st.session_state[KEY], lang))
