"""Page: restore paths — match, back-off, boundary check, copy-on-write restore, recompute; and "break it".

Widgets and layout only; the engine runs (including the deliberately broken restore), the checks and
the figures come from ``model_viz.figures.restore_paths / model_viz.scenarios.restore_paths``.
"""

import streamlit as st

from model_viz.scenarios import common as cs
from model_viz.ui import page_parts
from model_viz.ui import step_control as sc
from model_viz.figures import restore_paths as rp_fig
from model_viz.scenarios import restore_paths as rp
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "restore_paths_step"


_run = st.cache_data(show_spinner=False, max_entries=16)(rp.run)


st.title(t("restore_paths.title"))
intro = st.empty()  # filled once the run is known (the numbers come from it)
c_req, c_break = st.columns([3, 2], vertical_alignment="bottom")
names = [r[0] for r in rp.REQUESTS]
with c_req:  # keyed per language: the choice survives a language switch, its label follows it
    request = sc.lang_keyed_choice(st.selectbox, "restore_paths_request", t("restore_paths.request_label"), names,
                                   names[0], format_func=lambda k: t(rp_fig.REQUEST_LABEL[k]))
broken = c_break.toggle(t("restore_paths.break_label"), key="restore_paths_break")
mode = "none"
if broken:
    mode = sc.lang_keyed_choice(st.radio, "restore_paths_mode", t("restore_paths.mode_label"), rp.MODES[1:],
                                rp.MODES[1], horizontal=True, format_func=lambda m: t(rp_fig.MODE_LABEL[m]))
with st.spinner():
    r = _run(request, mode)
intro.markdown(t("restore_paths.intro", P=rp.PROMPT_LEN, T=r.cached_len, ckpts=", ".join(map(str, r.checkpoints)),
                C=cs.CHUNK))

i = step_control(KEY, values=list(range(1, len(rp.STEPS) + 1)), label=t("restore_paths.step_label"),
                 interval=1.5)  # the slider shows 1 .. n, as the steps below are numbered
st.markdown(" → ".join(f"**{k + 1} · {t(rp_fig.STEP_NAME[s])}**" if k == i else
                       f"{k + 1} · {t(rp_fig.STEP_NAME[s])}" for k, s in enumerate(rp.STEPS)))
st.markdown(rp_fig.step_text(r, i))
if rp.STEPS[i] == "check" and not r.check_ok:
    st.markdown(t("restore_paths.check_raised"))
    st.code(f"BoundaryMismatchError: {r.check_msg}", language=None, wrap_lines=True)
m1, m2, m3 = st.columns(3)
m1.metric(t("restore_paths.metric.kv"), r.kv_len if i >= rp.STEPS.index("match") else "—")
m2.metric(t("restore_paths.metric.state"), r.state_len if i >= rp.STEPS.index("backoff") else "—")
m3.metric(t("restore_paths.metric.recompute"), r.recompute if i >= rp.STEPS.index("recompute") else "—")

page_parts.chart(rp_fig.path_figure(r, i), "restore_paths_path")
page_parts.chart(rp_fig.divergence_figure(r), "restore_paths_div")
page_parts.page_end(t("restore_paths.watch", kv=r.kv_len, c=r.state_len), rp_fig.PAGE_CONCEPTS)
