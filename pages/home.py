"""Home page: what this product is, and where to start."""

import streamlit as st

from model_viz.i18n import t

lang = st.session_state.get("lang", "en")

st.title(t("home.title", lang))
st.markdown(t("home.body", lang))
st.subheader(t("home.pages", lang))
st.page_link("pages/state_evolution.py", label=t("nav.state_evolution", lang), icon=":material/grid_on:")
st.caption(t("home.page.state_evolution", lang))
