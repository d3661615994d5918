"""The "sequential but segmentable" page (article 1.3): split a sequence anywhere, keep the order,
get the same state — and the chunk kernel's chunk-start states come for free. No Streamlit here.

:func:`run_segments` takes one random KDA input sequence and

* runs it in **one pass** with the token-by-token reference (:func:`kda_ref.ops.recurrent_kda`,
  keeping the state after every token);
* runs it **segment by segment in order** with the chunk kernel (:func:`kda_ref.ops.chunk_kda`),
  each segment starting from the state the previous one returned — what chunked prefill does;
* runs it with two segments **swapped**, the same way;
* runs it in one call of the chunk kernel with ``return_intermediate_states=True``: the states at
  the start of every chunk, which a prefix cache can keep as checkpoints at no extra cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from kda_ref.ops import chunk_kda, l2norm, recurrent_kda

from .i18n import t as tr

PAGE_CONCEPTS = ("kda.chunk_form", "engine.chunked_prefill", "kda.recurrence", "kda.chunk_checkpoints",
                 "kda.state_evolution")
T_LEN = 96
HEADS = 2
DIM = 16
CHUNK = 16
DEFAULT_SPLITS = (21, 40, 70)
SEG_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")
STATE_COLORSCALE = "RdBu_r"


class SplitError(ValueError):
    """Split points the page cannot use. Carries an i18n key."""

    def __init__(self, key: str, **fmt):
        self.key, self.fmt = key, fmt
        super().__init__(tr(key, "en", **fmt))

    def message(self, lang: str) -> str:
        return tr(self.key, lang, **self.fmt)


def make_inputs(seed: int = 0, T: int = T_LEN, H: int = HEADS, D: int = DIM) -> dict[str, torch.Tensor]:
    """Random KDA inputs in fla layout (``[1, T, H, D]``; unit-norm q, k; log decays with
    ``alpha = exp(g)`` in about (0.92, 1); ``beta`` in (0, 1)), float32."""
    g = torch.Generator().manual_seed(int(seed))
    q = l2norm(torch.randn(1, T, H, D, generator=g))
    k = l2norm(torch.randn(1, T, H, D, generator=g))
    v = torch.randn(1, T, H, D, generator=g)
    gate = -0.08 * torch.rand(1, T, H, D, generator=g)
    beta = torch.sigmoid(torch.randn(1, T, H, generator=g))
    return {"q": q, "k": k, "v": v, "g": gate, "beta": beta}


def check_splits(splits, T: int = T_LEN) -> list[int]:
    """Sorted, unique split points strictly inside ``(0, T)``; :class:`SplitError` otherwise."""
    out = sorted({int(s) for s in splits})
    bad = [s for s in out if not 0 < s < T]
    if bad:
        raise SplitError("seg.err.range", s=bad[0], T=T)
    return out


def bounds_of(splits, T: int = T_LEN) -> list[int]:
    """Segment boundaries ``[0, s1, ..., T]``."""
    return [0, *check_splits(splits, T), T]


def _run_in_order(x: dict, segs: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Process ``segs`` (``(start, end)`` ranges of the sequence) one after the other with the chunk
    kernel, each from the previous final state; returns the state after every segment ``[H, K, V]``."""
    state, out = None, []
    for s, e in segs:
        _, state = chunk_kda(x["q"][:, s:e], x["k"][:, s:e], x["v"][:, s:e], x["g"][:, s:e], x["beta"][:, s:e],
                             initial_state=state, output_final_state=True, chunk_size=CHUNK)
        out.append(state[0])
    return out


