"""Page: checkpoint placement — the KDA-aware radix tree growing request by request, under three policies.

Widgets and layout only; the scenario, the trace reading, the layout and the figures come from
``model_viz.figures.checkpoint_tree / model_viz.scenarios.checkpoint_tree``.
"""

import streamlit as st

from model_viz.scenarios import common as cs
from model_viz.figures import checkpoint_tree as ct_fig
from model_viz.scenarios import checkpoint_tree as ct
from model_viz.ui import page_parts
from model_viz.scenarios import engine_trace as et
from model_viz.ui import step_control as sc
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "checkpoint_tree_step"


_canned = st.cache_data(show_spinner=False, max_entries=8)(ct.record)


@st.cache_data(show_spinner=False, max_entries=8)
def _parse(data: bytes | str):
    """Parse and lay out once per trace: ``(header, steps, layout)``."""
    header, steps = ct.parse(data)
    return header, steps, ct_fig.layout(steps)


st.title(t("checkpoint_tree.title"))
st.markdown(t("checkpoint_tree.intro", S=ct.SYSTEM_LEN, slots=ct.STATE_SLOTS_BUDGET, kv=ct.KV_TOKENS_BUDGET, C=cs.CHUNK))
policy = sc.lang_keyed_choice(st.radio, "checkpoint_tree_policy", t("checkpoint_tree.policy_label"), ct.POLICIES, ct.POLICIES[0], horizontal=True, format_func=lambda p: t(ct_fig.POLICY_LABEL[p], I=ct.INTERVAL))

upload = st.file_uploader(t("checkpoint_tree.upload_label"), type=["jsonl", "json", "txt"], key="checkpoint_tree_upload")
header = steps = None
if upload is not None:
    try:
        header, steps, lay = _parse(upload.getvalue())
        page_parts.trace_source(upload.name, header, header.get("num_events", sum(len(s.events) for s in steps)))
    except et.TraceError as err:
        st.error(err.message())
if steps is None:
    with st.spinner():
        header, steps, lay = _parse(_canned(policy))
    st.caption(t("checkpoint_tree.source_canned", policy=policy, events=sum(len(s.events) for s in steps)))
recorded = ct.trace_policy(header)  # an uploaded trace is described by its own policy, not the radio's
if recorded is not None:
    st.caption(t(ct_fig.POLICY_HELP[recorded], C=cs.CHUNK, I=ct.INTERVAL, T=ct.TRACK_INTERVAL))

n = len(steps)
i = step_control(KEY, last=n - 1, label=t("checkpoint_tree.step_label"), interval=2.0)
s = steps[i]
desc = t(ct_fig.REQUEST_TEXT[s.label]) if s.label in ct_fig.REQUEST_TEXT else ""  # an uploaded trace: any label
st.markdown(t("checkpoint_tree.current", r=s.label, i=i + 1, n=n, plen=len(s.prompt), reused=s.reused,
              computed=len(s.prompt) - s.reused, desc=desc))
m1, m2, m3, m4 = st.columns(4)
m1.metric(t("checkpoint_tree.metric.states"), s.num_states())
m2.metric(t("checkpoint_tree.metric.kv"), s.kv_tokens())
m3.metric(t("checkpoint_tree.metric.bytes"), f"{ct.held_bytes(header, s) / 1024:,.0f} KiB")
m4.metric(t("checkpoint_tree.metric.reused"), s.reused)

page_parts.chart(ct_fig.tree_figure(steps, i, lay), "checkpoint_tree_tree")
c_bar, c_ev = st.columns([3, 2])
with c_bar:
    page_parts.chart(ct_fig.reuse_figure(steps, i), "checkpoint_tree_reuse")
with c_ev:
    page_parts.event_list(t("checkpoint_tree.events_title"), ct_fig.event_lines(s), t("checkpoint_tree.events_none"))
page_parts.page_end(t("checkpoint_tree.watch"), ct_fig.PAGE_CONCEPTS)
