"""Page: the memory pool map — one byte budget, page kinds over time, owners, preemptions.

Widgets and layout only; the scenario, the trace and the figures come from ``model_viz.engine_trace``
and ``model_viz.pool_map``.
"""

import streamlit as st

from model_viz import page_parts
from model_viz import engine_trace as et
from model_viz import pool_map as pm
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "pm_step"


@st.cache_data(show_spinner=False, max_entries=16)
def _canned(num_pages: int) -> str:
    return et.run_scenario(**pm.scenario(num_pages))


@st.cache_data(show_spinner=False, max_entries=16)
def _parse(text: str):
    return et.parse_trace(text)


st.title(t("pool.title", lang))
num_pages = st.select_slider(t("pool.pages_label", lang, slots=pm.STATE_SLOTS), pm.PAGE_OPTIONS,
                             value=pm.DEFAULT_PAGES, key="pm_pages")
with st.spinner():
    header, events = _parse(_canned(num_pages))
views = et.engine_steps(events)
sizes = pm.unit_bytes(header, views)
st.markdown(t("pool.intro", lang, state_kib=f"{sizes['kda_state'] / 1024:.0f}", page_kib=f"{sizes['mla_kv'] / 1024:.0f}",
              page_size=header.get("page_size", et.PAGE_SIZE), n=len(pm.PROMPT_LENS),
              lens=", ".join(map(str, pm.PROMPT_LENS)), gen=pm.MAX_TOKENS, slots=pm.STATE_SLOTS))

n = len(views)
i = step_control(KEY, lang, last=n - 1, label=t("trace.step_label", lang))
view = views[i]

budget = pm.budget_of(views)
used = view.pool.used_bytes if view.pool else {}
st.markdown(t("pool.summary", lang, step=view.step, i=i + 1, n=n, used=f"{used.get('total', 0) / 1024:,.0f}",
              budget=f"{budget / 1024:,.0f}", states=f"{used.get('kda_state', 0) / 1024:,.0f}",
              kv=f"{used.get('mla_kv', 0) / 1024:,.0f}", pre=len(pm.preemption_steps(views))))
cfg = {"displaylogo": False}
st.plotly_chart(pm.pool_area_figure(views, i, lang=lang), key="pm_area", width="stretch", config=cfg)
st.plotly_chart(pm.budget_strip_figure(view, sizes, budget, lang=lang), key="pm_strip", width="stretch", config=cfg)
st.caption(t("pool.strip_note", lang))
c_map, c_ev = st.columns([3, 2])
with c_map:
    st.plotly_chart(pm.unit_map_figure(view, pm.unit_counts(views), lang=lang), key="pm_map", width="stretch",
                    config=cfg)
with c_ev:
    page_parts.event_list(t("pool.events_title", lang), pm.step_events(view, lang), t("pool.events_none", lang))
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("pool.watch", lang))

page_parts.concept_expanders(pm.PAGE_CONCEPTS, lang)