@dataclass
class SegmentResult:
    bounds: list[int]  # [0, s1, ..., T]
    swap: int | None  # segments swap and swap + 1 exchanged (None: fewer than two segments)
    one_pass: torch.Tensor  # [T, H, K, V] state after every token, recurrent reference
    in_order: list[torch.Tensor]  # state after every segment, chunk kernel, in order: [H, K, V] each
    swapped_final: torch.Tensor | None  # final state with two segments swapped
    chunk_starts: torch.Tensor  # [NT, H, K, V] state at the start of every chunk (one chunk_kda call)

    @property
    def T(self) -> int:
        return self.one_pass.shape[0]

    def one_pass_at(self, pos: int) -> torch.Tensor:
        """The one-pass state after ``pos`` tokens (zeros for 0)."""
        return torch.zeros_like(self.one_pass[0]) if pos == 0 else self.one_pass[pos - 1]

    def boundary_diff(self, j: int) -> float:
        """``max |in-order state after segment j - one-pass state at that position|``."""
        return float((self.in_order[j] - self.one_pass_at(self.bounds[j + 1])).abs().max())

    def swapped_diff(self) -> float | None:
        if self.swapped_final is None:
            return None
        return float((self.swapped_final - self.one_pass[-1]).abs().max())

    def chunk_diff(self) -> float:
        """``max |chunk-start state - one-pass state at the chunk start|`` over all chunks."""
        ref = torch.stack([self.one_pass_at(c * CHUNK) for c in range(self.chunk_starts.shape[0])])
        return float((self.chunk_starts - ref).abs().max())


def run_segments(seed: int = 0, splits=DEFAULT_SPLITS, swap: int | None = None, T: int = T_LEN) -> SegmentResult:
    """Everything the page shows for one input sequence and one set of split points; ``swap`` = i
    exchanges segments i and i + 1 (0-based; default and out of range: the last two)."""
    x = make_inputs(seed, T)
    bounds = bounds_of(splits, T)
    with torch.no_grad():
        _, _, steps = recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True,
                                    return_step_states=True)
        segs = list(zip(bounds, bounds[1:]))
        in_order = _run_in_order(x, segs)
        swapped = None
        if len(segs) >= 2:
            swap = len(segs) - 2 if swap is None else max(0, min(int(swap), len(segs) - 2))
            order = segs[:swap] + [segs[swap + 1], segs[swap]] + segs[swap + 2:]
            swapped = _run_in_order(x, order)[-1]
        else:
            swap = None
        _, _, h = chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True, chunk_size=CHUNK,
                            return_intermediate_states=True)
    return SegmentResult(bounds=bounds, swap=swap, one_pass=steps[0], in_order=in_order, swapped_final=swapped,
                         chunk_starts=h[0])


def fmt_diff(d: float | None) -> str:
    return "—" if d is None else f"{d:.1e}"


