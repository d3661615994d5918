"""Page: compressed checkpoints -- fp32 / bf16 / int8 copies of the same state (``docs/article.md#s5-3``).

Widgets and layout only; the engine runs and their checks come from
``model_viz.scenarios.compressed_checkpoints``, the figures and tables from
``model_viz.figures.compressed_checkpoints``.
"""

import streamlit as st

from model_viz.figures import compressed_checkpoints as cc_fig
from model_viz.i18n import t
from model_viz.scenarios import compressed_checkpoints as cc
from model_viz.ui import page_parts
from model_viz.ui import step_control as sc



_run = st.cache_data(show_spinner=False, max_entries=16)(cc.run)
_split_drift = st.cache_data(show_spinner=False, max_entries=16)(cc.split_drift)


st.title(t("compressed_checkpoints.title"))
st.markdown(t("compressed_checkpoints.intro", S=cc.SYSTEM_LEN))
c_model, c_steps = st.columns([2, 3])
with c_model:  # keyed per language: the choice survives a language switch
    model = sc.lang_keyed_choice(st.radio, "compressed_checkpoints_model", t("compressed_checkpoints.model_label"),
                                 cc.MODELS, cc.MODELS[0], format_func=lambda m: t(cc_fig.MODEL_LABEL[m]))
steps = c_steps.slider(t("compressed_checkpoints.steps_label"), 1, cc.MAX_STEPS, cc.DEFAULT_STEPS,
                       key="compressed_checkpoints_steps")
with st.spinner():
    runs = _run(model, steps)
    split = _split_drift(model, steps)

st.dataframe(cc_fig.summary_rows(runs), hide_index=True, width="stretch", key="compressed_checkpoints_table")
st.caption(t("compressed_checkpoints.exact_note", fp32=f"{max(runs[0].logit_diff):.1e}", S=cc.SYSTEM_LEN,
             split=f"{split:.1e}"))
page_parts.chart(cc_fig.error_figure(runs), "compressed_checkpoints_errors")
st.markdown(f"**{t('compressed_checkpoints.tokens_title')}**")
st.html(cc_fig.token_table_html(runs))
with st.expander(t("common.watch_title"), expanded=True):
    st.markdown(t("compressed_checkpoints.watch"))

st.subheader(t("compressed_checkpoints.promise_title"))
st.markdown(t("compressed_checkpoints.promise_intro"))
n_req = st.select_slider(t("compressed_checkpoints.promise_requests"), cc.STREAM_SIZES, value=24,
                         key="compressed_checkpoints_requests")
if st.button(t("compressed_checkpoints.promise_run"), key="compressed_checkpoints_promise"):
    bar = st.progress(0.0)
    st.session_state["compressed_checkpoints_rows"] = (model, n_req, cc.answers_changed(
        model, n_req, progress=lambda done, total: bar.progress(done / total)))
    bar.empty()
measured = st.session_state.get("compressed_checkpoints_rows")
if measured is not None:
    st.caption(t("compressed_checkpoints.promise_of", model=t(cc_fig.MODEL_LABEL[measured[0]]),
                 n=measured[1]))
    st.dataframe(cc_fig.promise_rows(measured[2]), hide_index=True, width="stretch",
                 key="compressed_checkpoints_promise_table")

page_parts.concept_expanders(cc_fig.PAGE_CONCEPTS)
