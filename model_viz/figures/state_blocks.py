"""Figures and text of the "vLLM state blocks" page: :func:`hit_figure`, :func:`table_figure`,
:func:`retention_figure`, :func:`reuse_figure`, :func:`event_lines`.

What they draw comes from :mod:`model_viz.scenarios.state_blocks` (the run and its checks); the page
(``app_pages/state_blocks.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
import plotly.graph_objects as go
from ..scenarios import common as cs
from ..i18n import t
from kda_ref.utils import cdiv
from ..scenarios.state_blocks import BLOCK_SIZE, BlockRun, BlockStep, EVENT_OPS, HASH_UNIT, INTERVAL, RETENTIONS


PAGE_CONCEPTS = ("vllm.block_hash", "vllm.hybrid_hit", "vllm.state_block", "vllm.state_block.partial_hit",
                 "vllm.mamba_cache_mode", "vllm.retention")

# i18n keys, written out whole so a test can see which strings are used
REQUEST_TEXT = {"r0": "state_blocks.req.r0", "r1": "state_blocks.req.r1", "r2": "state_blocks.req.r2",
                "r3": "state_blocks.req.r3", "r4": "state_blocks.req.r4"}  # the canned requests' descriptions
MODE_LABEL = {"all": "state_blocks.mode.all", "align": "state_blocks.mode.align"}
MODE_HELP = {"all": "state_blocks.mode_help.all", "align": "state_blocks.mode_help.align"}
RETENTION_LABEL = {"dense": "state_blocks.ret.dense", "interval": "state_blocks.ret.interval",
                   "reachable": "state_blocks.ret.reachable"}
RETENTION_HELP = {"dense": "state_blocks.ret_help.dense", "interval": "state_blocks.ret_help.interval",
                  "reachable": "state_blocks.ret_help.reachable"}
SCAN_LEGEND = {"none": "state_blocks.leg.scan.none", "kv_only": "state_blocks.leg.scan.kv_only",
               "skipped": "state_blocks.leg.scan.skipped", "hit": "state_blocks.leg.scan.hit"}
SCAN_HOVER = {"none": "state_blocks.hover.scan.none", "kv_only": "state_blocks.hover.scan.kv_only",
              "skipped": "state_blocks.hover.scan.skipped", "hit": "state_blocks.hover.scan.hit"}
OP_LABEL = {"checkpoint_create": "state_blocks.op.checkpoint_create", "snapshot": "state_blocks.op.snapshot",
            "commit": "state_blocks.op.commit", "donate": "state_blocks.op.donate", "pending": "state_blocks.op.pending"}
EVENT_TEXT = {"match": "state_blocks.ev.match", "partial_hit": "state_blocks.ev.partial_hit",
              "copy_on_write": "state_blocks.ev.copy_on_write", "checkpoint_create": "state_blocks.ev.checkpoint_create",
              "snapshot": "state_blocks.ev.snapshot", "pending": "state_blocks.ev.pending",
              "commit": "state_blocks.ev.commit", "donate": "state_blocks.ev.donate", "evict": "state_blocks.ev.evict"}
COLORS = {"kv": "#1f77b4", "kv_miss": "#e5e5e5", "null": "#d9d9d9", "state": "#2ca02c", "partial": "#17becf",
          "compute": "#ff7f0e", "active": "#6a1b9a", "keep": "#2ca02c", "drop": "#bdbdbd", "reach": "#d62728",
          "pending": "#9467bd"}
OP_SYMBOLS = {"checkpoint_create": "diamond", "snapshot": "square", "commit": "triangle-up", "donate": "star"}


# ---- figures -------------------------------------------------------------------------------------------
def _xaxis(run_: BlockRun) -> dict:
    return dict(range=[-2, run_.x_max() + 2], title=t("state_blocks.axis.tokens"), fixedrange=True, dtick=BLOCK_SIZE,
                showgrid=True, gridcolor="#bbbbbb", griddash="dot", zeroline=False)


def _rect(row: str, start: float, length: float, color: str, name: str, hover: str, text: str = "",
          pattern: str = "", show: bool = True, line: str = "white") -> go.Bar:
    return go.Bar(y=[row], x=[length], base=[start], orientation="h", width=0.6, name=name, showlegend=show,
                  marker=dict(color=color, pattern_shape=pattern, line=dict(color=line, width=1)),
                  text=[text], textposition="inside", insidetextanchor="middle",
                  hovertemplate=hover + "<extra></extra>")


def _group(traces: list[go.Bar]) -> list[go.Bar]:
    """Show each legend name once."""
    seen = set()
    for tr in traces:
        tr.showlegend = bool(tr.name) and tr.name not in seen
        seen.add(tr.name)
        tr.legendgroup = tr.name
    return traces


def hit_figure(run_: BlockRun, i: int) -> go.Figure:
    """(b) The hash units of request ``i``'s prompt: the KV group's left-to-right match, the state
    group's right-to-left search, the fixed point."""
    s = run_.steps[i]
    kv_row, st_row = t("state_blocks.row.kv"), t("state_blocks.row.state")
    traces = []
    matched = s.rounds[0].kv
    for u in s.units:
        start = u["end"] - HASH_UNIT
        if u["end"] <= matched:
            color, name = COLORS["kv"], t("state_blocks.leg.kv_hit")
        elif u["kv"]:
            color, name = "#9ecae1", t("state_blocks.leg.kv_unreachable")
        else:
            color, name = COLORS["kv_miss"], t("state_blocks.leg.kv_miss")
        traces.append(_rect(kv_row, start, HASH_UNIT, color, name,
                            t("state_blocks.hover.unit", a=start, b=u["end"], idx=u["end"] // HASH_UNIT - 1), line="#666"))
    fig = go.Figure(_group(traces))
    kinds = {"none": ("circle-open", "#9e9e9e"), "kv_only": ("circle-open", "#1f77b4"),
             "skipped": ("x", COLORS["partial"]), "hit": ("star", COLORS["state"])}
    last = s.rounds[0]
    for kind, (symbol, color) in kinds.items():
        pts = [(b, n) for n, (b, k) in enumerate(last.scanned) if k == kind]
        fig.add_trace(go.Scatter(
            x=[b for b, _ in pts], y=[st_row] * len(pts), mode="markers+text", name=t(SCAN_LEGEND[kind]),
            text=[str(n + 1) for _, n in pts], textposition="top center",
            marker=dict(symbol=symbol, size=16 if kind == "hit" else 12, color=color, line=dict(width=2, color=color)),
            hovertemplate=cs.hover(SCAN_HOVER[kind]), customdata=[[n + 1] for _, n in pts]))
    states = [u["end"] for u in s.units if u["state"] is not None]
    fig.add_trace(go.Scatter(x=states, y=[kv_row] * len(states), mode="markers", name=t("state_blocks.leg.has_state"),
                             marker=dict(symbol="diamond", size=9, color=COLORS["state"],
                                         line=dict(color="#222", width=1)), hoverinfo="skip"))
    for x, color, dash, key, where in ((s.known, "#555", "dot", "state_blocks.vline.known", "bottom right"),
                                       (s.junction, COLORS["kv"], "dash", "state_blocks.vline.kv", "top right"),
                                       (s.hit, COLORS["state"], "solid", "state_blocks.vline.hit", "top left")):
        fig.add_vline(x=x, line=dict(color=color, dash=dash, width=2),
                      annotation=dict(text=t(key, n=x), font=dict(color=color, size=11)),
                      annotation_position=where)
    fig.update_layout(
        title=dict(text=t("state_blocks.hit.title", r=s.label, i=i + 1, n=len(run_.steps), kv=s.junction, hit=s.hit,
                          rounds=len(s.rounds))),
        barmode="overlay", height=300, margin=dict(l=10, r=10, t=70, b=40), plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.3, x=0), xaxis=_xaxis(run_),
        yaxis=dict(categoryorder="array", categoryarray=[st_row, kv_row], fixedrange=True))
    return fig


def table_figure(run_: BlockRun, i: int) -> go.Figure:
    """(a) + (c) Request ``i``'s logical state block table: null blocks, the one real state block of the
    hit, the copy-on-write into the running slot, the states saved during the request, and the states
    the cache holds on its path afterwards."""
    s = run_.steps[i]
    rows = {k: t(key) for k, key in (("table", "state_blocks.row.table"), ("active", "state_blocks.row.active"),
                                           ("saved", "state_blocks.row.saved"), ("after", "state_blocks.row.after"))}
    table = s.admit_table
    fig = go.Figure(_group(_table_bars(s, rows)))
    _saved_markers(fig, s, rows)
    if s.hit:  # copy-on-write: an arrow from the hit's state down to the running slot, its label to the left
        _cow_arrow(fig, s, rows)
    fig.update_layout(
        title=dict(text=t("state_blocks.table.title", r=s.label, nulls=sum(x is None for x in table),
                          real=sum(x is not None for x in table), saved=len(s.saved))),
        barmode="overlay", height=380, margin=dict(l=10, r=10, t=60, b=40), plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.22, x=0), xaxis=_xaxis(run_),
        yaxis=dict(categoryorder="array", categoryarray=[rows["after"], rows["saved"], rows["active"], rows["table"]],
                   fixedrange=True))
    return fig


def _table_bars(s: BlockStep, rows: dict) -> list[go.Bar]:
    """The table row (null, real and computed blocks) and the running slot's bar."""
    traces = []
    nblocks = cdiv(s.computed, BLOCK_SIZE)
    table = s.admit_table
    for b in range(nblocks):
        a, e = b * BLOCK_SIZE, min((b + 1) * BLOCK_SIZE, s.computed)
        if b < len(table) and table[b] is None:
            traces.append(_rect(rows["table"], a, e - a, COLORS["null"], t("state_blocks.leg.null"),
                                t("state_blocks.hover.null", b=b, a=a, e=e), text="null", pattern="/"))
        elif b < len(table):
            # the hit's real block: the state sits at the hit, maybe inside the block (partial)
            traces.append(_rect(rows["table"], a, s.hit - a, COLORS["partial"] if s.partial else COLORS["state"],
                                t("state_blocks.leg.real"), t("state_blocks.hover.real", b=b, slot=table[b], p=s.hit),
                                text=t("state_blocks.text.slot", slot=table[b])))
            if s.hit < e:
                traces.append(_rect(rows["table"], s.hit, e - s.hit, COLORS["compute"], t("state_blocks.leg.compute"),
                                    t("state_blocks.hover.compute", a=s.hit, e=e)))
        else:
            traces.append(_rect(rows["table"], a, e - a, COLORS["compute"], t("state_blocks.leg.compute"),
                                t("state_blocks.hover.compute", a=a, e=e), text=f"#{b}"))
    active_text = (t("state_blocks.text.active", slot=s.active_slot) if s.active_slot is not None
                   else t("state_blocks.text.fresh"))
    traces.append(_rect(rows["active"], s.hit, s.computed - s.hit, COLORS["active"], t("state_blocks.leg.active"),
                        t("state_blocks.hover.active", a=s.hit, e=s.computed), text=active_text))
    return traces


def _saved_markers(fig: go.Figure, s: BlockStep, rows: dict) -> None:
    """The engine steps' ends, the states saved during the request (and pending), the states held after it."""
    ends = sorted(set(s.step_ends))
    fig.add_trace(go.Scatter(x=ends, y=[rows["active"]] * len(ends), mode="markers", name=t("state_blocks.leg.step_end"),
                             marker=dict(symbol="line-ns", size=22, line=dict(width=3, color="#222")),
                             hovertemplate=cs.hover("state_blocks.hover.step_end")))
    for op, symbol in OP_SYMBOLS.items():
        pts = [sv for sv in s.saved if sv["op"] == op]
        fig.add_trace(go.Scatter(
            x=[sv["pos"] for sv in pts], y=[rows["saved"]] * len(pts), mode="markers+text",
            text=[str(sv["slot"]) for sv in pts], textposition="top center", name=t(OP_LABEL[op]),
            marker=dict(symbol=symbol, size=15, color=COLORS["partial"] if op == "commit" else COLORS["state"],
                        line=dict(color="#222", width=1)),
            customdata=[[t(OP_LABEL[op]), sv["slot"]] for sv in pts],
            hovertemplate=cs.hover("state_blocks.hover.saved")))
    fig.add_trace(go.Scatter(x=s.pending, y=[rows["saved"]] * len(s.pending), mode="markers",
                             name=t("state_blocks.op.pending"),
                             marker=dict(symbol="circle-open", size=14, color=COLORS["pending"], line=dict(width=2)),
                             hovertemplate=cs.hover("state_blocks.hover.pending")))
    held = [u for u in s.after if u["state"] is not None]
    fig.add_trace(go.Scatter(
        x=[u["end"] for u in held], y=[rows["after"]] * len(held), mode="markers+text",
        text=[str(u["state"]) for u in held], textposition="top center", name=t("state_blocks.leg.after"),
        marker=dict(symbol="diamond", size=13, line=dict(color="#222", width=1),
                    color=[COLORS["partial"] if u["end"] % BLOCK_SIZE else COLORS["state"] for u in held]),
        customdata=[[u["state"]] for u in held], hovertemplate=cs.hover("state_blocks.hover.after")))


def _cow_arrow(fig: go.Figure, s: BlockStep, rows: dict) -> None:
    """The copy-on-write arrow from the hit's state in the table down to the running slot, with its label."""
    fig.add_annotation(x=s.hit, y=rows["active"], ax=s.hit, ay=rows["table"], xref="x", yref="y", axref="x",
                       ayref="y", showarrow=True, arrowhead=3, arrowsize=1.4, arrowwidth=2,
                       arrowcolor=COLORS["active"], text="")
    fig.add_annotation(x=s.hit, y=rows["active"], xref="x", yref="y", showarrow=False, xanchor="right", xshift=-8,
                       text=t("state_blocks.text.cow", src=s.hit_slot, dst=s.active_slot),
                       font=dict(color=COLORS["active"], size=12), bgcolor="rgba(255,255,255,0.85)")


def retention_figure(run_: BlockRun, i: int) -> go.Figure:
    """(d) Which of request ``i``'s block boundaries each retention keeps (``retention_mask`` with the
    request's reachable boundaries), what the mode produced, and what the run saved."""
    s = run_.steps[i]
    bs = s.boundaries()
    masks = run_.masks(i)
    names = {r: t(RETENTION_LABEL[r], N=INTERVAL) for r in RETENTIONS}
    rows = {r: ("▶ " if r == run_.retention else "") + names[r] for r in RETENTIONS}
    mode_row = t("state_blocks.row.offered", mode=run_.mode)
    saved_row = t("state_blocks.row.saved_here")
    fig = go.Figure()
    _keep_drop_rows(fig, run_, bs, masks, rows)
    reach = [b for b in s.reachable() if b % BLOCK_SIZE == 0 and b in bs]
    fig.add_trace(go.Scatter(x=reach, y=[rows["reachable"]] * len(reach), mode="markers", name=t("state_blocks.leg.reach"),
                             marker=dict(symbol="circle-open", size=24, color=COLORS["reach"], line=dict(width=2)),
                             hoverinfo="skip"))
    offered = run_.offered(i)
    fig.add_trace(go.Scatter(x=offered, y=[mode_row] * len(offered), mode="markers", name=t("state_blocks.leg.offered"),
                             marker=dict(symbol="square-open", size=14, color="#222", line=dict(width=2)),
                             hoverinfo="skip"))
    sv = [x["pos"] for x in s.saved]
    fig.add_trace(go.Scatter(x=sv, y=[saved_row] * len(sv), mode="markers", name=t("state_blocks.leg.saved"),
                             marker=dict(symbol="diamond", size=14, line=dict(color="#222", width=1),
                                         color=[COLORS["partial"] if p % BLOCK_SIZE else COLORS["state"] for p in sv]),
                             customdata=[[t(OP_LABEL[x["op"]]), x["slot"]] for x in s.saved],
                             hovertemplate=cs.hover("state_blocks.hover.saved")))
    fig.add_trace(go.Scatter(x=s.pending, y=[saved_row] * len(s.pending), mode="markers", name=t("state_blocks.op.pending"),
                             marker=dict(symbol="circle-open", size=14, color=COLORS["pending"], line=dict(width=2)),
                             hoverinfo="skip"))
    _hit_and_end_lines(fig, s)
    order = [saved_row, mode_row] + [rows[r] for r in reversed(RETENTIONS)]
    # every row named even when no row has a point (an exact repeat: nothing past its hit)
    fig.add_trace(go.Scatter(x=[None] * len(order), y=order, mode="markers", showlegend=False, hoverinfo="skip"))
    if not bs:
        fig.add_annotation(x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                           text=t("state_blocks.ret.none"), bgcolor="white")
    kept = [b for b, m in zip(bs, masks[run_.retention]) if m]
    fig.update_layout(
        title=dict(text=t("state_blocks.ret.title", r=s.label, name=names[run_.retention],
                          kept=", ".join(map(str, kept)) or "—", bs=", ".join(map(str, bs)) or "—",
                          saved=", ".join(map(str, sv)) or "—")),
        height=340, margin=dict(l=10, r=10, t=60, b=40), plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.25, x=0), xaxis=_xaxis(run_),
        yaxis=dict(type="category", categoryorder="array", categoryarray=order, fixedrange=True))
    return fig


