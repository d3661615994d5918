"""Home page: what this product is, and where to start."""

import streamlit as st

from model_viz.i18n import t
from model_viz.ui import warmup
from model_viz.ui.page_index import PAGES


st.title(t("home.title"))
st.markdown(t("home.body"))
st.subheader(t("home.pages"))
for p in PAGES:
    if p.caption_key is not None:
        st.page_link(p.file, label=t(p.title_key), icon=p.icon)
        st.caption(t(p.caption_key))

# the visitor reads this page next: warm the process for the page they open from it (once per process)
warmup.start()
