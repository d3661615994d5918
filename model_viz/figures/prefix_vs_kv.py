"""Figures and text of the "Prefix cache is not a KV cache" page: :func:`strip_figure`,
:func:`staircase_figure`.

What they draw comes from :mod:`model_viz.scenarios.prefix_vs_kv` (the run and its checks); the page
(``app_pages/prefix_vs_kv.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
import plotly.graph_objects as go
from ..scenarios import common as cs
from ..i18n import t
from ..scenarios.prefix_vs_kv import PrefixVsKV


PAGE_CONCEPTS = ("state.mla_kv", "state.kda_recurrent", "sglang.radix.kda_aware", "sglang.radix.match_backoff",
                 "kda.chunk_checkpoints", "sglang.cow_snapshot_donate")

# i18n keys, written out whole so a test can see which strings are used
CHECKPOINT_OP = {"checkpoint_create": "prefix_vs_kv.op.checkpoint_create", "snapshot": "prefix_vs_kv.op.snapshot",
                 "donate": "prefix_vs_kv.op.donate"}
KV_COLOR, STATE_COLOR, RECOMPUTE_COLOR, IDLE_COLOR, CKPT_COLOR = "#1f77b4", "#2ca02c", "#ff7f0e", "#e5e5e5", "#145a32"


# ---- figures -------------------------------------------------------------------------------------
def _bar(y: str, start: float, length: float, color: str, name: str, hover: str, pattern: str = "") -> go.Bar:
    return go.Bar(y=[y], x=[length], base=[start], orientation="h", marker=dict(color=color, pattern_shape=pattern),
                  name=name, hovertemplate=hover + "<extra></extra>", width=0.55, showlegend=bool(name))


def strip_figure(r: PrefixVsKV, L: int) -> go.Figure:
    """The cached sequence as two rows — MLA KV and KDA state — for a request sharing ``L`` tokens."""
    T, c = r.T, r.deepest(L)
    kv, st = t("prefix_vs_kv.row.kv"), t("prefix_vs_kv.row.state")
    fig = go.Figure()
    fig.add_trace(_bar(kv, 0, L, KV_COLOR, t("prefix_vs_kv.leg.kv_reuse"), t("prefix_vs_kv.hover.kv", L1=L - 1)))
    fig.add_trace(_bar(kv, L, T - L, IDLE_COLOR, t("prefix_vs_kv.leg.unused"), t("prefix_vs_kv.hover.unused", L=L, T=T)))
    fig.add_trace(_bar(st, 0, c, STATE_COLOR, t("prefix_vs_kv.leg.restore"), t("prefix_vs_kv.hover.restore", c=c)))
    fig.add_trace(_bar(st, c, L - c, RECOMPUTE_COLOR, t("prefix_vs_kv.leg.recompute"),
                       t("prefix_vs_kv.hover.recompute", c=c, L=L, n=L - c), pattern="/"))
    fig.add_trace(_bar(st, L, T - L, IDLE_COLOR, "", t("prefix_vs_kv.hover.unused", L=L, T=T)))
    xs = r.checkpoints
    fig.add_trace(go.Scatter(
        x=xs, y=[st] * len(xs), mode="markers", name=t("prefix_vs_kv.leg.checkpoint"),
        marker=dict(symbol="diamond", size=[18 if x == c else 11 for x in xs],
                    color=[CKPT_COLOR if x <= L else "#9e9e9e" for x in xs], line=dict(color="white", width=1)),
        text=[t(CHECKPOINT_OP[r.checkpoint_ops.get(x, "checkpoint_create")]) for x in xs],
        hovertemplate=cs.hover("prefix_vs_kv.hover.checkpoint")))
    fig.add_vline(x=L, line=dict(color="#333", dash="dash", width=1.5))
    fig.update_layout(
        title=dict(text=t("prefix_vs_kv.strip.title", L=L, c=c, n=L - c)), barmode="overlay", height=330,
        margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.38, x=0),
        xaxis=dict(range=[-0.5, T + 0.5], title=t("prefix_vs_kv.axis.position"), fixedrange=True),
        yaxis=dict(categoryorder="array", categoryarray=[st, kv], fixedrange=True))
    return fig


def staircase_figure(r: PrefixVsKV, L: int) -> go.Figure:
    """Reusable prefix vs shared length: the KV diagonal and the state's staircase."""
    T = r.T
    xs = list(range(1, T + 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=r.kv_len, mode="lines", name=t("prefix_vs_kv.stair.kv"),
                             line=dict(color=KV_COLOR, width=2)))
    fig.add_trace(go.Scatter(x=xs, y=r.state_len, mode="lines", name=t("prefix_vs_kv.stair.state"),
                             line=dict(color=STATE_COLOR, width=2, shape="hv"), fill="tonexty",
                             fillcolor="rgba(255,127,14,0.18)"))
    vs = r.verified
    fig.add_trace(go.Scatter(
        x=[v.L for v in vs], y=[v.reused for v in vs], mode="markers", name=t("prefix_vs_kv.stair.verified"),
        marker=dict(symbol="circle-open", size=12, color="#6a1b9a", line=dict(width=2)),
        hovertemplate=cs.hover("prefix_vs_kv.hover.verified"),
        customdata=[[v.L - v.reused, f"{v.max_diff:.1e}"] for v in vs]))
    c = r.deepest(L)
    fig.add_trace(go.Scatter(x=[L, L], y=[L, c], mode="markers+lines", name=t("prefix_vs_kv.stair.current"),
                             line=dict(color="#333", dash="dot"),
                             marker=dict(size=10, color=[KV_COLOR, STATE_COLOR], line=dict(color="#333", width=1))))
    fig.update_layout(
        title=dict(text=t("prefix_vs_kv.stair.title", L=L, c=c)), height=340, margin=dict(l=10, r=10, t=60, b=40),
        legend=dict(orientation="h", y=-0.2, x=0),
        xaxis=dict(range=[0, T + 1], title=t("prefix_vs_kv.axis.shared"), fixedrange=True),
        yaxis=dict(range=[0, T + 2], title=t("prefix_vs_kv.axis.reusable"), fixedrange=True))
    return fig
