"""Streamlit entry point: ``streamlit run app.py``.

The frame shared by every page: page config, the language switch (``st.session_state["lang"]``,
"en" or "zh") in the sidebar, kept in the address as ``?lang=zh`` so a reload or a shared link opens in
the same language, set once for everything the page draws (``use_language``: no figure or table takes a
language argument), and the navigation. Pages live in ``app_pages/``; what they compute
lives in ``model_viz`` / ``kda_ref``.
"""

import streamlit as st

from model_viz.i18n import DEFAULT_LANG, LANG_LABELS, LANGS, t, use_language
from model_viz.ui.page_index import PAGES

if st.session_state.get("lang") not in LANGS:  # a new session: the address's ?lang=zh, else English
    st.session_state["lang"] = st.query_params.get("lang") if st.query_params.get("lang") in LANGS else DEFAULT_LANG
st.set_page_config(page_title=t("common.app_name", st.session_state["lang"]), page_icon=":material/insights:",
                   layout="wide")

with st.sidebar:
    st.radio("Language / 语言", LANGS, format_func=LANG_LABELS.get, key="lang", horizontal=True)
lang = st.session_state["lang"]
use_language(lang)
if st.query_params.get("lang", DEFAULT_LANG) != lang:  # the address keeps the language: a reload, a deep link
    st.query_params["lang"] = lang

pages = [st.Page(p.file, title=t(p.title_key), icon=p.icon, url_path=p.url_path, default=p.slug == "home")
         for p in PAGES]
# expanded=True: every page listed, never Streamlit's own (English-only) "View N more" button
st.navigation(pages, expanded=True).run()
