"""Page: the memory pool map — one byte budget, page kinds over time, owners, preemptions.

Widgets and layout only; the scenario, the trace and the figures come from ``model_viz.scenarios.engine_trace``
and ``model_viz.figures.pool_map / model_viz.scenarios.pool_map``.
"""

import streamlit as st

from model_viz.ui import page_parts
from model_viz.scenarios import engine_trace as et
from model_viz.figures import pool_map as pm_fig
from model_viz.scenarios import pool_map as pm
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "pool_map_step"


@st.cache_data(show_spinner=False, max_entries=16)
def _canned(num_pages: int, model: str) -> str:
    return et.run_scenario(**pm.scenario(num_pages, model))


_demand = st.cache_data(show_spinner=False, max_entries=16)(pm.demand_rows)
_parse = st.cache_data(show_spinner=False, max_entries=16)(et.parse_trace)


st.title(t("pool_map.title"))
fam = page_parts.model_family("pool_map")
num_pages = st.select_slider(t("pool_map.pages_label", slots=pm.STATE_SLOTS), pm.PAGE_OPTIONS,
                             value=pm.DEFAULT_PAGES, key="pool_map_pages")
with st.spinner():
    header, events = _parse(_canned(num_pages, fam.key))
views = et.engine_steps(events)
sizes = pm_fig.unit_bytes(header, views)
st.markdown(t("pool_map.intro", state_kib=f"{sizes['kda_state'] / 1024:.0f}", page_kib=f"{sizes['mla_kv'] / 1024:.0f}",
              page_size=header.get("page_size", et.PAGE_SIZE), n=len(et.PROMPT_LENS),
              lens=", ".join(map(str, et.PROMPT_LENS)), gen=pm.MAX_TOKENS, slots=pm.STATE_SLOTS))

real = pm.released_units(fam.key)
st.caption(t("pool_map.released", model=t(fam.real_label), state=f"{real['state_bytes'] / 2**20:,.1f}",
             page=f"{real['kv_page_bytes'] / 2**10:,.0f}", ratio=f"{real['state_bytes'] / real['kv_page_bytes']:,.0f}",
             tiny_ratio=f"{sizes['kda_state'] / sizes['mla_kv']:,.0f}"))

i = step_control(KEY, values=[v.step for v in views], label=t("common.trace.step_label"))
view = views[i]

budget = pm_fig.budget_of(views)
used = view.pool.used_bytes if view.pool else {}
st.markdown(t("pool_map.summary", step=view.step, first=views[0].step, last=views[-1].step, used=f"{used.get('total', 0) / 1024:,.0f}",
              budget=f"{budget / 1024:,.0f}", states=f"{used.get('kda_state', 0) / 1024:,.0f}",
              kv=f"{used.get('mla_kv', 0) / 1024:,.0f}", pre=len(pm_fig.preemption_steps(views))))
page_parts.chart(pm_fig.pool_area_figure(views, i), "pool_map_area")
page_parts.chart(pm_fig.budget_strip_figure(view, sizes, budget), "pool_map_strip")
st.caption(t("pool_map.strip_note"))
c_map, c_ev = st.columns([3, 2])
with c_map:
    page_parts.chart(pm_fig.unit_map_figure(view, pm_fig.unit_counts(views)), "pool_map_map")
with c_ev:
    page_parts.event_list(t("pool_map.events_title"), pm_fig.step_events(view), t("pool_map.events_none"))
with st.expander(t("common.watch_title"), expanded=True):
    st.markdown(t("pool_map.watch"))

st.subheader(t("pool_map.demand.title"))
st.markdown(t("pool_map.demand.intro", tokens=max(et.PROMPT_LENS) + pm.MAX_TOKENS))
demand_budget, demand = _demand(num_pages, fam.key)
# first shown: the settings the engine accepts at this budget; the refused ones are a pick away
picked = st.multiselect(t("pool_map.demand.pick"), [r["label"] for r in demand],
                        default=pm.accepted_labels(demand), key="pool_map_demand_settings",
                        format_func=lambda k: t(k), placeholder=t("common.choose"))
shown = [r for r in demand if r["label"] in picked]
page_parts.chart(pm_fig.demand_figure(demand_budget, shown), "pool_map_demand")
hidden = [t(r["label"]) for r in demand if r["message"] and r["label"] not in picked]
if hidden:
    st.caption(t("pool_map.demand.hidden", names=" · ".join(hidden)))
for row in shown:
    if row["message"]:
        st.warning(f"**{t(row['label'])}** — {t('pool_map.demand.refused_by')} {row['message']}")

page_parts.concept_expanders(pm_fig.PAGE_CONCEPTS)
