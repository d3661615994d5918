"""Figures and text of the "sequential but segmentable" page: :func:`fmt_diff`,
:func:`timeline_figure`, :func:`boundary_figure`, :func:`swap_figure`.

What they draw comes from :mod:`model_viz.scenarios.kda_segments` (the run and its checks); the page
(``app_pages/kda_segments.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from ..i18n import t as tr
from ..scenarios.kda_segments import CHUNK, SegmentResult


PAGE_CONCEPTS = ("kda.chunk_form", "engine.chunked_prefill", "kda.recurrence", "kda.chunk_checkpoints",
                 "kda.state_evolution")
SEG_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")
STATE_COLORSCALE = "RdBu_r"


def fmt_diff(d: float | None) -> str:
    return "—" if d is None else f"{d:.1e}"


# ---- figures -----------------------------------------------------------------------------------
def timeline_figure(r: SegmentResult, j: int) -> go.Figure:
    """The one-pass state norm after every token; segments as bands; the in-order segment-end states
    (markers on the curve); chunk-start states (diamonds); the current boundary highlighted."""
    T = r.T
    norms = r.one_pass.flatten(1).norm(dim=1).numpy()
    xs = np.arange(1, T + 1)
    fig = go.Figure()
    for n, (s, e) in enumerate(zip(r.bounds, r.bounds[1:])):
        fig.add_vrect(x0=s, x1=e, fillcolor=SEG_COLORS[n % len(SEG_COLORS)], opacity=0.16 if n != j else 0.38,
                      line_width=0, layer="below")
        fig.add_annotation(x=(s + e) / 2, y=1.0, yref="paper", text=tr("kda_segments.fig.segment", n=n + 1),
                           showarrow=False, yanchor="bottom", font=dict(size=12))
    fig.add_trace(go.Scatter(x=xs.tolist(), y=norms.tolist(), mode="lines", name=tr("kda_segments.fig.one_pass"),
                             line=dict(color="#333", width=2),
                             hovertemplate="t=%{x}: ||S||=%{y:.3f}<extra></extra>"))
    ends = r.bounds[1:]
    fig.add_trace(go.Scatter(
        x=ends, y=[float(s.norm()) for s in r.in_order], mode="markers", name=tr("kda_segments.fig.in_order"),
        marker=dict(size=[15 if n == j else 10 for n in range(len(ends))], color="white",
                    line=dict(color="#1f77b4", width=3)),
        hovertemplate="after %{x} tokens<extra>segments in order</extra>"))
    cs = [c * CHUNK for c in range(r.chunk_starts.shape[0])]
    fig.add_trace(go.Scatter(
        x=cs, y=[float(h.norm()) for h in r.chunk_starts], mode="markers", name=tr("kda_segments.fig.chunk_starts"),
        marker=dict(symbol="diamond", size=9, color="#9467bd"),
        hovertemplate="chunk start %{x}<extra>free checkpoint</extra>"))
    if r.swapped_final is not None:
        fig.add_trace(go.Scatter(
            x=[T], y=[float(r.swapped_final.norm())], mode="markers", name=tr("kda_segments.fig.swapped"),
            marker=dict(symbol="x", size=14, color="#d62728", line=dict(width=1)),
            hovertemplate="swapped order, final state<extra></extra>"))
    fig.add_vline(x=r.bounds[j + 1], line=dict(color="rgba(0,0,0,0.55)", width=1.5, dash="dot"))
    y_max = max(float(norms.max()), float(r.swapped_final.norm()) if r.swapped_final is not None else 0.0)
    fig.update_xaxes(range=[0, T + 1], title_text=tr("kda_segments.fig.x"))
    fig.update_yaxes(range=[0, y_max * 1.12], title_text=tr("kda_segments.fig.y"))
    fig.update_layout(
        title=dict(text=tr("kda_segments.fig.timeline.title", j=j + 1, pos=r.bounds[j + 1]), x=0.0, y=0.97,
                   yref="container", font=dict(size=15)),
        height=380, margin=dict(l=60, r=20, t=100, b=45), uirevision="seg-timeline",
        legend=dict(orientation="h", yanchor="bottom", y=1.08, xanchor="left", x=0.0),
    )
    return fig


def _three_heatmaps(titles: list[str], panels, m: float) -> go.Figure:
    """Three state heatmaps side by side on one symmetric colour scale ``[-m, m]`` (the last one a
    difference), square cells, shared k axis."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.05)
    for c, z in enumerate(panels, start=1):
        fig.add_trace(go.Heatmap(z=z.tolist(), zmin=-m, zmax=m, zmid=0.0, colorscale=STATE_COLORSCALE,
                                 showscale=c == 3, colorbar=dict(thickness=12, tickformat=".2f"),
                                 hovertemplate="k=%{y} v=%{x}<br>%{z:.2e}<extra></extra>"), row=1, col=c)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{'' if c == 1 else c}", constrain="domain",
                         showticklabels=c == 1, row=1, col=c)
        fig.update_xaxes(constrain="domain", row=1, col=c)
    return fig


def boundary_figure(r: SegmentResult, j: int, head: int = 0) -> go.Figure:
    """Head ``head`` of the state after segment ``j``: in order (chunk kernel), one pass (recurrent),
    and their difference — all on one colour scale, fixed for the sequence."""
    pos = r.bounds[j + 1]
    a = r.in_order[j][head].numpy()
    b = r.one_pass_at(pos)[head].numpy()
    m = float(r.one_pass[:, head].abs().max()) or 1e-6
    titles = [tr("kda_segments.fig.panel.in_order", j=j + 1), tr("kda_segments.fig.panel.one_pass", pos=pos),
              tr("kda_segments.fig.panel.diff", d=fmt_diff(float(np.abs(a - b).max())))]
    fig = _three_heatmaps(titles, (a, b, a - b), m)
    fig.update_layout(title=dict(text=tr("kda_segments.fig.boundary.title", head=head, pos=pos), x=0.0,
                                 font=dict(size=15)),
                      height=360, margin=dict(l=40, r=20, t=90, b=30), uirevision="seg-boundary")
    return fig


def swap_figure(r: SegmentResult, head: int = 0) -> go.Figure:
    """Head ``head`` of the final state: one pass, segments with two swapped, and their difference."""
    if r.swapped_final is None:
        raise ValueError("swap_figure: needs at least two segments")
    a = r.one_pass[-1][head].numpy()
    b = r.swapped_final[head].numpy()
    m = float(r.one_pass[:, head].abs().max()) or 1e-6
    titles = [tr("kda_segments.fig.panel.final", T=r.T), tr("kda_segments.fig.panel.swapped", a=r.swap + 1, b=r.swap + 2),
              tr("kda_segments.fig.panel.diff", d=fmt_diff(float(np.abs(a - b).max())))]
    fig = _three_heatmaps(titles, (a, b, b - a), m)
    fig.update_layout(title=dict(text=tr("kda_segments.fig.swap.title", head=head), x=0.0, font=dict(size=15)),
                      height=360, margin=dict(l=40, r=20, t=90, b=30), uirevision="seg-swap")
    return fig
