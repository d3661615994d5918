"""Streamlit entry point: ``streamlit run app.py``.

The frame shared by every page: page config, the language switch (``st.session_state["lang"]``,
"en" or "zh") in the sidebar, and the navigation. Pages live in ``app_pages/``; what they compute
lives in ``model_viz`` / ``kda_ref``.
"""

import streamlit as st

from model_viz.i18n import DEFAULT_LANG, LANG_LABELS, LANGS, t
from model_viz.ui.page_index import PAGES

if st.session_state.get("lang") not in LANGS:
    st.session_state["lang"] = DEFAULT_LANG
st.set_page_config(page_title=t("common.app_name", st.session_state["lang"]), page_icon=":material/insights:",
                   layout="wide")

with st.sidebar:
    st.radio("Language / 语言", LANGS, format_func=LANG_LABELS.get, key="lang", horizontal=True)
lang = st.session_state["lang"]

pages = [st.Page(p.file, title=t(p.title_key, lang), icon=p.icon, url_path=p.url_path, default=p.slug == "home")
         for p in PAGES]
st.navigation(pages).run()
