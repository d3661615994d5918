"""Page: why SWA checkpointing does not carry over to KDA (``docs/article.md#s9-1``).

Widgets and layout only; the engine runs and their checks come from
``model_viz.scenarios.swa_vs_kda``, the figures and sentences from ``model_viz.figures.swa_vs_kda``.
"""

import streamlit as st

from model_viz.figures import swa_vs_kda as sw_fig
from model_viz.i18n import t
from model_viz.scenarios import common as cs
from model_viz.scenarios import swa_vs_kda as sw
from model_viz.ui import page_parts
from model_viz.ui import step_control as sc



_run = st.cache_data(show_spinner=False, max_entries=64)(sw.run)


st.title(t("swa_vs_kda.title"))
st.markdown(t("swa_vs_kda.intro", P=sw.PROMPT_LEN, S=sw.STEP_TOKENS, C=cs.CHUNK))
c_pol, c_win = st.columns([3, 2])
with c_pol:  # keyed per language: the choice survives a language switch
    policy = sc.lang_keyed_choice(st.radio, "swa_vs_kda_policy", t("swa_vs_kda.policy_label"), sw.POLICIES,
                                  sw.POLICIES[0], format_func=lambda p: t(sw_fig.POLICY_LABEL[p]))
window = c_win.select_slider(t("swa_vs_kda.window_label"), sw.WINDOWS, value=sw.DEFAULT_WINDOW,
                             key="swa_vs_kda_window")
position = st.slider(t("swa_vs_kda.position_label"), 1, sw.PROMPT_LEN, 56, key="swa_vs_kda_t")
with st.spinner():
    view = _run(policy, window, position)

page_parts.chart(sw_fig.timeline_figure(view), "swa_vs_kda_timeline")
verdict = sw_fig.verdicts(view)
c_swa, c_kda = st.columns(2)
c_swa.markdown(verdict["swa"])
c_kda.markdown(verdict["kda"])
page_parts.chart(sw_fig.recompute_figure(view), "swa_vs_kda_sweep")
page_parts.page_end(t("swa_vs_kda.watch"), sw_fig.PAGE_CONCEPTS)
