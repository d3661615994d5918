"""Figures of the Live page on a vLLM / SGLang server (:mod:`model_viz.scenarios.watch`): its prefix forest on
one token axis -- KV blocks as grey segments, state blocks (a ``mamba`` group: the KDA checkpoints) as
orange marks at the position they were saved -- its KV usage and prefix hit rate over time, its queues,
and its speculative acceptance per draft position."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..i18n import t as tr
from ..scenarios.watch import STATE_KINDS

PAGE_CONCEPTS = ("kv_events.blocks", "vllm.state_block", "sglang.radix.kda_aware", "server.openai_api")
KV_COLOR, STATE_COLOR = "#8c8c8c", "#ff7f0e"


def _is_state(kind) -> bool:
    return kind in STATE_KINDS


def forest_figure(view: dict, labels: dict) -> go.Figure:
    """Every drawn block of every group (module docstring); ``labels[hash]`` is a block's text for its hover."""
    fig, pos = go.Figure(), view["layout"]
    for gi, g in sorted(view["groups"].items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        placed = [(h, pos[h]) for h in g["blocks"] if h in pos]
        name = f"{tr('live.watch.group')} {gi}: {g['kind'] or '?'} ({len(g['blocks'])})"
        text = [labels.get(h, "")[:80] for h, _ in placed]
        if _is_state(g["kind"]):
            fig.add_trace(go.Scatter(x=[p[1] for _, p in placed], y=[p[2] for _, p in placed], mode="markers",
                                     marker={"symbol": "diamond", "size": 11, "color": STATE_COLOR}, name=name,
                                     text=text, hovertemplate="%{text}<br>state after %{x} tokens<extra></extra>"))
            continue
        xs, ys = [], []
        for _, (start, end, row) in placed:
            xs += [start, end, None]
            ys += [row, row, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": KV_COLOR, "width": 6}, name=name,
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=[(p[0] + p[1]) / 2 for _, p in placed], y=[p[2] for _, p in placed],
                                 mode="markers", marker={"size": 4, "color": KV_COLOR}, showlegend=False, text=text,
                                 hovertemplate="%{text}<extra></extra>"))
    n_rows = max(len(view["rows"]), 1)
    fig.update_layout(height=min(140 + 22 * n_rows, 700), margin={"l": 40, "r": 10, "t": 40, "b": 40},
                      xaxis_title=tr("live.watch.tokens"), yaxis={"visible": False, "autorange": "reversed"},
                      legend={"orientation": "h", "y": 1.12})
    return fig


def series_figure(series: dict) -> go.Figure:
    """KV usage and prefix hit rate (percent) above, running and waiting requests below, over time."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12)
    t0 = series["t"][0] if series["t"] else 0.0
    x = [round(t - t0, 1) for t in series["t"]]
    for key, label, row in (("kv_usage", "live.watch.kv_usage", 1), ("hit_rate", "live.watch.hit_rate", 1),
                            ("running", "live.queue.running", 2), ("waiting", "live.queue.waiting", 2)):
        ys = [None if v is None else (100 * v if row == 1 else v) for v in series[key]]
        fig.add_trace(go.Scatter(x=x, y=ys, name=tr(label), mode="lines", line={"shape": "hv"}), row=row, col=1)
    fig.update_yaxes(title_text="%", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=tr("live.queue.requests"), rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=tr("live.watch.seconds"), row=2, col=1)
    fig.update_layout(height=380, margin={"l": 40, "r": 10, "t": 30, "b": 40}, legend={"orientation": "h", "y": 1.1})
    return fig


def accepted_figure(per_pos: list) -> go.Figure:
    """Drafts accepted at each position (0: the first draft after the verified token)."""
    fig = go.Figure(go.Bar(x=list(range(len(per_pos))), y=per_pos, marker={"color": STATE_COLOR}))
    fig.update_layout(height=240, margin={"l": 40, "r": 10, "t": 30, "b": 40},
                      xaxis_title=tr("live.watch.position"), yaxis_title=tr("live.watch.accepted"))
    return fig


def group_rows(view: dict) -> list[dict]:
    """One row per group: its index, kind, block count and block size."""
    return [{tr("live.watch.group"): gi, tr("live.watch.kind"): g["kind"] or "?",
             tr("live.watch.blocks"): len(g["blocks"]), tr("live.watch.block_size"): g["block_size"]}
            for gi, g in sorted(view["groups"].items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
