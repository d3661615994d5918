"""Figures of the "Compressed checkpoints" page: bytes, restore error per layer, and the drift of
B's logits and tokens against a run without cache (data: :mod:`model_viz.scenarios.compressed_checkpoints`)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kda_ref.tokenizer import ByteTokenizer

from ..i18n import t as tr
from ..scenarios.compressed_checkpoints import DtypeRun

PAGE_CONCEPTS = ("sglang.compressed_checkpoint", "sglang.cow_snapshot_donate", "cache.checkpoint_density",
                 "state.bytes")
# i18n keys of the model choices, written whole for tests/test_i18n.py
MODEL_LABEL = {"trained": "compressed_checkpoints.model.trained", "random": "compressed_checkpoints.model.random"}
COLORS = {"fp32": "#2ca02c", "bf16": "#1f77b4", "int8": "#d62728"}
_FLOOR = 1e-9  # log axes: an exact zero is drawn here
_TOK = ByteTokenizer()


def summary_rows(runs: list[DtypeRun]) -> list[dict]:
    """One table row per dtype: bytes (tiny and 48B, and relative to fp32), worst layer error, max
    logit drift, first divergent token and token agreement."""
    base = runs[0]
    none = tr("compressed_checkpoints.never")
    rows = []
    for r in runs:
        first = r.first_divergence
        rows.append({
            tr("compressed_checkpoints.col.dtype"): r.dtype,
            tr("compressed_checkpoints.col.bytes"): f"{r.bytes_tiny:,} ({r.bytes_tiny / base.bytes_tiny:.2f}×)",
            tr("compressed_checkpoints.col.bytes48"): f"{r.bytes_48b / 2**20:.1f}",
            tr("compressed_checkpoints.col.layer_err"): f"{max(r.layer_error):.1e}",
            tr("compressed_checkpoints.col.drift"): f"{max(r.logit_diff):.1e}",
            tr("compressed_checkpoints.col.first"): none if first is None else str(first),
            tr("compressed_checkpoints.col.agree"): f"{100 * r.agreement:.0f}%",
        })
    return rows


def promise_rows(rows: list[dict]) -> list[dict]:
    """The measured promise, one row per cache and dtype: answers changed out of the requests served."""
    return [{tr("compressed_checkpoints.col.cache"): r["cache"],
             tr("compressed_checkpoints.col.dtype"): r["dtype"],
             tr("compressed_checkpoints.col.hits"): r["hits"],
             tr("compressed_checkpoints.col.changed"):
                 f"{r['answers_changed']} / {r['requests']} ({100 * r['answers_changed'] / r['requests']:.1f}%)"}
            for r in rows]


def error_figure(runs: list[DtypeRun]) -> go.Figure:
    """Left: the restore error of every KDA layer per dtype. Right: max |Δlogit| per generated token
    (up to and including the first token that differs from the reference)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=(tr("compressed_checkpoints.fig.layer_title"),
                                        tr("compressed_checkpoints.fig.drift_title")))
    for r in runs:
        layers = [str(i) for i in range(len(r.layer_error))]
        fig.add_trace(go.Bar(x=layers, y=[max(e, _FLOOR) for e in r.layer_error], name=r.dtype,
                             marker_color=COLORS[r.dtype], legendgroup=r.dtype), row=1, col=1)
        fig.add_trace(go.Scatter(x=list(range(len(r.logit_diff))), y=[max(d, _FLOOR) for d in r.logit_diff],
                                 mode="lines+markers", name=r.dtype, marker_color=COLORS[r.dtype],
                                 legendgroup=r.dtype, showlegend=False), row=1, col=2)
        if r.first_divergence is not None:
            fig.add_trace(go.Scatter(x=[r.first_divergence], y=[max(r.logit_diff[-1], _FLOOR)], mode="markers",
                                     marker={"symbol": "x", "size": 14, "color": COLORS[r.dtype]},
                                     name=tr("compressed_checkpoints.fig.diverged", dtype=r.dtype),
                                     legendgroup=r.dtype), row=1, col=2)
    fig.update_yaxes(type="log", title_text=tr("compressed_checkpoints.fig.layer_y"), row=1, col=1)
    fig.update_yaxes(type="log", title_text=tr("compressed_checkpoints.fig.drift_y"), row=1, col=2)
    fig.update_xaxes(title_text=tr("compressed_checkpoints.fig.layer_x"), row=1, col=1)
    fig.update_xaxes(title_text=tr("compressed_checkpoints.fig.drift_x"), row=1, col=2)
    fig.update_layout(barmode="group", height=380, margin=dict(l=60, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=-0.25, x=0.0))
    return fig


def token_table_html(runs: list[DtypeRun]) -> str:
    """B's generated tokens without cache, then per dtype; a token that differs from the reference is
    struck through in red."""
    def cell(tok: int, ok: bool) -> str:
        s = html.escape(_TOK.token_str(int(tok)).replace(" ", "␣"))
        style = "" if ok else "color:#d62728;text-decoration:line-through;font-weight:700;"
        return f"<span style='font-family:monospace;{style}'>{s}</span>"

    ref = "".join(cell(a, True) for a in runs[0].ref_tokens)
    label = html.escape(tr("compressed_checkpoints.no_cache"))
    lines = [f"<div><b style='display:inline-block;width:3.5em'>{label}</b>{ref}</div>"]
    for r in runs:
        toks = "".join(cell(a, a == b) for a, b in zip(r.tokens, r.ref_tokens))
        lines.append(f"<div><b style='display:inline-block;width:3.5em'>{r.dtype}</b>{toks}</div>")
    return "".join(lines)
