"""Page: prefill/decode disaggregation -- the handoff is more than KV (``docs/article.md#s4-4``, ``#s5-6``).

Widgets and layout only; the runs and their checks come from ``model_viz.scenarios.pd_disaggregation``,
the figures from ``model_viz.figures.pd_disaggregation``.
"""

import streamlit as st

from model_viz.figures import pd_disaggregation as pd_fig
from model_viz.i18n import t
from model_viz.scenarios import pd_disaggregation as pd
from model_viz.ui import page_parts
from model_viz.ui import step_control as sc
from model_viz.ui.step_control import step_control

KEY = "pd_disaggregation_stage"


_run = st.cache_data(show_spinner=False, max_entries=2)(pd.run)
_broken = st.cache_data(show_spinner=False, max_entries=4)(pd.break_it)
_volume = st.cache_data(show_spinner=False, max_entries=2)(pd.volume)


st.title(t("pd_disaggregation.title"))
with st.spinner():
    view = _run()
st.markdown(t("pd_disaggregation.intro", P=view.prompt_len, N=len(view.tokens)))
i = pd_fig.clamp_stage(step_control(KEY, values=list(range(1, len(pd.STAGES) + 1)),  # shown 1 .. 5, as "Stage i/5"
                                    label=t("pd_disaggregation.step_label"), interval=1.5))
page_parts.chart(pd_fig.stage_figure(view, i), "pd_disaggregation_stages")
stage = pd.STAGES[i]
page_span = lambda ps: f"{ps[0]}-{ps[-1]}" if len(ps) > 1 else str(ps[0])  # noqa: E731
texts = {
    "prefill": t("pd_disaggregation.text.prefill", P=view.prompt_len, slot=view.prefill_slot,
                 pages=page_span(view.prefill_pages), tok=view.first_token),
    "capture": t("pd_disaggregation.text.capture", total=f"{view.manifest.total_bytes:,}"),
    "transfer": t("pd_disaggregation.text.transfer", ms=view.transfer_s * 1000),
    "verify": t("pd_disaggregation.text.verify", slot=view.decode_slot, pages=page_span(view.decode_pages)),
    "decode": t("pd_disaggregation.text.decode_empty") if view.pools_empty_after
    else t("pd_disaggregation.text.decode_left"),
}
st.markdown(texts[stage])
page_parts.chart(pd_fig.manifest_table(view), "pd_disaggregation_manifest")
page_parts.chart(pd_fig.sends_table(view), "pd_disaggregation_sends")
st.markdown(t("pd_disaggregation.sends_text", step=pd.STEP_TOKENS))

page_parts.chart(pd_fig.bytes_figure(_volume()), "pd_disaggregation_bytes")
st.markdown(t("pd_disaggregation.bytes_text"))

if st.toggle(t("pd_disaggregation.break_label"), key="pd_disaggregation_break"):
    mode = sc.lang_keyed_choice(st.radio, "pd_disaggregation_break_mode", t("pd_disaggregation.break_mode"),
                                pd.BREAKS, pd.BREAKS[0], format_func=lambda m: t(pd_fig.BREAK_LABEL[m]))
    with st.spinner():
        broken = _broken(mode)
    if broken.first_divergence is None:
        st.markdown(t("pd_disaggregation.broken.same", why=broken.refusal))
    else:
        st.markdown(t("pd_disaggregation.broken.refused", why=broken.refusal, d=broken.first_divergence))
        st.html(pd_fig.tokens_html(broken))

st.markdown(t("pd_disaggregation.epd"))
page_parts.page_end(t("pd_disaggregation.watch"), pd_fig.PAGE_CONCEPTS)
