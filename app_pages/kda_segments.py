"""Page: sequential but segmentable — any split in order gives the one-pass state, a swap does not.

Widgets and layout only; the computation and the figures come from ``model_viz.figures.kda_segments / model_viz.scenarios.kda_segments``.
"""

import streamlit as st

from model_viz.ui import page_parts
from model_viz.figures import kda_segments as sg_fig
from model_viz.scenarios import kda_segments as sg
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "kda_segments_step"


_run = st.cache_data(show_spinner=False, max_entries=32)(sg.run_segments)


st.title(t("kda_segments.title"))
st.markdown(t("kda_segments.intro", T=sg.T_LEN, H=sg.HEADS, D=sg.DIM, C=sg.CHUNK))
c_seed, c_splits = st.columns([1, 4])
seed = c_seed.number_input(t("kda_segments.seed_label"), 0, 10_000, 0, step=1, key="kda_segments_seed")
splits = c_splits.multiselect(t("kda_segments.splits_label"), list(range(1, sg.T_LEN)), default=list(sg.DEFAULT_SPLITS),
                              key="kda_segments_splits", placeholder=t("common.choose"))
try:
    bounds = sg.bounds_of(splits)
except sg.SplitError as err:  # the multiselect offers only valid positions; kept for safety
    st.error(err.message())
    st.stop()
nseg = len(bounds) - 1
c_swap, c_head = st.columns([1, 1])
swap = None
if nseg >= 2:
    swap = c_swap.selectbox(t("kda_segments.swap_label"), list(range(nseg - 1)), index=nseg - 2, key="kda_segments_swap",
                            format_func=lambda i: f"{i + 1} ↔ {i + 2}")
head = c_head.radio(t("kda_segments.head_label"), list(range(sg.HEADS)), horizontal=True, key="kda_segments_head")
with st.spinner():
    r = _run(int(seed), tuple(bounds[1:-1]), swap)

j = step_control(KEY, values=list(range(1, nseg + 1)), label=t("kda_segments.step_label"))  # shown from 1, as the text counts

init = t("kda_segments.init_zero") if j == 0 else t("kda_segments.init_prev", p=j)
st.markdown(t("kda_segments.current", j=j + 1, n=nseg, s=r.bounds[j], e=r.bounds[j + 1], init=init))
m1, m2, m3 = st.columns(3)
m1.metric(t("kda_segments.metric.boundary"), sg_fig.fmt_diff(r.boundary_diff(j)))
m2.metric(t("kda_segments.metric.swapped"), sg_fig.fmt_diff(r.swapped_diff()))
m3.metric(t("kda_segments.metric.chunks"), sg_fig.fmt_diff(r.chunk_diff()))
if nseg < 2:
    st.info(t("kda_segments.one_segment"))
page_parts.chart(sg_fig.timeline_figure(r, j), "kda_segments_timeline")
page_parts.chart(sg_fig.boundary_figure(r, j, head), "kda_segments_boundary")
if r.swapped_final is not None:
    page_parts.chart(sg_fig.swap_figure(r, head), "kda_segments_swap_fig")
page_parts.page_end(t("kda_segments.watch", C=sg.CHUNK), sg_fig.PAGE_CONCEPTS)
