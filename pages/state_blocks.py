"""Page: vLLM state blocks — hash units, the hybrid hit's fixed point, null blocks vs the one real
state block, partial hits with copy-on-write, retention masks, mode all vs align.

Widgets and layout only; the scenario, the checks and the figures come from ``model_viz.state_blocks``.
"""

import streamlit as st

from model_viz import step_control as sc

from model_viz import page_parts
from model_viz import state_blocks as sb
from model_viz.i18n import t
from model_viz.step_control import step_control

lang = st.session_state.get("lang", "en")
KEY = "sb_step"


def _choice(widget, name: str, label: str, options, default, **kw):
    return sc.lang_keyed_choice(widget, name, label, options, default, lang, **kw)


@st.cache_data(show_spinner=False, max_entries=12)
def _run(mode: str, retention: str, partial: bool):
    return sb.run(mode, retention, partial)


st.title(t("sb.title", lang))
st.markdown(t("sb.intro", lang, B=sb.BLOCK_SIZE, U=sb.HASH_UNIT, S=sb.SYSTEM_LEN, budget=sb.TOKEN_BUDGET))
c_mode, c_ret, c_part = st.columns([2, 3, 2])
mode = c_mode.radio(t("sb.mode_label", lang), sb.MODES, horizontal=True, key="sb_mode",
                    format_func=lambda m: t(f"sb.mode.{m}", lang))
retention = _choice(c_ret.radio, "sb_retention", t("sb.retention_label", lang), sb.RETENTIONS, "dense",
                    horizontal=True, format_func=lambda r: t(f"sb.ret.{r}", lang, N=sb.INTERVAL))
partial = c_part.toggle(t("sb.partial_label", lang), value=True, key="sb_partial")
st.caption(" ".join([t(f"sb.mode_help.{mode}", lang, budget=sb.TOKEN_BUDGET),
                     t(f"sb.ret_help.{retention}", lang, N=sb.INTERVAL),
                     t("sb.partial_help.on" if partial else "sb.partial_help.off", lang, U=sb.HASH_UNIT)]))

with st.spinner(t("sb.running", lang)):
    run = _run(mode, retention, partial)
steps = run.steps
st.success(t("sb.verified", lang, n=len(steps), diff=f"{max(s.max_diff for s in steps):.1e}"))

n = len(steps)
i = step_control(KEY, lang, last=n - 1, label=t("sb.step_label", lang), interval=2.0)
s = steps[i]
desc_key = f"sb.req.{s.label}"
st.markdown(t("sb.current", lang, r=s.label, i=i + 1, n=n, plen=len(s.prompt), hit=s.hit,
              computed=len(s.prompt) - s.hit, desc=t(desc_key, lang) if desc_key in sb.KNOWN_LABELS else ""))
m1, m2, m3, m4 = st.columns(4)
m1.metric(t("sb.metric.kv", lang), s.junction)
m2.metric(t("sb.metric.hit", lang), s.hit)
m3.metric(t("sb.metric.states", lang), s.cached_states)
m4.metric(t("sb.metric.bytes", lang), f"{s.cached_states * run.state_bytes / 1024:,.0f} KiB")
if s.partial:
    st.info(t("sb.partial_callout", lang, r=s.label, pos=s.hit, block=s.hit // sb.BLOCK_SIZE, src=s.hit_slot,
              dst=s.active_slot))

cfg = {"displaylogo": False}
st.plotly_chart(sb.hit_figure(run, i, lang=lang), key="sb_hit", width="stretch", config=cfg)
st.plotly_chart(sb.table_figure(run, i, lang=lang), key="sb_table", width="stretch", config=cfg)
st.plotly_chart(sb.retention_figure(run, i, lang=lang), key="sb_retention_fig", width="stretch", config=cfg)
c_bar, c_ev = st.columns([3, 2])
with c_bar:
    st.plotly_chart(sb.reuse_figure(run, i, lang=lang), key="sb_reuse", width="stretch", config=cfg)
with c_ev:
    page_parts.event_list(t("sb.events_title", lang), sb.event_lines(s, lang), t("sb.events_none", lang))
with st.expander(t("common.watch_title", lang), expanded=True):
    st.markdown(t("sb.watch", lang, B=sb.BLOCK_SIZE, U=sb.HASH_UNIT, N=sb.INTERVAL))

page_parts.concept_expanders(sb.PAGE_CONCEPTS, lang)
