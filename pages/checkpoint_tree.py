"""Page: checkpoint placement — the KDA-aware radix tree growing request by request, under three policies.

Widgets and layout only; the scenario, the trace reading, the layout and the figures come from
``model_viz.checkpoint_tree``.
"""

import streamlit as st

from model_viz import cache_scenarios as cs
from model_viz import checkpoint_tree as ct
from model_viz import page_parts
from model_viz import engine_trace as et
from model_viz import step_control as sc
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "ct_step"


@st.cache_data(show_spinner=False, max_entries=8)
def _canned(policy: str) -> str:
    return ct.record(policy)


@st.cache_data(show_spinner=False, max_entries=8)
def _parse(data: bytes | str):
    return ct.parse(data)


st.title(t("ckpt.title", lang))
st.markdown(t("ckpt.intro", lang, S=ct.SYSTEM_LEN, slots=ct.STATE_SLOTS_BUDGET, kv=ct.KV_TOKENS_BUDGET, C=cs.CHUNK))
policy = sc.lang_keyed_choice(st.radio, "ct_policy", t("ckpt.policy_label", lang), ct.POLICIES, ct.POLICIES[0], lang,
                              horizontal=True, format_func=lambda p: t(f"ckpt.policy.{p}", lang, I=ct.INTERVAL))
st.caption(t(f"ckpt.policy_help.{policy}", lang, C=cs.CHUNK, I=ct.INTERVAL))

upload = st.file_uploader(t("ckpt.upload_label", lang), type=["jsonl", "json", "txt"], key="ct_upload")
header = steps = None
if upload is not None:
    try:
        header, steps = _parse(upload.getvalue())
        st.caption(t("trace.source_upload", lang, name=upload.name, events=sum(len(s.events) for s in steps)))
    except et.TraceError as err:
        st.error(err.message(lang))
if steps is None:
    with st.spinner():
        header, steps = _parse(_canned(policy))
    st.caption(t("ckpt.source_canned", lang, policy=policy, events=sum(len(s.events) for s in steps)))

n = len(steps)
i = step_control(KEY, lang, last=n - 1, label=t("ckpt.step_label", lang), interval=2.0)
s = steps[i]
desc_key = f"ckpt.req.{s.label}"
desc = t(desc_key, lang) if desc_key in ct.KNOWN_LABELS else ""
st.markdown(t("ckpt.current", lang, r=s.label, i=i + 1, n=n, plen=len(s.prompt), reused=s.reused,
              computed=len(s.prompt) - s.reused, desc=desc))
state_bytes = header.get("state_bytes") if isinstance(header.get("state_bytes"), int) else 0
m1, m2, m3, m4 = st.columns(4)
m1.metric(t("ckpt.metric.states", lang), s.num_states())
m2.metric(t("ckpt.metric.kv", lang), s.kv_tokens())
m3.metric(t("ckpt.metric.bytes", lang), f"{s.num_states() * state_bytes / 1024:,.0f} KiB")
m4.metric(t("ckpt.metric.reused", lang), s.reused)

cfg = {"displaylogo": False}
lay = ct.layout(steps)
st.plotly_chart(ct.tree_figure(steps, i, lay, lang=lang), key="ct_tree", width="stretch", config=cfg)
c_bar, c_ev = st.columns([3, 2])
with c_bar:
    st.plotly_chart(ct.reuse_figure(steps, i, lang=lang), key="ct_reuse", width="stretch", config=cfg)
with c_ev:
    page_parts.event_list(t("ckpt.events_title", lang), ct.event_lines(s, lang), t("ckpt.events_none", lang))
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("ckpt.watch", lang))

page_parts.concept_expanders(ct.PAGE_CONCEPTS, lang)
