"""Page: prefill/decode disaggregation -- the handoff is more than KV (``docs/article.md#s4-4``, ``#s5-6``).

Widgets and layout only; the runs and their checks come from ``model_viz.scenarios.pd_disaggregation``,
the figures from ``model_viz.figures.pd_disaggregation``.
"""

import streamlit as st

from model_viz.figures import pd_disaggregation as pd_fig
from model_viz.i18n import t
from model_viz.scenarios import pd_disaggregation as pd
from model_viz.ui import page_parts
from model_viz.ui.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "pd_disaggregation_stage"


@st.cache_data(show_spinner=False, max_entries=2)
def _run():
    return pd.run()


@st.cache_data(show_spinner=False, max_entries=4)
def _broken(mode: str):
    return pd.break_it(mode)


@st.cache_data(show_spinner=False, max_entries=2)
def _volume():
    return pd.volume()


st.title(t("pd_disaggregation.title", lang))
with st.spinner():
    view = _run()
st.markdown(t("pd_disaggregation.intro", lang, P=view.prompt_len, N=len(view.tokens)))
i = pd_fig.clamp_stage(step_control(KEY, lang, last=len(pd.STAGES) - 1, label=t("pd_disaggregation.step_label", lang),
                                    interval=1.5))
page_parts.chart(pd_fig.stage_figure(view, i, lang), "pd_disaggregation_stages")
stage = pd.STAGES[i]
page_span = lambda ps: f"{ps[0]}-{ps[-1]}" if len(ps) > 1 else str(ps[0])  # noqa: E731
texts = {
    "prefill": t("pd_disaggregation.text.prefill", lang, P=view.prompt_len, slot=view.prefill_slot,
                 pages=page_span(view.prefill_pages), tok=view.first_token),
    "capture": t("pd_disaggregation.text.capture", lang, total=f"{view.manifest.total_bytes:,}"),
    "transfer": t("pd_disaggregation.text.transfer", lang, ms=view.transfer_s * 1000),
    "verify": t("pd_disaggregation.text.verify", lang, slot=view.decode_slot, pages=page_span(view.decode_pages)),
    "decode": t("pd_disaggregation.text.decode", lang, empty=view.pools_empty_after),
}
st.markdown(texts[stage])
page_parts.chart(pd_fig.manifest_table(view, lang), "pd_disaggregation_manifest")
page_parts.chart(pd_fig.sends_table(view, lang), "pd_disaggregation_sends")
st.markdown(t("pd_disaggregation.sends_text", lang, step=pd.STEP_TOKENS))

page_parts.chart(pd_fig.bytes_figure(_volume(), lang), "pd_disaggregation_bytes")
st.markdown(t("pd_disaggregation.bytes_text", lang))

if st.toggle(t("pd_disaggregation.break_label", lang), key="pd_disaggregation_break"):
    mode = st.radio(t("pd_disaggregation.break_mode", lang), pd.BREAKS, key="pd_disaggregation_break_mode",
                    format_func=lambda m: t(pd_fig.BREAK_LABEL[m], lang))
    with st.spinner():
        broken = _broken(mode)
    if broken.first_divergence is None:
        st.markdown(t("pd_disaggregation.broken.same", lang, why=broken.refusal))
    else:
        st.markdown(t("pd_disaggregation.broken.refused", lang, why=broken.refusal, d=broken.first_divergence))
        st.html(pd_fig.tokens_html(broken, lang))

st.markdown(t("pd_disaggregation.epd", lang))
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("pd_disaggregation.watch", lang))

page_parts.concept_expanders(pd_fig.PAGE_CONCEPTS, lang)
