"""Page: three kinds of state — MLA KV grows per token, the KDA state and the conv window do not.

Widgets and layout only; the byte arithmetic and the figures come from ``model_viz.figures.three_states``.
"""

import streamlit as st

from model_viz.ui import page_parts
from model_viz.figures import three_states as ts
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "three_states_len"


st.title(t("three_states.title"))
intro = st.empty()  # filled once the model family is chosen (its two sizes are named there)

st.session_state[KEY] = ts.clamp_len(st.session_state.get(KEY))  # DEFAULT_LEN on the first run
T = step_control(KEY, first=0, last=ts.MAX_LEN, step=ts.LEN_STEP, label=t("three_states.len_label"),
                 interval=0.8)
scope = "model" if st.toggle(t("three_states.scope_toggle"), key="three_states_model") else "layer"

fam = page_parts.model_family("three_states")
(small_name, tiny), (big_name, big) = ts.FAMILY_CONFIGS[fam.key].items()
intro.markdown(t("three_states.intro", w=tiny.short_conv_kernel_size - 1, small=t(ts.CONFIG_LABEL[small_name]),
                 big=t(ts.CONFIG_LABEL[big_name])))
bt, bb = ts.bytes_at(tiny, T, scope), ts.bytes_at(big, T, scope)
st.markdown(t("three_states.current", T=T, small=t(ts.CONFIG_LABEL[small_name]),
              big=t(ts.CONFIG_LABEL[big_name]), tiny_kv=ts.fmt_bytes(bt["mla_kv"]),
              tiny_kda=ts.fmt_bytes(bt["kda_total"]), tiny_be=f"{ts.break_even(tiny, scope):,.0f}",
              big_kv=ts.fmt_bytes(bb["mla_kv"]), big_kda=ts.fmt_bytes(bb["kda_total"]),
              big_be=f"{ts.break_even(big, scope):,.0f}"))
page_parts.chart(ts.bytes_figure(T, scope, family=fam.key), "three_states_bytes")
c_win, c_table = st.columns([3, 2])
with c_win:
    page_parts.chart(ts.window_figure(T), "three_states_window")
with c_table:
    st.markdown(t("three_states.table.title"))
    st.dataframe(ts.size_rows(T, scope, fam.key), hide_index=True, width="stretch")
st.markdown(t("three_states.serving.title"))
st.dataframe(ts.serving_rows(), hide_index=True, width="stretch")
st.caption(t("three_states.serving.note", ratio=ts.checkpoint_ratio()))
page_parts.page_end(t("three_states.watch"), ts.PAGE_CONCEPTS)
