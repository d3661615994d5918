"""Figures of the "Disaggregation" page: one request through prefill -> capture -> transfer -> verify
-> decode, the manifest, the bytes by kind, and the refused handoffs (data:
:mod:`model_viz.scenarios.pd_disaggregation`)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..i18n import t as tr
from .token_strips import diff_strips_html
from ..scenarios.pd_disaggregation import STAGES, BrokenPD, PDView

PAGE_CONCEPTS = ("pd.state_transfer", "state.three_kinds", "state.bytes", "sglang.boundary_consistency")
# i18n keys written whole (tests/test_i18n.py)
STAGE_LABEL = {"prefill": "pd_disaggregation.stage.prefill", "capture": "pd_disaggregation.stage.capture",
               "transfer": "pd_disaggregation.stage.transfer", "verify": "pd_disaggregation.stage.verify",
               "decode": "pd_disaggregation.stage.decode"}
KIND_LABEL = {"kv": "pd_disaggregation.kind.kv", "state": "pd_disaggregation.kind.state", "conv": "pd_disaggregation.kind.conv"}
BREAK_LABEL = {"boundary": "pd_disaggregation.break.boundary", "kv_only": "pd_disaggregation.break.kv_only"}
KIND_COLOR = {"kv": "#1f77b4", "state": "#d62728", "conv": "#ff7f0e"}
ON, OFF = "#2ca02c", "#e0e0e0"


def clamp_stage(i: int | None) -> int:
    return 0 if i is None else max(0, min(int(i), len(STAGES) - 1))


def stage_figure(view: PDView, i: int) -> go.Figure:
    """The five stages left to right, the current one green; the dashed box is the transfer engine's
    whole job (moving bytes, a status), everything else the serving engines'."""
    i = clamp_stage(i)
    fig = go.Figure()
    for n, stage in enumerate(STAGES):
        x0 = n * 1.2
        fig.add_shape(type="rect", x0=x0, x1=x0 + 1, y0=0, y1=1, fillcolor=ON if n == i else OFF,
                      line={"color": "#555"})
        fig.add_annotation(x=x0 + 0.5, y=0.5, text=tr(STAGE_LABEL[stage]), showarrow=False,
                           font={"color": "white" if n == i else "black"})
    t = STAGES.index("transfer") * 1.2
    fig.add_shape(type="rect", x0=t - 0.1, x1=t + 1.1, y0=-0.25, y1=1.25, line={"dash": "dash", "color": "#1f77b4"})
    fig.add_annotation(x=t + 0.5, y=1.45, text=tr("pd_disaggregation.fig.transfer_engine"), showarrow=False,
                       font={"color": "#1f77b4"})
    fig.add_annotation(x=1.1, y=-0.55, text=tr("pd_disaggregation.fig.prefill_side"), showarrow=False)
    fig.add_annotation(x=4.7, y=-0.55, text=tr("pd_disaggregation.fig.decode_side"), showarrow=False)
    fig.update_xaxes(visible=False, range=[-0.3, len(STAGES) * 1.2])
    fig.update_yaxes(visible=False, range=[-0.8, 1.7])
    fig.update_layout(height=230, margin=dict(l=10, r=10, t=40, b=10),
                      title=tr("pd_disaggregation.fig.stage_title", n=i + 1, N=len(STAGES),
                               stage=tr(STAGE_LABEL[STAGES[i]])))
    return fig


def manifest_table(view: PDView) -> go.Figure:
    m = view.manifest
    rows = sorted(m.regions, key=lambda r: r.offset)
    cols = [[tr(KIND_LABEL[r.kind]) for r in rows], [r.layer for r in rows], [f"{r.nbytes:,}" for r in rows],
            [" x ".join(map(str, r.shape)) for r in rows], [r.boundary for r in rows], [f"{r.crc32:08x}" for r in rows]]
    header = [tr(k) for k in ("pd_disaggregation.col.kind", "pd_disaggregation.col.layer", "pd_disaggregation.col.bytes",
                                     "pd_disaggregation.col.shape", "pd_disaggregation.col.boundary",
                                     "pd_disaggregation.col.crc")]
    fig = go.Figure(go.Table(header={"values": header, "fill_color": "#f5f5f5", "align": "left"},
                             cells={"values": cols, "align": "left", "font": {"family": "monospace"}}))
    fig.update_layout(title=tr("pd_disaggregation.fig.manifest_title", req=m.req_id, b=m.boundary,
                               tok=m.first_token, total=f"{m.total_bytes:,}"),
                      height=80 + 26 * len(rows), margin=dict(l=10, r=10, t=40, b=5))
    return fig


def sends_table(view: PDView) -> go.Figure:
    """Every send of the request: the KV rows each prefill chunk finished, then the last send with the
    states and conv windows (the only one that carries them)."""
    rows = view.sends
    kind = [tr("pd_disaggregation.send.last" if r["last"] else "pd_disaggregation.send.chunk") for r in rows]
    cols = [list(range(1, len(rows) + 1)), kind, [f"{r['rows'][0]}-{r['rows'][1]}" for r in rows],
            [f"{r['kv']:,}" for r in rows], [f"{r['state']:,}" for r in rows], [f"{r['conv']:,}" for r in rows]]
    header = [tr(k) for k in ("pd_disaggregation.col.send", "pd_disaggregation.col.when",
                                     "pd_disaggregation.col.rows", "pd_disaggregation.kind.kv",
                                     "pd_disaggregation.kind.state", "pd_disaggregation.kind.conv")]
    fill = [["#fde0dd" if r["last"] else "white" for r in rows]] * len(cols)
    fig = go.Figure(go.Table(header={"values": header, "fill_color": "#f5f5f5", "align": "left"},
                             cells={"values": cols, "align": "left", "fill_color": fill,
                                    "font": {"family": "monospace"}}))
    fig.update_layout(title=tr("pd_disaggregation.fig.sends_title", n=len(rows)),
                      height=80 + 26 * len(rows), margin=dict(l=10, r=10, t=40, b=5))
    return fig


def bytes_figure(vol: dict[str, list[dict]]) -> go.Figure:
    """One handoff's bytes by kind and prompt length, stacked: KV grows, the states do not."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(tr("pd_disaggregation.fig.bytes_tiny"),
                                                        tr("pd_disaggregation.fig.bytes_48b")))
    for c, name in enumerate(("tiny", "48b")):
        rows = vol[name]
        x = [f"{r['tokens'] // 1024}k" for r in rows]
        for kind in ("kv", "state", "conv"):
            fig.add_trace(go.Bar(x=x, y=[r[kind] / 2**20 for r in rows], name=tr(KIND_LABEL[kind]),
                                 marker_color=KIND_COLOR[kind], legendgroup=kind, showlegend=c == 0), row=1, col=c + 1)
    fig.update_layout(barmode="stack", height=340, margin=dict(l=60, r=20, t=50, b=40))
    fig.update_yaxes(title_text="MiB")
    fig.update_xaxes(title_text=tr("pd_disaggregation.fig.bytes_x"))
    return fig


def tokens_html(b: BrokenPD) -> str:
    """The right tokens and what an unchecked install decodes, the first difference marked."""
    return diff_strips_html((tr("pd_disaggregation.broken.ref"), b.reference),
                            (tr("pd_disaggregation.broken.bad"), b.unchecked), label_em=11)
