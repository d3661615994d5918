"""Streamlit entry point: ``streamlit run app.py``.

The frame shared by every page: page config, the language switch (``st.session_state["lang"]``,
"en" or "zh") in the sidebar, and the navigation. Pages live in ``pages/``; what they compute
lives in ``model_viz`` / ``kda_ref``.
"""

import streamlit as st

from model_viz.i18n import DEFAULT_LANG, LANG_LABELS, LANGS, t

st.set_page_config(page_title="KDA serving visualizer", page_icon=":material/insights:", layout="wide")

if st.session_state.get("lang") not in LANGS:
    st.session_state["lang"] = DEFAULT_LANG

with st.sidebar:
    st.radio("Language / 语言", LANGS, format_func=LANG_LABELS.get, key="lang", horizontal=True)
lang = st.session_state["lang"]

pages = [
    st.Page("pages/home.py", title=t("nav.home", lang), icon=":material/home:", url_path="home", default=True),
    st.Page("pages/hybrid_chain.py", title=t("nav.chain", lang), icon=":material/account_tree:",
            url_path="hybrid-chain"),
    st.Page("pages/three_states.py", title=t("nav.three_states", lang), icon=":material/stacked_bar_chart:",
            url_path="three-states"),
    st.Page("pages/pool_map.py", title=t("nav.pool_map", lang), icon=":material/memory:", url_path="pool-map"),
    st.Page("pages/segments.py", title=t("nav.segments", lang), icon=":material/splitscreen:", url_path="segmentable"),
    st.Page("pages/state_evolution.py", title=t("nav.state_evolution", lang), icon=":material/grid_on:",
            url_path="state-evolution"),
    st.Page("pages/prefix_vs_kv.py", title=t("nav.prefix_vs_kv", lang), icon=":material/compare_arrows:",
            url_path="prefix-not-kv"),
    st.Page("pages/checkpoint_tree.py", title=t("nav.checkpoint_tree", lang), icon=":material/park:",
            url_path="checkpoints"),
    st.Page("pages/restore_paths.py", title=t("nav.restore_paths", lang), icon=":material/settings_backup_restore:",
            url_path="restore"),
    st.Page("pages/state_blocks.py", title=t("nav.state_blocks", lang), icon=":material/view_week:",
            url_path="vllm-blocks"),
    st.Page("pages/density.py", title=t("nav.density", lang), icon=":material/tune:", url_path="checkpoint-density"),
    # url_path must differ from the file name (AppTest loses the sidebar otherwise)
    st.Page("pages/concept_map.py", title=t("nav.concept_map", lang), icon=":material/map:", url_path="concepts"),
]
st.navigation(pages).run()
