"""Page: the hybrid execution chain — step through an engine run: the batch, cu_seqlens, the kernels.

Widgets and layout only; the scenario run, the trace reading and the figures come from
``model_viz.scenarios.engine_trace`` and ``model_viz.figures.hybrid_chain``.
"""

import streamlit as st

from model_viz.figures import hybrid_chain as cf
from model_viz.ui import page_parts
from model_viz.scenarios import engine_trace as et
from model_viz.i18n import current_language, in_language, t
from model_viz.ui import step_control as sc
from model_viz.ui.step_control import step_control


BUDGETS = (8, 16, 24, 32, 48, 64)
KEY = "hybrid_chain_step"


@st.cache_data(show_spinner=False, max_entries=32)
def _canned(num_requests: int, token_budget: int, mixed_batch: str, model: str) -> str:
    return et.run_scenario(et.PROMPT_LENS[:num_requests], token_budget=token_budget, mixed_batch=mixed_batch,
                           model=model)


@st.cache_data(show_spinner=False, max_entries=8)
def _parse(data: bytes | str):
    """Parse once per trace: ``(header, events, per-step views)``."""
    header, events = et.parse_trace(data)
    return header, events, et.engine_steps(events)


@st.cache_data(show_spinner=False, max_entries=64)
def _timeline(data: bytes | str, i: int, lang: str):
    """The whole-run timeline (the page's largest figure for a long trace), once per trace, step and language
    (its titles and legend are drawn in ``lang``)."""
    _, _, views = _parse(data)
    return in_language(lang, cf.timeline_figure, views, i)


st.title(t("hybrid_chain.title"))
fam = page_parts.model_family("hybrid_chain")
c_n, c_b = st.columns(2)
nreq = c_n.slider(t("hybrid_chain.nreq_label"), 1, len(et.PROMPT_LENS), 3, key="hybrid_chain_nreq")
budget = c_b.select_slider(t("hybrid_chain.budget_label"), BUDGETS, value=16, key="hybrid_chain_budget")
mixed = sc.lang_keyed_choice(st.radio, "hybrid_chain_mixed", t("hybrid_chain.mixed_label"), cf.MIXED_POLICIES,
                             "chunk", horizontal=True, format_func=lambda m: t(cf.MIXED_LABEL[m]))
intro = st.empty()  # the built-in run's description, or a note that an uploaded trace is shown instead
if fam.key == "k3":
    st.info(t("hybrid_chain.k3_note"))

upload = st.file_uploader(t("common.trace.upload_label"), type=["jsonl", "json", "txt"], key="hybrid_chain_upload")
header = events = data = None
if upload is not None:
    try:
        data = upload.getvalue()
        header, events, views = _parse(data)
        page_parts.trace_source(upload.name, header, len(events))
    except et.TraceError as err:
        st.error(err.message())
if events is None:
    with st.spinner():
        data = _canned(nreq, budget, mixed, fam.key)
        header, events, views = _parse(data)
    st.caption(t("common.trace.source_canned", events=len(events)))
    intro.markdown(t("hybrid_chain.intro", n=nreq, lens=", ".join(map(str, et.PROMPT_LENS[:nreq])), budget=budget))
else:
    intro.info(t("hybrid_chain.intro_upload"))

kda_layers, mla_layers = et.layer_layout(header, events)
i = step_control(KEY, values=[v.step for v in views], label=t("common.trace.step_label"))
view = views[i]

st.markdown(cf.step_summary(view))
x_max = cf.token_axis_max(views)
page_parts.chart(cf.batch_figure(view, x_max), "hybrid_chain_batch")
st.markdown(t("hybrid_chain.table.title"))
rows = [{t(cf.COLUMN_LABEL[k]): v for k, v in r.items()} for r in cf.batch_rows(view)]
st.dataframe(rows, hide_index=True, width="stretch")
c_grid, c_time = st.columns([5, 7])
with c_grid:
    page_parts.chart(cf.kernel_grid_figure(view, kda_layers, mla_layers, phases=cf.trace_phases(views)),
                     "hybrid_chain_grid")
    st.caption(t("hybrid_chain.mla_note"))
with c_time:
    page_parts.chart(_timeline(data, i, current_language()), "hybrid_chain_timeline")
page_parts.page_end(t("hybrid_chain.watch"), cf.PAGE_CONCEPTS)
