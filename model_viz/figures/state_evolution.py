"""Figures of the "KDA state evolution" page: per-head state heatmaps, state norms, gates, write
sizes, the recall probe, and the token strip (the data comes from :mod:`model_viz.scenarios.state_evolution`)."""

from __future__ import annotations
import math
import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots
from kda_ref.state_trace import KDAStateTrace, RecoveryCurve
from kda_ref.tokenizer import ByteTokenizer
import html

from ..i18n import t as tr



MAX_HEATMAP_SIZE = 64
HEAD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
STATE_COLORSCALE = "RdBu_r"  # diverging, white at 0 (zmid)
_TOKENIZER = ByteTokenizer()


# ---- data helpers ------------------------------------------------------------------------------
def token_labels(tokens: list[int]) -> list[str]:
    """A short printable label per token id; a space is shown as an open box."""
    return ["␣" if i == 32 else _TOKENIZER.token_str(int(i)) for i in tokens]


def _check(trace: KDAStateTrace, layer: int, t: int | None = None) -> int:
    if layer not in trace.states:
        raise KeyError(f"layer: {layer} is not a KDA layer of this trace (KDA layers: {trace.layers})")
    T = trace.states[layer].shape[0]
    if t is not None and not 0 <= t < T:
        raise IndexError(f"t: token index {t} is outside 0..{T - 1}")
    return T


def downsample(x: torch.Tensor, max_size: int = MAX_HEATMAP_SIZE) -> torch.Tensor:
    """Block-average the last two dims ``[..., K, V]`` to at most ``max_size`` each (no-op if smaller).

    Uses adaptive average pooling, so when ``K`` is a multiple of ``max_size`` every output cell is
    the mean of a ``K/max_size x V/max_size`` block.
    """
    K, V = x.shape[-2:]
    k2, v2 = min(K, max_size), min(V, max_size)
    if (k2, v2) == (K, V):
        return x.float()
    lead = x.shape[:-2]
    y = F.adaptive_avg_pool2d(x.reshape(-1, 1, K, V).float(), (k2, v2))  # [N, 1, k2, v2]
    return y.reshape(*lead, k2, v2)


def _frames(trace: KDAStateTrace, layer: int, delta: bool) -> torch.Tensor:
    """``[T, H, K, V]``: the states, or their step-to-step change (``S_0 - 0`` at t = 0)."""
    S = trace.states[layer].float()
    if not delta:
        return S
    prev = torch.cat([torch.zeros_like(S[:1]), S[:-1]], dim=0)
    return S - prev


def heatmap_data(trace: KDAStateTrace, layer: int, t: int, *, delta: bool = False,
                 max_size: int = MAX_HEATMAP_SIZE) -> np.ndarray:
    """What the heatmap grid shows at token ``t``: ``[H, K', V']`` (downsampled) as numpy."""
    _check(trace, layer, t)
    S = trace.states[layer].float()
    x = S[t] - (S[t - 1] if t > 0 else 0.0) if delta else S[t]
    return downsample(x, max_size).numpy()


def color_limit(trace: KDAStateTrace, layer: int, *, delta: bool = False,
                max_size: int = MAX_HEATMAP_SIZE) -> float:
    """The largest ``|value|`` the grid shows at any token of the trace: the fixed colour range."""
    _check(trace, layer)
    m = float(downsample(_frames(trace, layer, delta), max_size).abs().max())
    return m if m > 0 else 1e-6


def write_sizes(trace: KDAStateTrace, layer: int) -> torch.Tensor:
    """``[T, H]``: ``||S_t - Diag(alpha_t) S_{t-1}||_F``, the delta-rule write of each token.

    Equals ``beta_t * ||v_t - (Diag(alpha_t) S_{t-1})^T k_t||`` because ``k_t`` is unit-norm: the
    part of ``v_t`` the decayed state did not already predict, scaled by ``beta_t``.
    """
    _check(trace, layer)
    S = trace.states[layer].float()  # [T, H, K, V]
    alpha = trace.gates[layer].float().exp()  # [T, H, K]
    prev = torch.cat([torch.zeros_like(S[:1]), S[:-1]], dim=0)
    return (S - alpha[..., None] * prev).flatten(-2).norm(dim=-1)


