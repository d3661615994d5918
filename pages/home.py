"""Home page: what this product is, and where to start."""

import streamlit as st

from model_viz.i18n import t

lang = st.session_state.get("lang", "en")

st.title(t("home.title", lang))
st.markdown(t("home.body", lang))
st.subheader(t("home.pages", lang))
st.page_link("pages/hybrid_chain.py", label=t("nav.chain", lang), icon=":material/account_tree:")
st.caption(t("home.page.chain", lang))
st.page_link("pages/three_states.py", label=t("nav.three_states", lang), icon=":material/stacked_bar_chart:")
st.caption(t("home.page.three_states", lang))
st.page_link("pages/pool_map.py", label=t("nav.pool_map", lang), icon=":material/memory:")
st.caption(t("home.page.pool_map", lang))
st.page_link("pages/segments.py", label=t("nav.segments", lang), icon=":material/splitscreen:")
st.caption(t("home.page.segments", lang))
st.page_link("pages/state_evolution.py", label=t("nav.state_evolution", lang), icon=":material/grid_on:")
st.caption(t("home.page.state_evolution", lang))
st.page_link("pages/prefix_vs_kv.py", label=t("nav.prefix_vs_kv", lang), icon=":material/compare_arrows:")
st.caption(t("home.page.prefix_vs_kv", lang))
st.page_link("pages/checkpoint_tree.py", label=t("nav.checkpoint_tree", lang), icon=":material/park:")
st.caption(t("home.page.checkpoint_tree", lang))
st.page_link("pages/restore_paths.py", label=t("nav.restore_paths", lang), icon=":material/settings_backup_restore:")
st.caption(t("home.page.restore_paths", lang))
st.page_link("pages/state_blocks.py", label=t("nav.state_blocks", lang), icon=":material/view_week:")
st.caption(t("home.page.state_blocks", lang))
st.page_link("pages/density.py", label=t("nav.density", lang), icon=":material/tune:")
st.caption(t("home.page.density", lang))
