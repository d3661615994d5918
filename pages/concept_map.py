"""Page: the concept-to-source map and a minimal reading order (article 9.4, 9.5).

Widgets only; the rows and the reading order come from ``model_viz.concept_page``.
"""

import streamlit as st

from model_viz import concept_page as cp
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "cm_step"


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
step = step_control(KEY, lang, last=len(cp.READING_ORDER) - 1, label=t("cmap.step_label", lang), interval=4.0)
st.markdown(cp.reading_step_markdown(step, lang))