def tick_positions(labels: list[str], width_chars: int = 96) -> list[int]:
    """The token positions that get a tick label: left to right, a label only where it does not touch the
    previous one, on an axis ``width_chars`` characters wide (so "<bos>" and a one-letter token beside it
    never collide, and a long sequence is thinned evenly)."""
    T = max(1, len(labels))
    slot = width_chars / T  # characters per token position
    vals, right = [], -1e9
    for i, lab in enumerate(labels):
        half = max(1, len(lab)) / 2
        if i * slot - half >= right + 1:
            vals.append(i)
            right = i * slot + half
    return vals


def log_axis(fig: go.Figure, row: int, lo: float, hi: float, **kw) -> None:
    """A log y axis labelled only at powers of ten (10⁻², 10⁰, ...): no bare minor labels "2, 5"."""
    decades = max(1.0, math.log10(max(hi, 1e-300)) - math.log10(max(lo, 1e-300)))
    fig.update_yaxes(type="log", dtick=max(1, math.ceil(decades / 8)), exponentformat="power", row=row, col=1, **kw)


def _token_axis(fig: go.Figure, labels: list[str], rows: int) -> None:
    T = len(labels)
    vals = tick_positions(labels)
    for r in range(1, rows + 1):
        fig.update_xaxes(tickmode="array", tickvals=vals, ticktext=[labels[i] for i in vals], tickangle=0,
                         tickfont=dict(family="monospace", size=11), range=[-0.5, T - 0.5], row=r, col=1)
    fig.update_xaxes(title_text=tr("state_evolution.fig.token_axis"), row=rows, col=1)


def _current_marker(fig: go.Figure, t: int, series: list[np.ndarray], row: int, show: bool) -> None:
    """A vertical line at token ``t`` and one marker per head on its curve."""
    fig.add_vline(x=t, line=dict(color="rgba(0,0,0,0.45)", width=1.5, dash="dot"), row=row, col=1)
    ys = [float(s[t]) for s in series]
    fig.add_trace(go.Scatter(
        x=[t] * len(ys), y=ys, mode="markers", name=tr("state_evolution.fig.current"), legendgroup="current",
        showlegend=show, marker=dict(size=9, color=[HEAD_COLORS[h % len(HEAD_COLORS)] for h in range(len(ys))],
                                     line=dict(color="black", width=1.5)),
        hoverinfo="skip",
    ), row=row, col=1)


def _head_lines(fig: go.Figure, series: list[np.ndarray], labels: list[str], row: int, show_legend: bool, fmt: str) -> None:
    x = list(range(len(labels)))
    for h, y in enumerate(series):
        fig.add_trace(go.Scatter(
            x=x, y=y.tolist(), mode="lines", name=tr("state_evolution.fig.head", h=h), legendgroup=f"head{h}",
            showlegend=show_legend, line=dict(color=HEAD_COLORS[h % len(HEAD_COLORS)], width=1.8),
            customdata=labels, hovertemplate=f"t=%{{x}} %{{customdata}}<br>%{{y:{fmt}}}<extra>head {h}</extra>",
        ), row=row, col=1)


