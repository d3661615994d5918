"""Page: vLLM state blocks — hash units, the hybrid hit's fixed point, null blocks vs the one real
state block, partial hits with copy-on-write, retention masks, mode all vs align.

Widgets and layout only; the scenario, the checks and the figures come from ``model_viz.figures.state_blocks / model_viz.scenarios.state_blocks``.
"""

import streamlit as st

from model_viz.ui import step_control as sc

from model_viz.ui import page_parts
from model_viz.figures import state_blocks as sb_fig
from model_viz.scenarios import state_blocks as sb
from model_viz.i18n import t
from model_viz.ui.step_control import step_control

KEY = "state_blocks_step"


def _choice(widget, name: str, label: str, options, default, **kw):
    return sc.lang_keyed_choice(widget, name, label, options, default, **kw)


_run = st.cache_data(show_spinner=False, max_entries=12)(sb.run)


st.title(t("state_blocks.title"))
st.markdown(t("state_blocks.intro", B=sb.BLOCK_SIZE, U=sb.HASH_UNIT, S=sb.SYSTEM_LEN, budget=sb.TOKEN_BUDGET))
c_mode, c_ret, c_part = st.columns([2, 3, 2])
mode = c_mode.radio(t("state_blocks.mode_label"), sb.MODES, horizontal=True, key="state_blocks_mode",
                    format_func=lambda m: t(sb_fig.MODE_LABEL[m]))
retention = _choice(c_ret.radio, "state_blocks_retention", t("state_blocks.retention_label"), sb.RETENTIONS, "dense",
                    horizontal=True, format_func=lambda r: t(sb_fig.RETENTION_LABEL[r], N=sb.INTERVAL))
partial = c_part.toggle(t("state_blocks.partial_label"), value=True, key="state_blocks_partial")
st.caption(" ".join([t(sb_fig.MODE_HELP[mode], budget=sb.TOKEN_BUDGET),
                     t(sb_fig.RETENTION_HELP[retention], N=sb.INTERVAL),
                     t("state_blocks.partial_help.on" if partial else "state_blocks.partial_help.off", U=sb.HASH_UNIT)]))

with st.spinner(t("state_blocks.running")):
    run = _run(mode, retention, partial)
steps = run.steps
st.success(t("state_blocks.verified", n=len(steps), diff=f"{max(s.max_diff for s in steps):.1e}"))

n = len(steps)
i = step_control(KEY, last=n - 1, label=t("state_blocks.step_label"), interval=2.0)
s = steps[i]
st.markdown(t("state_blocks.current", r=s.label, i=i + 1, n=n, plen=len(s.prompt), hit=s.hit,
              computed=len(s.prompt) - s.hit, desc=t(sb_fig.REQUEST_TEXT[s.label]) if s.label in sb_fig.REQUEST_TEXT else ""))
m1, m2, m3, m4 = st.columns(4)
m1.metric(t("state_blocks.metric.kv"), s.junction)
m2.metric(t("state_blocks.metric.hit"), s.hit)
m3.metric(t("state_blocks.metric.states"), s.cached_states)
m4.metric(t("state_blocks.metric.bytes"), f"{s.cached_states * run.state_bytes / 1024:,.0f} KiB")
if s.partial:
    st.info(t("state_blocks.partial_callout", r=s.label, pos=s.hit, block=s.hit // sb.BLOCK_SIZE, src=s.hit_slot,
              dst=s.active_slot))

page_parts.chart(sb_fig.hit_figure(run, i), "state_blocks_hit")
page_parts.chart(sb_fig.table_figure(run, i), "state_blocks_table")
page_parts.chart(sb_fig.retention_figure(run, i), "state_blocks_retention_fig")
c_bar, c_ev = st.columns([3, 2])
with c_bar:
    page_parts.chart(sb_fig.reuse_figure(run, i), "state_blocks_reuse")
with c_ev:
    page_parts.event_list(t("state_blocks.events_title"), sb_fig.event_lines(s), t("state_blocks.events_none"))
page_parts.page_end(t("state_blocks.watch", B=sb.BLOCK_SIZE, U=sb.HASH_UNIT, N=sb.INTERVAL), sb_fig.PAGE_CONCEPTS)
