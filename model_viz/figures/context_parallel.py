"""Figures of the "Context parallelism" page: each rank's slice map, the scan one rank at a time
against the two wrong ways, how far each lands, and the bytes per rank (data:
:mod:`model_viz.scenarios.context_parallel`)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..i18n import t as tr
from ..scenarios.context_parallel import METHODS, CPView

PAGE_CONCEPTS = ("cp.prefix_scan", "kda.recurrence", "kda.chunk_form", "kda.state_evolution")
# i18n keys written whole (tests/test_i18n.py)
METHOD_LABEL = {"scan": "context_parallel.method.scan", "zero": "context_parallel.method.zero",
                "add": "context_parallel.method.add"}
VOLUME_LABEL = {"kda_maps": "context_parallel.volume.kda_maps", "conv_tails": "context_parallel.volume.conv_tails",
                "mla_rows": "context_parallel.volume.mla_rows",
                "kda_inputs_instead": "context_parallel.volume.kda_inputs_instead"}
COLORS = {"scan": "#2ca02c", "zero": "#d62728", "add": "#ff7f0e"}


def clamp_rank(i: int | None, view: CPView) -> int:
    return 0 if i is None else max(0, min(int(i), view.ranks - 1))


def _heat(z, show_scale: bool = False, zmid: float = 0.0) -> go.Heatmap:
    return go.Heatmap(z=z.tolist(), colorscale="RdBu", zmid=zmid, showscale=show_scale)


def maps_figure(view: CPView) -> go.Figure:
    """Every rank's map of its slice for one head: ``A`` (``K x K``) above, ``B`` (``K x V``) below."""
    R = view.ranks
    titles = [tr("context_parallel.fig.map_a", r=r, lo=lo, hi=hi) for r, (lo, hi) in enumerate(view.bounds)]
    titles += [tr("context_parallel.fig.map_b", r=r) for r in range(R)]
    fig = make_subplots(rows=2, cols=R, subplot_titles=titles, horizontal_spacing=0.04, vertical_spacing=0.12)
    for r in range(R):
        fig.add_trace(_heat(view.A[r]), row=1, col=r + 1)
        fig.add_trace(_heat(view.B[r]), row=2, col=r + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=60, b=10),
                      title=tr("context_parallel.fig.maps_title", layer=view.layer))
    return fig


def incoming_figure(view: CPView, i: int) -> go.Figure:
    """Rank ``i``'s incoming state (one head) by the scan and by the two wrong ways, each with its
    distance to the recurrence's state after the prefix."""
    r = clamp_rank(i, view)
    titles = [tr("context_parallel.fig.incoming", method=tr(METHOD_LABEL[m]),
                 err=view.state_error[m][r]) for m in METHODS]
    fig = make_subplots(rows=1, cols=len(METHODS), subplot_titles=titles, horizontal_spacing=0.04)
    for c, m in enumerate(METHODS):
        fig.add_trace(_heat(view.incoming[m][r], show_scale=(c == len(METHODS) - 1)), row=1, col=c + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    lo = view.bounds[r][0]
    fig.update_layout(height=330, margin=dict(l=10, r=10, t=70, b=10),
                      title=tr("context_parallel.fig.incoming_title", r=r, lo=lo))
    return fig


def logits_figure(view: CPView) -> go.Figure:
    """max |logit - single process| of the whole model when every KDA layer uses each method."""
    fig = go.Figure(go.Bar(x=[tr(METHOD_LABEL[m]) for m in METHODS],
                           y=[max(view.logits_diff[m], 1e-9) for m in METHODS],
                           marker_color=[COLORS[m] for m in METHODS],
                           text=[f"{view.logits_diff[m]:.1e}" for m in METHODS]))
    fig.update_layout(title=tr("context_parallel.fig.logits_title", R=view.ranks), height=320,
                      yaxis={"type": "log", "title": "max |Δlogit|"}, margin=dict(l=60, r=20, t=50, b=40))
    return fig


def volume_figure(vol: dict[str, list[dict]]) -> go.Figure:
    """Bytes one of 4 ranks sends per prefill, by prompt length: the KDA maps stay flat."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(tr("context_parallel.fig.volume_tiny"),
                                                        tr("context_parallel.fig.volume_48b")))
    dash = {"kda_inputs_instead": "dot"}
    # one colour per quantity in both panels: the legend (drawn once) names the lines of each
    colors = dict(zip(VOLUME_LABEL, ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")))
    for c, name in enumerate(("tiny", "48b")):
        rows = vol[name]
        for key, label in VOLUME_LABEL.items():
            fig.add_trace(go.Scatter(x=[r["tokens"] for r in rows], y=[r[key] / 2**20 for r in rows],
                                     name=tr(label), mode="lines+markers", legendgroup=key, showlegend=c == 0,
                                     line={"dash": dash.get(key, "solid"), "color": colors[key]}), row=1, col=c + 1)
    fig.update_xaxes(type="log", title_text=tr("context_parallel.fig.volume_x"))
    fig.update_yaxes(type="log", title_text="MiB")
    fig.update_layout(height=360, margin=dict(l=60, r=20, t=50, b=50))
    return fig