# ---- figures -----------------------------------------------------------------------------------
def state_heatmap_grid(trace: KDAStateTrace, layer: int, t: int, *, delta: bool = False,
                       max_size: int = MAX_HEATMAP_SIZE, cols: int = 4) -> go.Figure:
    """One heatmap per head of the state after token ``t`` (or its change, ``delta=True``).

    ``zmin = -m``, ``zmax = m`` with ``m = color_limit(trace, layer)`` on every trace and for every
    ``t``: the colour scale is fixed for the whole trace. Rows are key channels (k), columns value
    channels (v), as in ``S [K, V]``; downsampled cells sit at their block centres in original units.
    """
    _check(trace, layer, t)
    z = heatmap_data(trace, layer, t, delta=delta, max_size=max_size)  # [H, K', V']
    H, k2, v2 = z.shape
    K, V = trace.states[layer].shape[-2:]
    m = color_limit(trace, layer, delta=delta, max_size=max_size)
    labels = token_labels(trace.tokens)
    cols = min(cols, H)
    rows = math.ceil(H / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[tr("state_evolution.fig.head", h=h) for h in range(H)],
                        horizontal_spacing=0.035, vertical_spacing=0.12)
    ys = ((np.arange(k2) + 0.5) * K / k2 - 0.5).tolist()  # block centres in original key index
    xs = ((np.arange(v2) + 0.5) * V / v2 - 0.5).tolist()
    for h in range(H):
        r, c = h // cols + 1, h % cols + 1
        fig.add_trace(go.Heatmap(
            z=z[h].tolist(), x=xs, y=ys, zmin=-m, zmax=m, zmid=0.0, colorscale=STATE_COLORSCALE,
            showscale=(h == H - 1), colorbar=dict(thickness=12, len=0.9, tickformat=".2f"),
            name=tr("state_evolution.fig.head", h=h),
            hovertemplate=f"head {h}<br>k=%{{y:.0f}} v=%{{x:.0f}}<br>%{{z:.4f}}<extra></extra>",
        ), row=r, col=c)
        idx = (r - 1) * cols + c
        suffix = "" if idx == 1 else str(idx)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{suffix}", constrain="domain",
                         showticklabels=(c == 1), row=r, col=c)
        fig.update_xaxes(constrain="domain", row=r, col=c)
    fig.update_xaxes(title_text=tr("state_evolution.fig.heatmap.x"), row=rows, col=1)
    fig.update_yaxes(title_text=tr("state_evolution.fig.heatmap.y"), row=1, col=1)
    if delta:
        title = tr("state_evolution.fig.heatmap.delta_title", t=t, prev=t - 1, label=labels[t], layer=layer)  # S_-1 = 0
    else:
        title = tr("state_evolution.fig.heatmap.title", t=t, label=labels[t], layer=layer)
    fig.update_layout(title=dict(text=title, x=0.0, font=dict(size=15)), height=250 * rows + 90,
                      margin=dict(l=50, r=20, t=80, b=45), uirevision=f"heat-{layer}")
    return fig


def _head_rows_figure(trace: KDAStateTrace, layer: int, t: int, rows: tuple, title_key: str,
                      uirevision: str) -> go.Figure:
    """Two rows of one line per head over the tokens, a marker at token ``t`` in each; ``rows``:
    two ``(series [H, T], y-axis i18n key, extra y-axis options)``."""
    _check(trace, layer, t)
    labels = token_labels(trace.tokens)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for r, (series, _, _) in enumerate(rows, start=1):
        _head_lines(fig, list(series), labels, r, r == 1, ".3f")
        _current_marker(fig, t, list(series), r, r == 1)
    _token_axis(fig, labels, rows=2)
    for r, (_, y_key, y_opts) in enumerate(rows, start=1):
        fig.update_yaxes(title_text=tr(y_key), row=r, col=1, **y_opts)
    fig.update_layout(title=dict(text=tr(title_key, layer=layer), x=0.0, y=0.97, yref="container",
                                 font=dict(size=15)),
                      height=470, margin=dict(l=60, r=20, t=95, b=50), hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.015, xanchor="left", x=0.0),
                      uirevision=uirevision)
    return fig


def state_norm_figure(trace: KDAStateTrace, layer: int, t: int) -> go.Figure:
    """Two rows over tokens: ``||S_t||`` per head, and the write size (:func:`write_sizes`)."""
    _check(trace, layer, t)
    norms = trace.state_norms(layer).float().T.numpy()  # [H, T]
    writes = write_sizes(trace, layer).T.numpy()  # [H, T]
    return _head_rows_figure(trace, layer, t, ((norms, "state_evolution.fig.norm.y", {"rangemode": "tozero"}),
                                               (writes, "state_evolution.fig.write.y", {"rangemode": "tozero"})),
                             "state_evolution.fig.norm.title", f"norm-{layer}")


