"""Figures of the "Speculative decoding" page: one verify step and what each rollback strategy holds
after it, the rollback bytes, and the "break it" comparison (data: :mod:`model_viz.scenarios.spec_decode`)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..i18n import plural, t as tr
from .token_strips import diff_strips_html, token_label
from ..scenarios.spec_decode import (SPEC_STATES, BrokenRun, BucketStep, ClosedForm, SpecRun, StaticView, VerifyStep,
                                     lane_keeps, lane_label, lane_symbol, slots_held, summary)

PAGE_CONCEPTS = ("spec.state_rollback", "spec.recoverssm", "static.pad_rows", "static.torch_compile",
                 "sglang.kda_dispatcher", "state.not_an_archive", "kda.recurrence")
# the strategies drawn, top lane first: every registered spec_state; each lane is labelled by the strategy
# object itself (its name, origin and lane symbol), so a new strategy needs nothing here
STRATEGIES = SPEC_STATES
# what each strategy keeps and when its state exists, translated (i18n keys written whole,
# tests/test_i18n.py); a strategy without a line shows its own English summary
STRATEGY_TEXT = {"per_step": "spec_decode.strategy.per_step", "slots": "spec_decode.strategy.slots",
                 "replay": "spec_decode.strategy.replay", "recoverssm": "spec_decode.strategy.recoverssm"}
PALETTE = ("#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#7f7f7f")
OK, BAD, NEXT, IDLE = "#2ca02c", "#d62728", "#1f77b4", "#d9d9d9"


def strategy_text(name: str) -> str:
    """What strategy ``name`` keeps and when its state exists, in the current language (its own summary where the page
    has no translated line)."""
    key = STRATEGY_TEXT.get(name)
    return tr(key) if key is not None else summary(name)


def color(name: str) -> str:
    return PALETTE[STRATEGIES.index(name) % len(PALETTE)]
def clamp_step(i: int | None, run: SpecRun) -> int:
    return 0 if i is None else max(0, min(int(i), len(run.steps) - 1))


def verify_figure(run: SpecRun, i: int) -> go.Figure:
    """Verify step ``i``: the last committed token and the drafts (accepted green, rejected red),
    the token the target adds, and per strategy what exists after the verify and which one the
    request continues from."""
    s: VerifyStep = run.steps[clamp_step(i, run)]
    k = len(s.drafts)
    fig = go.Figure()
    row = {"tokens": float(len(STRATEGIES)), **{x: float(len(STRATEGIES) - 1 - i) for i, x in enumerate(STRATEGIES)}}
    labels = [token_label(run.prompt[-1] if s.context + 1 == len(run.prompt) else
                          run.tokens[s.context - len(run.prompt)])] + [token_label(d) for d in s.drafts]
    for t in range(k + 1):  # t = 0: the last committed token; t >= 1: draft t
        if t == 0:
            color, note = "#777777", tr("spec_decode.fig.committed")
        elif t <= s.num_accepted:
            color, note = OK, tr("spec_decode.fig.accepted")
        else:
            color, note = BAD, tr("spec_decode.fig.rejected")
        fig.add_shape(type="rect", x0=t - 0.42, x1=t + 0.42, y0=row["tokens"] - 0.32, y1=row["tokens"] + 0.32,
                      fillcolor=color, opacity=0.8, line_width=0, layer="below")
        fig.add_trace(go.Scatter(x=[t], y=[row["tokens"]], mode="text", text=[html.escape(labels[t])],
                                 textfont={"color": "white", "size": 15}, hovertext=[note], hoverinfo="text",
                                 showlegend=False))
    fig.add_annotation(x=s.num_accepted, y=row["tokens"] + 0.32, text=tr(
        "spec_decode.fig.next", tok=html.escape(token_label(s.next_token))), showarrow=True, ax=0, ay=-22,
        font={"color": NEXT})
    j = s.kept - 1  # the verified token whose state the request continues from
    for strategy in STRATEGIES:
        y = row[strategy]
        for t in range(k + 1):
            fill = OK if lane_keeps(strategy, t, j) else IDLE
            fig.add_shape(type="rect", x0=t - 0.38, x1=t + 0.38, y0=y - 0.28, y1=y + 0.28, fillcolor=fill,
                          line={"color": "#555", "width": 1}, layer="below")
        kept_boxes = [lane_keeps(strategy, t, j) for t in range(k + 1)]
        fig.add_trace(go.Scatter(x=list(range(k + 1)), y=[y] * (k + 1), mode="text",
                                 text=[lane_symbol(strategy, t) for t in range(k + 1)],
                                 textfont={"size": 12, "color": ["white" if kb else "#333" for kb in kept_boxes]},
                                 hoverinfo="skip", showlegend=False))
    lanes = (*reversed(STRATEGIES), "tokens")  # bottom to top
    fig.update_yaxes(showgrid=False, zeroline=False, tickvals=[row[x] for x in lanes], range=[-0.6, len(STRATEGIES) + 0.9],
                     ticktext=[lane_label(x) for x in reversed(STRATEGIES)] + [tr("spec_decode.fig.tokens")])
    fig.update_xaxes(range=[-0.6, k + 0.6], tickvals=list(range(k + 1)), title_text=tr("spec_decode.fig.x"))
    fig.update_layout(title=tr("spec_decode.fig.verify_title", n=clamp_step(i, run) + 1, N=len(run.steps),
                               ctx=s.context, k=k, a=s.num_accepted),
                      height=300 + 40 * len(STRATEGIES), margin=dict(l=200, r=20, t=60, b=45), plot_bgcolor="white")
    return fig


def bytes_figure(run: SpecRun) -> go.Figure:
    """Rollback storage per strategy: this run's peak (engine stats) and one request at Kimi K3's size."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(tr("spec_decode.fig.bytes_tiny"),
                                                        tr("spec_decode.fig.bytes_k3", k=run.k)))
    colors = [color(x) for x in STRATEGIES]
    fig.add_trace(go.Bar(x=list(STRATEGIES), y=[run.rollback_bytes[x] / 1024 for x in STRATEGIES], marker_color=colors,
                         text=[f"{run.rollback_bytes[x] / 1024:,.0f} KiB" for x in STRATEGIES], showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=list(STRATEGIES), y=[run.bytes_k3[x] / 2**20 for x in STRATEGIES], marker_color=colors,
                         text=[f"{run.bytes_k3[x] / 2**20:,.0f} MiB" for x in STRATEGIES], showlegend=False),
                  row=1, col=2)
    fig.update_yaxes(title_text="KiB", row=1, col=1)
    fig.update_yaxes(title_text="MiB", row=1, col=2)
    fig.update_layout(height=330, margin=dict(l=60, r=20, t=60, b=40))
    return fig


