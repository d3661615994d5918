"""Page: the concept-to-source map and a minimal reading order (``docs/article.md#s9-4``, ``#s9-5``).

Widgets only; the rows and the reading order come from ``model_viz.figures.concept_map``.
"""

import streamlit as st

from model_viz.figures import concept_map as cp
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "concept_map_step"


st.title(t("concept_map.title"))
st.markdown(t("concept_map.intro"))

query = st.text_input(t("concept_map.filter"), key="concept_map_filter")
rows = cp.concept_rows(query)
if rows:
    st.dataframe([{t(cp.COLUMN_LABEL[k]): r[k] for k in cp.COLUMNS} for r in rows], key="concept_map_table",
                 hide_index=True, width="stretch")
else:
    st.info(t("concept_map.no_match", query=query))

ids = [r["id"] for r in rows]
if ids:
    picked = st.selectbox(t("concept_map.detail"), ids, key="concept_map_detail",
                          format_func=lambda cid: f"{cid} · {cp.concept_title(cid)}")
    st.markdown(cp.concept_detail_markdown(picked))

st.subheader(t("concept_map.order_title"))
st.markdown(t("concept_map.order_intro"))
step = step_control(KEY, values=list(range(1, len(cp.READING_ORDER) + 1)), label=t("concept_map.step_label"),
                    interval=4.0)  # shown from 1, as the headings are numbered
st.markdown(cp.reading_step_markdown(step))