def gate_floor(config) -> float | None:
    """``e^lower_bound``: the smallest ``alpha`` one step can apply under K3's bounded gate (None without one)."""
    return None if config.gate_lower_bound is None else math.exp(config.gate_lower_bound)


def gate_figure(trace: KDAStateTrace, layer: int, t: int, *, lower_bound: float | None = None) -> go.Figure:
    """Two rows over tokens: mean ``alpha = exp(g)`` over key channels per head, and ``beta`` per head.
    With K3's bounded gate (``lower_bound``), the floor ``e^lower_bound`` that no channel's ``alpha`` can go
    below is drawn, with the lowest channel of every token (over heads and channels) beside it."""
    _check(trace, layer, t)
    alpha = trace.gates[layer].float().exp().mean(dim=-1).T.numpy()  # [T, H, K] -> [H, T]
    beta = trace.beta[layer].float().T.numpy()  # [T, H] -> [H, T]
    fig = _head_rows_figure(trace, layer, t, ((alpha, "state_evolution.fig.gate.alpha", {}),
                                              (beta, "state_evolution.fig.gate.beta", {"range": [0, 1]})),
                            "state_evolution.fig.gate.title", f"gate-{layer}")
    if lower_bound is not None:
        lowest = trace.gates[layer].float().exp().flatten(1).min(dim=1).values.numpy()  # [T]
        fig.add_trace(go.Scatter(x=list(range(len(lowest))), y=lowest.tolist(), mode="lines", line=dict(color="#555", dash="dot"),
                                 name=tr("state_evolution.fig.gate.lowest")), row=1, col=1)
        floor = math.exp(lower_bound)
        fig.add_hline(y=floor, line=dict(color="#d62728", dash="dash", width=1.5), row=1, col=1)
        # an annotation on a log axis is placed by log10 of its value (a shape, the line above, by the value)
        fig.add_annotation(x=0, y=math.log10(floor), xanchor="left", yanchor="bottom", showarrow=False, row=1, col=1,
                           text=tr("state_evolution.fig.gate.floor", lb=f"{lower_bound:g}", floor=f"{floor:.4f}"))
        log_axis(fig, 1, min(float(lowest.min()), floor), 1.0)
    return fig


def recall_probe_figure(curves: list[dict], tokens: list[int], t: int) -> go.Figure:
    """One line per query: ``|cos(S_t^T q, v_written)|`` over tokens, with the pair's write and the
    query marked; fixed y range [0, 1] and a marker at the current token ``t``."""
    labels = token_labels(tokens)
    fig = go.Figure()
    x = list(range(len(tokens)))
    for j, c in enumerate(curves):
        y = c["alignment"].tolist()
        name = tr("state_evolution.probe_trace", qk=labels[c["key_pos"]], qv=labels[c["write_pos"]])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line={"width": 2}))
        fig.add_trace(go.Scatter(x=[c["write_pos"], c["query_pos"]], y=[y[c["write_pos"]], y[c["query_pos"]]],
                                 mode="markers", marker={"symbol": ["triangle-up", "star"], "size": 11},
                                 showlegend=False, hoverinfo="skip"))
    fig.add_vline(x=t, line={"dash": "dot", "color": "#888"})
    fig.update_layout(title=tr("state_evolution.probe_title"), height=320, margin={"t": 50, "b": 40},
                      yaxis={"range": [0, 1.05], "title": "|cos|"},
                      xaxis={"tickmode": "array", "tickvals": tick_positions(labels),
                             "ticktext": [labels[i] for i in tick_positions(labels)], "tickangle": 0,
                             "title": tr("state_evolution.fig.token_axis")})
    return fig


# a relative error this large means nothing is left of the state; overflowed errors are drawn here
RECOVERY_CAP = 1e30
RECOVERY_OK = 1e-2  # "recovered": within 1 % of the true state


