"""Page: speculative decoding -- a KDA state cannot be truncated (``docs/article.md#s0``, ``#s6-4``).

Widgets and layout only; the engine runs and their checks come from
``model_viz.scenarios.spec_decode``, the figures from ``model_viz.figures.spec_decode``.
"""

import streamlit as st

from model_viz.figures import spec_decode as sd_fig
from model_viz.i18n import t
from model_viz.scenarios import spec_decode as sd
from model_viz.ui import page_parts
from model_viz.ui.step_control import step_control

KEY = "spec_decode_step"


_run = st.cache_data(show_spinner=False, max_entries=8)(sd.run)
_broken = st.cache_data(show_spinner=False, max_entries=8)(sd.run_broken)
_static = st.cache_data(show_spinner=False, max_entries=8)(sd.static_view)


st.title(t("spec_decode.title"))
k = st.select_slider(t("spec_decode.k_label"), sd.KS, value=sd.DEFAULT_K, key="spec_decode_k")
with st.spinner():
    run = _run(k)
st.markdown(t("spec_decode.intro", P=len(run.prompt), N=len(run.tokens)))
st.markdown(t("spec_decode.summary", n=len(run.steps), mean=run.mean_accepted_length, N=len(run.tokens),
              spec=run.spec_steps, plain=run.plain_steps))

i = step_control(KEY, values=list(range(1, len(run.steps) + 1)), label=t("spec_decode.step_label"),
                 interval=1.5)  # shown from 1, as "Verify i/n" counts
page_parts.chart(sd_fig.verify_figure(run, i), "spec_decode_verify")
s = run.steps[sd_fig.clamp_step(i, run)]
st.markdown(t("spec_decode.step_text", a=s.num_accepted, k=len(s.drafts), kept=s.kept, j=s.kept - 1))

st.subheader(t("spec_decode.cf_title"))
st.markdown(t("spec_decode.cf_text"))
page_parts.chart(sd_fig.closed_form_figure(run, i), "spec_decode_closed_form")

page_parts.chart(sd_fig.bytes_figure(run), "spec_decode_bytes")
st.markdown(t("spec_decode.bytes_text", tok=f"{run.record_bytes:,}", state=f"{run.state_bytes:,}"))
page_parts.chart(sd_fig.strategy_table(run), "spec_decode_strategies")

if st.toggle(t("spec_decode.break_label"), key="spec_decode_break"):
    with st.spinner():
        broken = _broken(k)
    st.markdown(t("spec_decode.broken.intro"))
    if broken.first_rejection is None:
        st.info(t("spec_decode.broken.none"))
    else:
        if broken.diverged:
            st.markdown(t("spec_decode.broken.diverged", r=broken.first_rejection, d=broken.first_divergence))
        else:
            st.markdown(t("spec_decode.broken.same", r=broken.first_rejection))
        st.html(sd_fig.tokens_html(broken))
        page_parts.chart(sd_fig.drift_figure(broken), "spec_decode_drift")

st.subheader(t("spec_decode.static.title"))
n_req = st.select_slider(t("spec_decode.static.n_label"), sd.STATIC_REQUESTS, value=sd.DEFAULT_STATIC_REQUESTS,
                         key="spec_decode_static_n")
with st.spinner():
    view = _static(n_req)
st.markdown(t("spec_decode.static.intro", sizes=", ".join(map(str, view.sizes)), n=view.num_requests,
              mt=", ".join(map(str, view.max_tokens))))
page_parts.chart(sd_fig.bucket_steps_figure(view), "spec_decode_static_steps")
j = st.select_slider(t("spec_decode.static.step_label"), list(range(len(view.steps))), value=0,
                     format_func=lambda x: str(view.steps[x].step), key="spec_decode_static_step")
b = view.steps[sd_fig.clamp_bucket_step(j, view)]
page_parts.chart(sd_fig.bucket_table(view, j), "spec_decode_static_table")
st.markdown(sd_fig.bucket_text(b))
st.caption(t("spec_decode.static.how"))

page_parts.page_end(t("spec_decode.watch"), sd_fig.PAGE_CONCEPTS)
