"""Figures of the "SWA vs KDA" page: what each layer's cache needs at a position and whether the
prefix cache can give it (the data comes from :mod:`model_viz.scenarios.swa_vs_kda`)."""

from __future__ import annotations

import plotly.graph_objects as go

from ..i18n import t as tr
from ..scenarios.swa_vs_kda import SwaKdaView

PAGE_CONCEPTS = ("swa.vs_kda", "state.not_an_archive", "sglang.radix.match_backoff", "sglang.checkpoint_policy",
                 "kda.chunk_checkpoints")

# i18n keys of the checkpoint policies' names, written whole for tests/test_i18n.py
POLICY_LABEL = {"sglang": "swa_vs_kda.policy.sglang", "chunk": "swa_vs_kda.policy.chunk",
                "branch": "swa_vs_kda.policy.branch"}

OK, BAD, REDO, ROWS, LATER = "#2ca02c", "#d62728", "#ff7f0e", "#c6dbef", "#9e9e9e"
_Y = {"swa": 1.0, "kda": 0.0}


def restore_at_each_position(v: SwaKdaView) -> dict[str, list[int | None]]:
    """For every t = 1..prompt_len: the tokens to recompute before resuming at t. SWA: 0 where its
    window is among the cached rows, ``None`` where it is not; KDA: ``t - c(t)`` with ``c(t)`` the
    deepest checkpoint <= t (0 when there is none). The page checks ``c(t)`` against the engine's own
    match at the position the reader picked."""
    ts = list(range(1, v.prompt_len + 1))
    swa = [0 if t <= v.cached_len else None for t in ts]
    kda = [t - max((p for p in v.checkpoints if p <= t), default=0) for t in ts]
    return {"t": ts, "swa": swa, "kda": kda}


def timeline_figure(v: SwaKdaView) -> go.Figure:
    """Two lanes over A's positions. SWA: the cached rows and the window ``[t - W, t)`` it needs.
    KDA: the checkpoints, the one the engine restores (``c``), the tokens it recomputes ``[c, t)``
    and the later checkpoints it cannot use."""
    fig = go.Figure()
    x_max = max(v.prompt_len, v.cached_len, *v.checkpoints, 1) + 2
    ys, h = _Y["swa"], 0.18
    fig.add_shape(type="rect", x0=0, x1=v.cached_len, y0=ys - h, y1=ys + h, fillcolor=ROWS, line_width=0)
    lo, hi = v.window_rows
    fig.add_shape(type="rect", x0=lo, x1=hi, y0=ys - h, y1=ys + h, fillcolor=OK if v.swa_ok else BAD, opacity=0.75,
                  line_width=0)
    fig.add_trace(go.Scatter(x=[(lo + hi) / 2], y=[ys + h + 0.1], mode="text", showlegend=False, hoverinfo="skip",
                             text=[tr("swa_vs_kda.fig.window", lo=lo, hi=hi)]))
    fig.add_trace(go.Scatter(x=[v.cached_len / 2], y=[ys - h - 0.1], mode="text", showlegend=False, hoverinfo="skip",
                             text=[tr("swa_vs_kda.fig.rows", n=v.cached_len)]))
    yk = _Y["kda"]
    if v.restore_at < v.t:
        fig.add_shape(type="rect", x0=v.restore_at, x1=v.t, y0=yk - h, y1=yk + h, fillcolor=REDO, opacity=0.6,
                      line_width=0)
        fig.add_trace(go.Scatter(x=[(v.restore_at + v.t) / 2], y=[yk - h - 0.1], mode="text", showlegend=False,
                                 hoverinfo="skip", text=[tr("swa_vs_kda.fig.recompute", n=v.recompute)]))
    used = [p for p in v.checkpoints if p <= v.t]
    groups = (("swa_vs_kda.fig.ckpt_used", [v.restore_at] if v.restore_at in v.checkpoints else [], OK),
              ("swa_vs_kda.fig.ckpt_earlier", [p for p in used if p != v.restore_at], "#1f77b4"),
              ("swa_vs_kda.fig.ckpt_later", v.later, LATER))
    for key, xs, color in groups:
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=[yk] * len(xs), mode="markers", name=tr(key),
                                     marker={"symbol": "diamond", "size": 14, "color": color,
                                             "line": {"width": 1, "color": "#333"}},
                                     hovertemplate=tr("swa_vs_kda.fig.ckpt_hover") + "<extra></extra>"))
    fig.add_vline(x=v.t, line={"dash": "dot", "color": "#333"})
    fig.add_annotation(x=v.t, y=1.45, text=f"t = {v.t}", showarrow=False)
    fig.update_yaxes(tickvals=[_Y["kda"], _Y["swa"]], range=[-0.6, 1.6],
                     ticktext=[tr("swa_vs_kda.fig.kda_lane"), tr("swa_vs_kda.fig.swa_lane")])
    fig.update_xaxes(range=[-1, x_max], title_text=tr("swa_vs_kda.fig.position"))
    fig.update_layout(title=tr("swa_vs_kda.fig.timeline_title", t=v.t, W=v.window), height=330,
                      margin=dict(l=130, r=20, t=60, b=45), legend=dict(orientation="h", y=-0.35, x=0.0))
    return fig


def recompute_figure(v: SwaKdaView) -> go.Figure:
    """Tokens recomputed to resume at every position: KDA's sawtooth (zero only at checkpoints)
    against SWA's zero wherever the rows are cached."""
    d = restore_at_each_position(v)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d["t"], y=d["kda"], mode="lines", line={"shape": "hv", "color": REDO},
                             name=tr("swa_vs_kda.fig.kda_lane")))
    fig.add_trace(go.Scatter(x=d["t"], y=d["swa"], mode="lines", line={"color": OK, "width": 3},
                             name=tr("swa_vs_kda.fig.swa_lane")))
    fig.add_vline(x=v.t, line={"dash": "dot", "color": "#333"})
    fig.update_layout(title=tr("swa_vs_kda.fig.sweep_title"), height=300, margin=dict(l=60, r=20, t=50, b=45),
                      xaxis_title=tr("swa_vs_kda.fig.position"), yaxis_title=tr("swa_vs_kda.fig.sweep_y"),
                      legend=dict(orientation="h", y=1.12, x=0.0))
    return fig


def verdicts(v: SwaKdaView) -> dict[str, str]:
    """One sentence per layer kind: what the cache can give at t, with the engine's numbers."""
    if v.swa_ok:
        swa = tr("swa_vs_kda.swa_ok", lo=v.window_rows[0], last=v.t - 1, t=v.t, diff=f"{v.swa_row_diff:.1e}")
    else:
        swa = tr("swa_vs_kda.swa_missing", t=v.t, held=v.cached_len)
    if v.kda_exact:
        kda = tr("swa_vs_kda.kda_exact", t=v.t)
    elif v.restore_at == 0:
        kda = tr("swa_vs_kda.kda_none", t=v.t)
    elif v.t > v.cached_len:
        kda = tr("swa_vs_kda.kda_backoff_nokv", t=v.t, kv=v.cached_len, c=v.restore_at, n=v.recompute)
    else:
        kda = tr("swa_vs_kda.kda_backoff", t=v.t, c=v.restore_at, n=v.recompute)
    if v.later_diff is not None:
        kda += " " + tr("swa_vs_kda.kda_later", p=v.later[0], t=v.t, diff=f"{v.later_diff:.2f}")
    return {"swa": swa, "kda": kda}
