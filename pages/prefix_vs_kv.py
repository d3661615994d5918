"""Page: a prefix cache is not a KV cache — for every shared length L, KV reuses L, the state only a checkpoint.

Widgets and layout only; the engine run, the checks and the figures come from ``model_viz.prefix_vs_kv``.
"""

import streamlit as st

from model_viz import cache_scenarios as cs
from model_viz import page_parts
from model_viz import prefix_vs_kv as pk
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "pk_len"


@st.cache_data(show_spinner=False, max_entries=4)
def _run(prompt_len: int):
    return pk.run(prompt_len)


st.title(t("ptk.title", lang))
with st.spinner():
    r = _run(pk.PROMPT_LEN)
st.markdown(t("ptk.intro", lang, C=cs.CHUNK, P=r.prompt_len, T=r.T, ckpts=", ".join(map(str, r.checkpoints))))

if KEY not in st.session_state:
    st.session_state[KEY] = r.default_length()
L = step_control(KEY, lang, first=1, last=r.T, label=t("ptk.step_label", lang), interval=0.6)
c = r.deepest(L)

st.markdown(t("ptk.current", lang, L=L, L1=L - 1, c=c, n=L - c))
m1, m2, m3 = st.columns(3)
m1.metric(t("ptk.metric.kv", lang), L)
m2.metric(t("ptk.metric.state", lang), c)
m3.metric(t("ptk.metric.recompute", lang), L - c)
v = r.verified_at(L)
if v is not None:
    st.success(t("ptk.verified", lang, L=v.L, tail=v.tail, reused=v.reused, n=v.recomputed, d=f"{v.max_diff:.1e}"),
               icon=":material/verified:")
else:
    st.caption(t("ptk.not_verified", lang, ls=", ".join(str(x.L) for x in r.verified)))

cfg = {"displaylogo": False}
st.plotly_chart(pk.strip_figure(r, L, lang=lang), key="pk_strip", width="stretch", config=cfg)
st.plotly_chart(pk.staircase_figure(r, L, lang=lang), key="pk_stair", width="stretch", config=cfg)
st.caption(t("ptk.memory", lang, **pk.memory_facts(r)))
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("ptk.watch", lang))

page_parts.concept_expanders(pk.PAGE_CONCEPTS, lang)
