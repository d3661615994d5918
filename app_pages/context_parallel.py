"""Page: context parallelism -- KDA states do not add; a prefix scan over segment maps (``docs/article.md#s0``).

Widgets and layout only; the runs and their checks come from ``model_viz.scenarios.context_parallel``,
the figures from ``model_viz.figures.context_parallel``.
"""

import streamlit as st

from model_viz.figures import context_parallel as cp_fig
from model_viz.i18n import t
from model_viz.scenarios import context_parallel as cp
from model_viz.ui import page_parts
from model_viz.ui.step_control import step_control

KEY = "context_parallel_rank"


_run = st.cache_data(show_spinner=False, max_entries=8)(cp.run)
_volume = st.cache_data(show_spinner=False, max_entries=2)(cp.volume)


st.title(t("context_parallel.title"))
R = st.select_slider(t("context_parallel.ranks_label"), cp.RANKS, value=cp.DEFAULT_RANKS,
                     key="context_parallel_ranks")
with st.spinner():
    view = _run(R)
st.markdown(t("context_parallel.intro", T=view.tokens, R=view.ranks, layer=view.layer))
page_parts.chart(cp_fig.maps_figure(view), "context_parallel_maps")
st.markdown(t("context_parallel.maps_text"))

i = cp_fig.clamp_rank(step_control(KEY, last=view.ranks - 1, label=t("context_parallel.step_label"),
                                   interval=1.5), view)
page_parts.chart(cp_fig.incoming_figure(view, i), "context_parallel_incoming")
if i == 0:
    st.markdown(t("context_parallel.step_text_first"))
else:
    e = view.state_error
    st.markdown(t("context_parallel.step_text", r=i, lo=view.bounds[i][0], prev=i - 1, e_scan=e["scan"][i],
                  e_zero=e["zero"][i], e_add=e["add"][i]))

page_parts.chart(cp_fig.logits_figure(view), "context_parallel_logits")
d = view.logits_diff
st.markdown(t("context_parallel.wrong_text", R=view.ranks, scan=max(d["scan"], 1e-9), zero=d["zero"],
              add=d["add"], layer=view.layer, f_zero=view.final_error["zero"], f_add=view.final_error["add"]))

page_parts.chart(cp_fig.volume_figure(_volume()), "context_parallel_volume")
st.markdown(t("context_parallel.bytes_text", sent=f"{view.sent_bytes:,}"))

page_parts.page_end(t("context_parallel.watch"), cp_fig.PAGE_CONCEPTS)