STRATEGY_COLUMNS = ("spec_decode.table.strategy", "spec_decode.table.keeps", "spec_decode.table.slots",
                    "spec_decode.table.bytes_48b", "spec_decode.table.bytes_k3")


def strategy_table(run: SpecRun) -> go.Figure:
    """Every strategy side by side: what it keeps and when the state exists, the state slots a request
    holds, and its rollback bytes per request at Kimi-Linear-48B's and Kimi K3's sizes (k of the run)."""
    slots = [str(slots_held(x, run.k)) for x in STRATEGIES]
    cells = [[lane_label(x) for x in STRATEGIES], [strategy_text(x) for x in STRATEGIES], slots,
             [f"{run.bytes_48b[x] / 2**20:,.1f} MiB" for x in STRATEGIES],
             [f"{run.bytes_k3[x] / 2**20:,.0f} MiB" for x in STRATEGIES]]
    fig = go.Figure(go.Table(columnwidth=[1.3, 4, 0.7, 1, 1],
                             header={"values": [tr(c, k=run.k) for c in STRATEGY_COLUMNS],
                                     "fill_color": "#f5f5f5", "align": "left"},
                             cells={"values": cells, "align": "left", "height": 44}))
    fig.update_layout(height=80 + 60 * len(STRATEGIES), margin=dict(l=10, r=10, t=10, b=5))
    return fig


def closed_form_figure(run: SpecRun, i: int) -> go.Figure:
    """RecoverSSM's commit of verify step ``i`` term by term (first KDA layer): the committed state
    decayed through every kept token, then one term ``Diag(prod_{s>t} alpha_s) k_t u_t^T`` per kept token,
    bars of their norms, and the decay left after each token as a line; the sum's norm in the title."""
    c: ClosedForm = run.closed_forms[clamp_step(i, run)]
    names = [tr("spec_decode.fig.cf_start")] + [f"k{t} u{t}ᵀ" for t in range(c.kept)]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=names, y=[c.decayed_norm] + c.term_norms, marker_color=[IDLE] + [OK] * c.kept,
                         name=tr("spec_decode.fig.cf_norm")), secondary_y=False)
    fig.add_trace(go.Scatter(x=names[1:], y=c.decay_after, mode="lines+markers", line={"color": NEXT},
                             name=tr("spec_decode.fig.cf_decay")), secondary_y=True)
    fig.update_yaxes(title_text=tr("spec_decode.fig.cf_norm"), secondary_y=False)
    fig.update_yaxes(title_text=tr("spec_decode.fig.cf_decay"), range=[0, 1.05], tickvals=[0, 0.25, 0.5, 0.75, 1],
                     showgrid=False, secondary_y=True)
    fig.update_layout(title=tr("spec_decode.fig.cf_title", n=clamp_step(i, run) + 1, kept=c.kept,
                               start=c.start_norm, final=c.final_norm, gap=c.serial_gap),
                      height=340, margin=dict(l=60, r=60, t=60, b=45), legend={"orientation": "h", "y": -0.2})
    return fig