def _keep_drop_rows(fig: go.Figure, run_: BlockRun, bs: list[int], masks: dict, rows: dict) -> None:
    """One row per retention: the boundaries it keeps and drops (the run's own retention drawn opaque)."""
    for r in RETENTIONS:
        keep = [b for b, m in zip(bs, masks[r]) if m]
        drop = [b for b, m in zip(bs, masks[r]) if not m]
        op = 1.0 if r == run_.retention else 0.35
        fig.add_trace(go.Scatter(x=keep, y=[rows[r]] * len(keep), mode="markers", name=t("state_blocks.leg.keep"),
                                 legendgroup="keep", showlegend=r == RETENTIONS[0], opacity=op,
                                 marker=dict(symbol="circle", size=15, color=COLORS["keep"],
                                             line=dict(color="#222", width=1)),
                                 hovertemplate=cs.hover("state_blocks.hover.keep")))
        fig.add_trace(go.Scatter(x=drop, y=[rows[r]] * len(drop), mode="markers", name=t("state_blocks.leg.drop"),
                                 legendgroup="drop", showlegend=r == RETENTIONS[0], opacity=op,
                                 marker=dict(symbol="x", size=12, color=COLORS["drop"]),
                                 hovertemplate=cs.hover("state_blocks.hover.drop")))


