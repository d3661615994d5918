"""Page: a prefix cache is not a KV cache — for every shared length L, KV reuses L, the state only a checkpoint.

Widgets and layout only; the engine run, the checks and the figures come from ``model_viz.figures.prefix_vs_kv / model_viz.scenarios.prefix_vs_kv``.
"""

import streamlit as st

from model_viz.scenarios import common as cs
from model_viz.ui import page_parts
from model_viz.figures import prefix_vs_kv as pk_fig
from model_viz.scenarios import prefix_vs_kv as pk
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "prefix_vs_kv_len"


_run = st.cache_data(show_spinner=False, max_entries=4)(pk.run)


st.title(t("prefix_vs_kv.title"))
with st.spinner():
    r = _run(pk.PROMPT_LEN)
st.markdown(t("prefix_vs_kv.intro", C=cs.CHUNK, P=r.prompt_len, T=r.T, ckpts=", ".join(map(str, r.checkpoints))))

if KEY not in st.session_state:
    st.session_state[KEY] = r.default_length()
L = step_control(KEY, first=1, last=r.T, label=t("prefix_vs_kv.step_label"), interval=0.6)
c = r.deepest(L)

st.markdown(t("prefix_vs_kv.current", L=L, L1=L - 1, c=c, n=L - c))
m1, m2, m3 = st.columns(3)
m1.metric(t("prefix_vs_kv.metric.kv"), L)
m2.metric(t("prefix_vs_kv.metric.state"), c)
m3.metric(t("prefix_vs_kv.metric.recompute"), L - c)
v = r.verified_at(L)
if v is not None:
    st.success(t("prefix_vs_kv.verified", L=v.L, tail=v.tail, reused=v.reused, n=v.recomputed, d=f"{v.max_diff:.1e}"),
               icon=":material/verified:")
else:
    st.caption(t("prefix_vs_kv.not_verified", ls=", ".join(str(x.L) for x in r.verified)))

page_parts.chart(pk_fig.strip_figure(r, L), "prefix_vs_kv_strip")
page_parts.chart(pk_fig.staircase_figure(r, L), "prefix_vs_kv_stair")
st.caption(t("prefix_vs_kv.memory", **pk.memory_facts(r)))
page_parts.page_end(t("prefix_vs_kv.watch"), pk_fig.PAGE_CONCEPTS)