def tokens_html(broken: BrokenRun) -> str:
    """Greedy decoding's tokens and the wrongly rolled-back engine's, the first difference marked."""
    return diff_strips_html((tr("spec_decode.broken.ref"), broken.reference),
                            (tr("spec_decode.broken.bad"), broken.tokens))


def drift_figure(broken: BrokenRun) -> go.Figure:
    """max |Δlogit| per generated token against greedy decoding, the first wrong-state token marked."""
    fig = go.Figure(go.Scatter(x=list(range(len(broken.drift))), y=[max(d, 1e-9) for d in broken.drift],
                               mode="lines+markers", line={"color": BAD}))
    if broken.first_rejection is not None:
        fig.add_vline(x=broken.first_rejection, line={"dash": "dot", "color": "#333"},
                      annotation_text=tr("spec_decode.fig.wrong_state"))
    fig.update_layout(title=tr("spec_decode.fig.drift_title"), height=300, margin=dict(l=60, r=20, t=50, b=45),
                      xaxis_title=tr("spec_decode.fig.drift_x"), yaxis={"type": "log", "title": "max |Δlogit|"})
    return fig


# ---- the second view: PAD rows of a static decode bucket ------------------------------------------------
LIVE, PAD = "#1f77b4", "#bdbdbd"
STATIC_COLUMNS = ("spec_decode.static.col.row", "spec_decode.static.col.kind", "spec_decode.static.col.slot",
                  "spec_decode.static.col.context", "spec_decode.static.col.pages")


def clamp_bucket_step(i: int | None, view: StaticView) -> int:
    return 0 if i is None else max(0, min(int(i), len(view.steps) - 1))


def bucket_text(s: BucketStep) -> str:
    """The sentence under the bucket table: live rows, bucket size, PAD rows, pages per row."""
    pad = s.bucket - s.num_seqs
    return tr("spec_decode.static.table_text", bs=s.bucket, pages=s.pages,
              live=plural(s.num_seqs, "spec_decode.static.live_rows.one", "spec_decode.static.live_rows.many"),
              pad=plural(pad, "spec_decode.static.pad_rows.one", "spec_decode.static.pad_rows.many"))


def bucket_table(view: StaticView, i: int) -> go.Figure:
    """Static step ``i``'s bucket, one line per row: live rows with their slot, cached tokens and pages;
    PAD rows (grey) with slot -1, context 0 and no page."""
    s: BucketStep = view.steps[clamp_bucket_step(i, view)]
    live = [r < s.num_seqs for r in range(s.bucket)]
    kinds = [tr("spec_decode.static.kind.live" if x else "spec_decode.static.kind.pad") for x in live]
    pages = [" ".join(str(p) for p in row) for row in s.block_table]
    fill = [["#e8f1fa" if x else "#eeeeee" for x in live]] * len(STATIC_COLUMNS)
    fig = go.Figure(go.Table(
        header={"values": [tr(c) for c in STATIC_COLUMNS], "fill_color": "#f5f5f5", "align": "left"},
        cells={"values": [list(range(s.bucket)), kinds, s.state_indices, s.context_lens, pages], "fill_color": fill,
               "align": "left", "font": {"family": "monospace"}}))
    fig.update_layout(title=tr("spec_decode.static.fig.table_title", step=s.step, bs=s.bucket, n=s.num_seqs),
                      height=90 + 28 * s.bucket, margin=dict(l=10, r=10, t=40, b=5))
    return fig


def bucket_steps_figure(view: StaticView) -> go.Figure:
    """Per static step: live rows and PAD rows of the bucket it ran as."""
    x = [s.step for s in view.steps]
    fig = go.Figure([
        go.Bar(x=x, y=[s.num_seqs for s in view.steps], name=tr("spec_decode.static.kind.live"),
               marker_color=LIVE),
        go.Bar(x=x, y=[s.bucket - s.num_seqs for s in view.steps], name=tr("spec_decode.static.kind.pad"),
               marker_color=PAD)])
    fig.update_layout(barmode="stack", title=tr("spec_decode.static.fig.steps_title"), height=300,
                      margin=dict(l=60, r=20, t=50, b=45), xaxis_title=tr("spec_decode.static.fig.step_x"),
                      yaxis_title=tr("spec_decode.static.fig.rows_y"))
    return fig