def _hit_and_end_lines(fig: go.Figure, s: BlockStep) -> None:
    """The vertical lines at the request's hit and at the end of what it computed."""
    fig.add_vline(x=s.hit, line=dict(color=COLORS["state"], width=2),
                  annotation=dict(text=t("state_blocks.vline.hit", n=s.hit), font=dict(color=COLORS["state"], size=11)))
    fig.add_vline(x=s.computed, line=dict(color="#555", dash="dot", width=1.5),
                  annotation=dict(text=t("state_blocks.vline.end", n=s.computed), font=dict(size=11)),
                  annotation_position="bottom right")


def reuse_figure(run_: BlockRun, i: int) -> go.Figure:
    """Per request: prompt tokens reused (block-aligned or partial) vs computed; states cached after it."""
    steps = run_.steps
    labels = [s.label for s in steps]
    op = [1.0 if k == i else 0.35 for k in range(len(steps))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[s.hit for s in steps], name=t("state_blocks.bar.reused"),
                         marker=dict(color=[COLORS["partial"] if s.partial else COLORS["state"] for s in steps],
                                     opacity=op)))
    fig.add_trace(go.Bar(x=labels, y=[len(s.prompt) - s.hit for s in steps], name=t("state_blocks.bar.computed"),
                         marker=dict(color=COLORS["compute"], opacity=op, pattern_shape="/")))
    fig.add_trace(go.Scatter(x=labels, y=[s.cached_states for s in steps], name=t("state_blocks.bar.states"),
                             mode="lines+markers", yaxis="y2", line=dict(color=COLORS["active"]),
                             marker=dict(size=[14 if k == i else 8 for k in range(len(steps))])))
    top = max(len(s.prompt) for s in steps)
    s = steps[i]
    fig.update_layout(
        title=dict(text=t("state_blocks.bar.title", r=s.label, reused=s.hit, computed=len(s.prompt) - s.hit)),
        barmode="stack", height=300, margin=dict(l=10, r=10, t=60, b=30), legend=dict(orientation="h", y=-0.2, x=0),
        yaxis=dict(range=[0, top * 1.1], title=t("state_blocks.bar.tokens"), fixedrange=True),
        yaxis2=dict(range=[0, 24], dtick=4, overlaying="y", side="right", title=t("state_blocks.bar.states"),
                    fixedrange=True, showgrid=False),
        xaxis=dict(fixedrange=True))
    return fig


def event_lines(step: BlockStep) -> list[str]:
    """The cache events of the request's engine steps as sentences, in order."""
    lines = []
    for e in step.events:
        if e["op"] not in EVENT_OPS:
            continue
        d = e["detail"]
        fmt = {"r": "—" if e["req_id"] is None else f"r{e['req_id']}",
               "pos": "—" if e["position"] is None else e["position"],
               "kv": d.get("kv_len", "—"), "st": d.get("state_len", "—"), "rounds": d.get("rounds", "—"),
               "ckpt": d.get("checkpoint", "—"), "active": d.get("active", "—"), "mode": d.get("mode", "—"),
               "policy": d.get("policy", "—"), "step": e["step"], "concept": e["concept"]}
        lines.append(t(EVENT_TEXT[e["op"]], **fmt))
    return lines