def recovery_figure(curve: RecoveryCurve) -> go.Figure:
    """Two rows over j = tokens undone: the relative error of the recovered state (fp32 and fp64,
    log scale, overflow drawn at :data:`RECOVERY_CAP`), and log10 of the cumulative decay
    ``prod(alpha)`` of the tokens undone (the most forgetful channel and the median channel)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1)
    for name, color in (("float32", "#d62728"), ("float64", "#1f77b4")):
        y = [min(e, RECOVERY_CAP) for e in curve.rel_error[name]]
        fig.add_trace(go.Scatter(x=curve.steps, y=y, mode="lines+markers", name=name, line={"color": color}),
                      row=1, col=1)
    fig.add_hline(y=RECOVERY_OK, line={"dash": "dot", "color": "#888"}, row=1, col=1)
    for key, series, dash in (("state_evolution.archive.fig.min", curve.log10_decay_min, "solid"),
                              ("state_evolution.archive.fig.median", curve.log10_decay_median, "dash")):
        fig.add_trace(go.Scatter(x=curve.steps, y=series, mode="lines", name=tr(key),
                                 line={"color": "#555", "dash": dash}), row=2, col=1)
    errs = [min(e, RECOVERY_CAP) for name in ("float32", "float64") for e in curve.rel_error[name] if e > 0]
    log_axis(fig, 1, min(errs + [RECOVERY_OK]), max(errs + [1.0]),
             title_text=tr("state_evolution.archive.fig.err"))
    fig.update_yaxes(title_text=tr("state_evolution.archive.fig.decay"), row=2, col=1)
    fig.update_xaxes(title_text=tr("state_evolution.archive.fig.x"), dtick=1, row=2, col=1)
    fig.update_layout(title=tr("state_evolution.archive.fig.title", layer=curve.layer, t=curve.t), height=470,
                      margin=dict(l=60, r=20, t=60, b=50), legend=dict(orientation="h", y=1.08, x=0.0))
    return fig


def recovery_reach(curve: RecoveryCurve) -> dict:
    """How many tokens back each precision recovers the state within :data:`RECOVERY_OK` (0 = not
    even one), and the most forgetful channel's decay over one token."""
    def reach(errors):
        n = 0
        for e in errors:
            if not e <= RECOVERY_OK:
                break
            n += 1
        return n

    x = curve.log10_decay_min[0]  # log10 of the smallest alpha over one token
    return {"fp32": reach(curve.rel_error["float32"]), "fp64": reach(curve.rel_error["float64"]),
            "decay1": f"{10 ** x:.2g}" if x > -300 else f"1e{x:.0f}", "steps": len(curve.steps)}


PAGE_CONCEPTS = ("kda.state_evolution", "kda.delta_rule", "kda.gate", "kda.gate_bounded", "kda.recurrence",
                 "state.not_an_archive",
                 "state.bytes")


def layer_option(layers: list[int], layer: int) -> str:
    """The layer select's option text. Language-neutral on purpose: a select whose option strings
    change with the language loses its selection in the browser (the frontend keeps the old string)."""
    return f"{layer}  (KDA {layers.index(layer) + 1}/{len(layers)})"


def token_strip_html(tokens: list[int], t: int) -> str:
    """The prompt as a row of token chips, the current one highlighted (escaped HTML)."""
    chips = []
    for i, label in enumerate(token_labels(tokens)):
        style = ("background:#ffd24d;border:1px solid #b38f00;font-weight:700;" if i == t
                 else "background:#eef1f5;border:1px solid #d5dae1;" if i < t
                 else "background:#ffffff;border:1px solid #e3e6ea;color:#9aa0a6;")
        chips.append(f'<span title="t={i}" style="{style}display:inline-block;min-width:1.1em;'
                     f'text-align:center;margin:1px;padding:0 3px;border-radius:4px;'
                     f'font-family:monospace">{html.escape(label)}</span>')
    return '<div style="line-height:1.9">' + "".join(chips) + "</div>"