# ---- figures -----------------------------------------------------------------------------------
def timeline_figure(r: SegmentResult, j: int, *, lang: str = "en") -> go.Figure:
    """The one-pass state norm after every token; segments as bands; the in-order segment-end states
    (markers on the curve); chunk-start states (diamonds); the current boundary highlighted."""
    T = r.T
    norms = r.one_pass.flatten(1).norm(dim=1).numpy()
    xs = np.arange(1, T + 1)
    fig = go.Figure()
    for n, (s, e) in enumerate(zip(r.bounds, r.bounds[1:])):
        fig.add_vrect(x0=s, x1=e, fillcolor=SEG_COLORS[n % len(SEG_COLORS)], opacity=0.16 if n != j else 0.38,
                      line_width=0, layer="below")
        fig.add_annotation(x=(s + e) / 2, y=1.0, yref="paper", text=tr("seg.fig.segment", lang, n=n + 1),
                           showarrow=False, yanchor="bottom", font=dict(size=12))
    fig.add_trace(go.Scatter(x=xs.tolist(), y=norms.tolist(), mode="lines", name=tr("seg.fig.one_pass", lang),
                             line=dict(color="#333", width=2),
                             hovertemplate="t=%{x}: ||S||=%{y:.3f}<extra></extra>"))
    ends = r.bounds[1:]
    fig.add_trace(go.Scatter(
        x=ends, y=[float(s.norm()) for s in r.in_order], mode="markers", name=tr("seg.fig.in_order", lang),
        marker=dict(size=[15 if n == j else 10 for n in range(len(ends))], color="white",
                    line=dict(color="#1f77b4", width=3)),
        hovertemplate="after %{x} tokens<extra>segments in order</extra>"))
    cs = [c * CHUNK for c in range(r.chunk_starts.shape[0])]
    fig.add_trace(go.Scatter(
        x=cs, y=[float(h.norm()) for h in r.chunk_starts], mode="markers", name=tr("seg.fig.chunk_starts", lang),
        marker=dict(symbol="diamond", size=9, color="#9467bd"),
        hovertemplate="chunk start %{x}<extra>free checkpoint</extra>"))
    if r.swapped_final is not None:
        fig.add_trace(go.Scatter(
            x=[T], y=[float(r.swapped_final.norm())], mode="markers", name=tr("seg.fig.swapped", lang),
            marker=dict(symbol="x", size=14, color="#d62728", line=dict(width=1)),
            hovertemplate="swapped order, final state<extra></extra>"))
    fig.add_vline(x=r.bounds[j + 1], line=dict(color="rgba(0,0,0,0.55)", width=1.5, dash="dot"))
    y_max = max(float(norms.max()), float(r.swapped_final.norm()) if r.swapped_final is not None else 0.0)
    fig.update_xaxes(range=[0, T + 1], title_text=tr("seg.fig.x", lang))
    fig.update_yaxes(range=[0, y_max * 1.12], title_text=tr("seg.fig.y", lang))
    fig.update_layout(
        title=dict(text=tr("seg.fig.timeline.title", lang, j=j + 1, pos=r.bounds[j + 1]), x=0.0, y=0.97,
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


def boundary_figure(r: SegmentResult, j: int, head: int = 0, *, lang: str = "en") -> go.Figure:
    """Head ``head`` of the state after segment ``j``: in order (chunk kernel), one pass (recurrent),
    and their difference — all on one colour scale, fixed for the sequence."""
    pos = r.bounds[j + 1]
    a = r.in_order[j][head].numpy()
    b = r.one_pass_at(pos)[head].numpy()
    m = float(r.one_pass[:, head].abs().max()) or 1e-6
    titles = [tr("seg.fig.panel.in_order", lang, j=j + 1), tr("seg.fig.panel.one_pass", lang, pos=pos),
              tr("seg.fig.panel.diff", lang, d=fmt_diff(float(np.abs(a - b).max())))]
    fig = _three_heatmaps(titles, (a, b, a - b), m)
    fig.update_layout(title=dict(text=tr("seg.fig.boundary.title", lang, head=head, pos=pos), x=0.0,
                                 font=dict(size=15)),
                      height=360, margin=dict(l=40, r=20, t=90, b=30), uirevision="seg-boundary")
    return fig


def swap_figure(r: SegmentResult, head: int = 0, *, lang: str = "en") -> go.Figure:
    """Head ``head`` of the final state: one pass, segments with two swapped, and their difference."""
    if r.swapped_final is None:
        raise ValueError("swap_figure: needs at least two segments")
    a = r.one_pass[-1][head].numpy()
    b = r.swapped_final[head].numpy()
    m = float(r.one_pass[:, head].abs().max()) or 1e-6
    titles = [tr("seg.fig.panel.final", lang, T=r.T), tr("seg.fig.panel.swapped", lang, a=r.swap + 1, b=r.swap + 2),
              tr("seg.fig.panel.diff", lang, d=fmt_diff(float(np.abs(a - b).max())))]
    fig = _three_heatmaps(titles, (a, b, b - a), m)
    fig.update_layout(title=dict(text=tr("seg.fig.swap.title", lang, head=head), x=0.0, font=dict(size=15)),
                      height=360, margin=dict(l=40, r=20, t=90, b=30), uirevision="seg-swap")
    return fig
