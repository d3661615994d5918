"""Page: restore paths — match, back-off, boundary check, copy-on-write restore, recompute; and "break it".

Widgets and layout only; the engine runs (including the deliberately broken restore), the checks and
the figures come from ``model_viz.restore_paths``.
"""

import streamlit as st

from model_viz import cache_scenarios as cs
from model_viz import page_parts
from model_viz import restore_paths as rp
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "rp_step"


@st.cache_data(show_spinner=False, max_entries=16)
def _run(request: str, mode: str):
    return rp.run(request, mode)


st.title(t("rst.title", lang))
intro = st.empty()  # filled once the run is known (the numbers come from it)
c_req, c_break = st.columns([3, 2], vertical_alignment="bottom")
names = [r[0] for r in rp.REQUESTS]
request = c_req.selectbox(t("rst.request_label", lang), names, key="rp_request",
                          format_func=lambda k: t(f"rst.req.{k}", lang))
broken = c_break.toggle(t("rst.break_label", lang), key="rp_break")
mode = "none"
if broken:
    mode = st.radio(t("rst.mode_label", lang), rp.MODES[1:], horizontal=True, key="rp_mode",
                    format_func=lambda m: t(f"rst.mode.{m}", lang))
with st.spinner():
    r = _run(request, mode)
intro.markdown(t("rst.intro", lang, P=rp.PROMPT_LEN, T=r.cached_len, ckpts=", ".join(map(str, r.checkpoints)),
                C=cs.CHUNK))

i = step_control(KEY, lang, last=len(rp.STEPS) - 1, label=t("rst.step_label", lang), interval=1.5,
                 slider_format="%d")
st.markdown(" → ".join(f"**{k + 1} · {t(f'rst.stepname.{s}', lang)}**" if k == i else
                       f"{k + 1} · {t(f'rst.stepname.{s}', lang)}" for k, s in enumerate(rp.STEPS)))
st.markdown(rp.step_text(r, i, lang))
if rp.STEPS[i] == "check" and r.broken:
    st.markdown(t("rst.check_raised", lang))
    st.code(f"BoundaryMismatchError: {r.check_msg}", language=None, wrap_lines=True)
m1, m2, m3 = st.columns(3)
m1.metric(t("rst.metric.kv", lang), r.kv_len if i >= rp.STEPS.index("match") else "—")
m2.metric(t("rst.metric.state", lang), r.state_len if i >= rp.STEPS.index("backoff") else "—")
m3.metric(t("rst.metric.recompute", lang), r.recompute if i >= rp.STEPS.index("recompute") else "—")

cfg = {"displaylogo": False}
st.plotly_chart(rp.path_figure(r, i, lang=lang), key="rp_path", width="stretch", config=cfg)
st.plotly_chart(rp.divergence_figure(r, lang=lang), key="rp_div", width="stretch", config=cfg)
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("rst.watch", lang, kv=r.kv_len, c=r.state_len))

page_parts.concept_expanders(rp.PAGE_CONCEPTS, lang)
