"""Home page: what this product is, and where to start."""

import streamlit as st

from model_viz.i18n import t
from model_viz.page_index import PAGES

lang = st.session_state.get("lang", "en")

st.title(t("home.title", lang))
st.markdown(t("home.body", lang))
st.subheader(t("home.pages", lang))
for p in PAGES:
    if p.on_home:
        st.page_link(f"pages/{p.file}.py", label=t(f"nav.{p.name}", lang), icon=p.icon)
        st.caption(t(f"home.page.{p.name}", lang))
