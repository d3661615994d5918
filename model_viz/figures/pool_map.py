"""Figures and text of the "memory pool map" page: :func:`unit_bytes`, :func:`budget_of`,
:func:`used_series`, :func:`unit_counts`, :func:`owners_at`, :func:`preemption_steps`,
:func:`pool_area_figure`, :func:`strip_segments`, :func:`budget_strip_figure`,
:func:`unit_map_figure`, :func:`step_events`, :func:`demand_figure`.

What they draw comes from :mod:`model_viz.scenarios.pool_map` (the run and its checks); the page
(``app_pages/pool_map.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
import math
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from ..scenarios.engine_trace import StepView, req_color
from . import frame
from ..i18n import t as tr


PAGE_CONCEPTS = ("memory.unified_pool", "memory.page_kind", "memory.state_slot", "state.mla_kv",
                 "engine.preemption", "model.k3")
KIND_ORDER = ("kda_state", "checkpoint", "mla_kv")
KIND_COLORS = {"kda_state": "#1f77b4", "checkpoint": "#9467bd", "mla_kv": "#d62728"}
FREE_COLOR = "#eceff3"

# i18n keys, written out whole so a test can see which strings are used
KIND_LABEL = {"kda_state": "pool_map.kind.kda_state", "checkpoint": "pool_map.kind.checkpoint",
              "mla_kv": "pool_map.kind.mla_kv"}
KIND_SHORT = {"kda_state": "pool_map.kind.short.kda_state", "checkpoint": "pool_map.kind.short.checkpoint",
              "mla_kv": "pool_map.kind.short.mla_kv"}
SLOT_EVENT = {"alloc": "pool_map.ev.slot_alloc", "free": "pool_map.ev.slot_free"}
PAGE_EVENT = {"alloc": "pool_map.ev.page_alloc", "free": "pool_map.ev.page_free"}
PAGES_PER_ROW = 16


def unit_bytes(header: dict, views: list[StepView]) -> dict[str, int]:
    """Bytes of one unit per kind: from the header when it says (``checkpoint_unit_bytes`` for a
    compressed checkpoint, else a checkpoint is a state), else from the snapshots (used bytes / units
    in use); a kind never used gets 0."""
    out = {}
    hdr = {"mla_kv": header.get("kv_page_bytes"), "kda_state": header.get("state_bytes"),
           "checkpoint": header.get("checkpoint_unit_bytes", header.get("state_bytes"))}
    for kind in KIND_ORDER:
        if type(hdr[kind]) is int and hdr[kind] > 0:
            out[kind] = hdr[kind]
            continue
        out[kind] = 0
        for v in views:
            owned = v.owners(kind) if v.pool else {}
            if owned:
                out[kind] = v.pool.used_bytes.get(kind, 0) // len(owned)
                break
    return out


def budget_of(views: list[StepView]) -> int:
    """The pool's byte budget (``capacity_bytes["total"]`` of the snapshots; the peak use if absent)."""
    for v in views:
        if v.pool and v.pool.capacity_bytes.get("total"):
            return v.pool.capacity_bytes["total"]
    return max((v.pool.used_bytes.get("total", 0) for v in views if v.pool), default=1) or 1


def used_series(views: list[StepView]) -> dict[str, list[int]]:
    """Used bytes by kind at the end of every step (0 where a step has no snapshot)."""
    return {k: [v.pool.used_bytes.get(k, 0) if v.pool else 0 for v in views] for k in KIND_ORDER}


def unit_counts(views: list[StepView]) -> dict[str, int]:
    """How many unit ids of each kind the map shows: the largest id used anywhere in the trace."""
    out = {k: 0 for k in KIND_ORDER}
    if views and views[0].pool_owners is not None:
        out.update({k: n for k, n in views[0].pool_owners.max_unit.items() if k in out})
    return out


def owners_at(view: StepView, kind: str) -> dict[int, object]:
    """``{unit: owner}`` of ``kind`` at the end of ``view``'s step (rebuilt from the trace's snapshots)."""
    return view.owners(kind)


def preemption_steps(views: list[StepView]) -> list[tuple[int, int]]:
    """``(step, req_id)`` for every preemption in the trace."""
    return [(v.step, p.req_id) for v in views for p in v.preemptions]


def pool_area_figure(views: list[StepView], current: int) -> go.Figure:
    """Stacked used bytes by kind over steps (KiB); preemptions as red lines. The y axis follows the
    largest use of the trace (fixed while stepping), the budget a dashed line on it when it is near, else
    named above the plot (1 MiB used of a 64 MiB budget is not a flat line)."""
    xs = [v.step for v in views]
    budget = budget_of(views)
    fig = go.Figure()
    # each step's value spans [step - 0.5, step + 0.5], like the highlight: x shifted, last value repeated
    xe = [x - 0.5 for x in xs] + [xs[-1] + 0.5]
    series = used_series(views)
    for kind, ys in series.items():
        fig.add_trace(go.Scatter(
            x=xe, y=[y / 1024 for y in ys + ys[-1:]], mode="lines", stackgroup="used",
            name=tr(KIND_LABEL[kind]),
            line=dict(color=KIND_COLORS[kind], width=0.5, shape="hv"), fillcolor=KIND_COLORS[kind],
            hovertemplate=f"%{{y:.1f}} KiB<extra>{kind}</extra>",
        ))
    peak = max(map(sum, zip(*series.values())), default=0) / 1024
    kib = f"{budget / 1024:,.0f}"
    top = frame.limit_axis(fig, peak, budget / 1024, tr("pool_map.fig.budget", kib=kib),
                           tr("common.fig.limit_above", n=f"{kib} KiB"), pad=1.12)
    for step, rid in preemption_steps(views):
        fig.add_vline(x=step, line=dict(color="#b00020", width=2))
        fig.add_annotation(x=step, y=top * 1.1, text=tr("pool_map.fig.preempted", req=rid),
                           showarrow=False, font=dict(color="#b00020", size=12), yanchor="top")
    cur = views[current].step
    fig.add_vrect(x0=cur - 0.5, x1=cur + 0.5, fillcolor="rgba(255,210,77,0.15)", layer="above",
                  line=dict(color="#b38f00", width=2))
    fig.update_xaxes(range=[xs[0] - 0.5, xs[-1] + 0.5], title_text=tr("pool_map.fig.step"),
                     dtick=frame.step_dtick(xs[-1] - xs[0]))
    fig.update_yaxes(title_text="KiB")
    fig.update_layout(
        title=dict(text=tr("pool_map.fig.area.title", step=cur), x=0.0, font=dict(size=15)),
        height=340, margin=dict(l=60, r=20, t=60, b=45), hovermode="closest", uirevision="pool-area",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0),
    )
    return fig


def strip_segments(view: StepView, sizes: dict[str, int], budget: int) -> list[dict]:
    """The accounting strip at one step: ``{kind, unit, last_unit, units, owner, start, bytes}`` per run of
    units of one kind and one owner lying side by side (in unit order; ``unit`` the run's first,
    ``last_unit`` its last, ``units`` how many), state-like kinds packed from 0 upwards, KV pages from
    ``budget`` downwards. Runs, not a segment per unit, so the strip's cost follows the owners, not the
    pool's size (``docs/benchmarks.md#the-live-page-after-a-long-run-2026-12-06``)."""
    segs, left = [], 0
    for kind in ("kda_state", "checkpoint"):
        for unit, owner in sorted(owners_at(view, kind).items()):
            _add_unit(segs, kind, unit, owner, left, sizes[kind])
            left += sizes[kind]
    right = budget
    for unit, owner in sorted(owners_at(view, "mla_kv").items()):
        right -= sizes["mla_kv"]
        _add_unit(segs, "mla_kv", unit, owner, right, sizes["mla_kv"])
    return segs


def _add_unit(segs: list[dict], kind: str, unit: int, owner, start: int, size: int) -> None:
    """``unit`` at ``start`` onto the last run when it is of the same kind and owner, else a new run (a KV
    run grows downwards: its start moves to the new unit's)."""
    last = segs[-1] if segs else None
    if last is not None and last["kind"] == kind and last["owner"] == owner:
        last.update(last_unit=unit, units=last["units"] + 1, start=min(last["start"], start),
                    bytes=last["bytes"] + size)
        return
    segs.append({"kind": kind, "unit": unit, "last_unit": unit, "units": 1, "owner": owner, "start": start,
                 "bytes": size})


def _run_name(seg: dict) -> str:
    """``"7"`` for one unit, ``"3-900 (450)"`` for a run of them."""
    return str(seg["unit"]) if seg["units"] == 1 else f"{seg['unit']}-{seg['last_unit']} ({seg['units']})"


def budget_strip_figure(view: StepView, sizes: dict[str, int], budget: int) -> go.Figure:
    """One bar as wide as the budget (KiB): every run of units (:func:`strip_segments`) a segment of its
    size, coloured by owner. One bar trace per page kind, its runs as the points (a step holding thousands
    of KV pages is still four traces of a few points, not one per unit)."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[budget / 1024], base=[0], y=[""], orientation="h", marker=dict(color=FREE_COLOR),
                         showlegend=False, hoverinfo="skip"))
    by_kind: dict[str, list[dict]] = {}
    for seg in strip_segments(view, sizes, budget):
        by_kind.setdefault(seg["kind"], []).append(seg)
    for kind, segs in by_kind.items():
        labels = [f"r{s['owner']}" if isinstance(s["owner"], int) else str(s["owner"]) for s in segs]
        fig.add_trace(go.Bar(
            x=[s["bytes"] / 1024 for s in segs], base=[s["start"] / 1024 for s in segs], y=[""] * len(segs),
            orientation="h", showlegend=False,
            marker=dict(color=[req_color(s["owner"]) for s in segs], line=dict(color=KIND_COLORS[kind], width=2),
                        pattern=dict(shape="" if kind != "mla_kv" else "|", fgcolor="white", fillmode="overlay")),
            text=[f"{lb} · {tr(KIND_SHORT[kind])} {_run_name(s)}" if kind != "mla_kv" else ""
                  for lb, s in zip(labels, segs)],
            textposition="inside", insidetextanchor="middle", textfont=dict(color="white"),
            customdata=[[_run_name(s), lb, s["bytes"]] for lb, s in zip(labels, segs)],
            hovertemplate=f"{kind} %{{customdata[0]}} · %{{customdata[1]}}<br>%{{customdata[2]}} B<extra></extra>",
        ))
    fig.update_xaxes(range=[0, budget / 1024], title_text=tr("pool_map.fig.strip.x"))
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(
        title=dict(text=tr("pool_map.fig.strip.title", step=view.step), x=0.0, font=dict(size=15)),
        barmode="overlay", height=190, margin=dict(l=20, r=20, t=60, b=45), uirevision="pool-strip",
    )
    return fig


def unit_map_figure(view: StepView, counts: dict[str, int]) -> go.Figure:
    """Squares for state slots 1..n (top) and KV pages 1..m (below, rows of 16), coloured by owner."""
    n_slots = max(counts.get("kda_state", 0), 1)
    n_pages = max(counts.get("mla_kv", 0), 1)
    page_rows = math.ceil(n_pages / PAGES_PER_ROW)
    fig = make_subplots(rows=2, cols=1, row_heights=[1, page_rows], vertical_spacing=0.18,
                        subplot_titles=[tr("pool_map.fig.map.slots"), tr("pool_map.fig.map.pages")])
    for row, kind, n, per_row in ((1, "kda_state", n_slots, max(n_slots, PAGES_PER_ROW)),
                                  (2, "mla_kv", n_pages, PAGES_PER_ROW)):
        own = owners_at(view, kind)
        xs, ys, colors, text, hover = [], [], [], [], []
        for u in range(1, n + 1):
            xs.append((u - 1) % per_row)
            ys.append((u - 1) // per_row)
            o = own.get(u)
            colors.append(req_color(o) if o is not None else FREE_COLOR)
            text.append(f"r{o}" if isinstance(o, int) else ("" if o is None else str(o)))
            hover.append(f"{kind} {u}: " + (f"r{o}" if o is not None else "free"))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers+text", marker=dict(symbol="square", size=30, color=colors,
                                                         line=dict(color="#9aa0a6", width=1)),
            text=text, textfont=dict(color="white", size=11), hovertext=hover, hoverinfo="text", showlegend=False,
        ), row=row, col=1)
        rows = math.ceil(n / per_row)
        fig.update_xaxes(range=[-0.6, per_row - 0.4], showticklabels=False, showgrid=False, zeroline=False,
                         row=row, col=1)
        fig.update_yaxes(range=[rows - 0.4, -0.6], showticklabels=False, showgrid=False, zeroline=False,
                         row=row, col=1)
    fig.update_layout(
        title=dict(text=tr("pool_map.fig.map.title", step=view.step), x=0.0, font=dict(size=15)),
        height=150 + 42 * (1 + page_rows), margin=dict(l=20, r=20, t=80, b=20), uirevision="pool-map",
        plot_bgcolor="white",
    )
    return fig


def step_events(view: StepView) -> list[str]:
    """Markdown lines for the memory events of one step, in order."""
    lines = []
    for p in view.preemptions:
        lines.append(tr("pool_map.ev.preempt", req=p.req_id, pages=p.freed_pages, slots=p.freed_slots))
    for e in view.slots:
        who = ", ".join(f"r{r}" for r in e.req_ids) or "—"
        lines.append(tr(SLOT_EVENT[e.op], slots=", ".join(map(str, e.slots)), reqs=who))
    for e in view.kv_pages:
        who = f"r{e.req_id}" if e.req_id is not None else "—"
        lines.append(tr(PAGE_EVENT[e.op], pages=", ".join(map(str, e.pages)), req=who))
    for f in view.finished:
        lines.append(tr("pool_map.ev.finished", req=f.req_id))
    for e in view.refused:
        if hasattr(e, "need_bytes"):  # AdmissionRefused: its peak against the budget
            lines.append(tr("pool_map.ev.refused", req=e.req_id, need=f"{e.need_bytes / 1024:,.1f}",
                            budget=f"{e.budget_bytes / 1024:,.1f}", free=f"{e.free_bytes / 1024:,.1f}"))
        else:  # EngineStall
            lines.append(tr("pool_map.ev.stall", reqs=", ".join(f"r{r}" for r in e.req_ids), n=e.idle_steps))
    return lines


def demand_figure(budget: int, rows: list[dict]) -> go.Figure:
    """One bar per setting of :func:`model_viz.scenarios.pool_map.demand_rows`: what one request holds at
    its peak, a segment per part coloured by page kind, against the budget (dashed): a bar past it is a
    request the engine refuses when it is queued, or an engine refused when it is built."""
    fig = go.Figure()
    labels = [tr(r["label"]) for r in rows]
    shown = set()
    for j, r in enumerate(rows):
        for what, kind, nbytes in r["parts"]:
            fig.add_trace(go.Bar(y=[labels[j]], x=[nbytes / 1024], orientation="h", name=tr(KIND_LABEL[kind]),
                                 marker_color=KIND_COLORS[kind], legendgroup=kind, showlegend=kind not in shown,
                                 hovertemplate=f"{what}: %{{x:,.1f}} KiB<extra></extra>"))
            shown.add(kind)
        if not r["fits"]:
            fig.add_annotation(y=labels[j], x=r["bytes"] / 1024, text=tr("pool_map.demand.refused"),
                               showarrow=False, xanchor="left", font=dict(color="#d62728"))
    fig.add_vline(x=budget / 1024, line_dash="dash", line_color="#333",
                  annotation_text=tr("pool_map.demand.budget", kib=f"{budget / 1024:,.0f}"))
    # the legend in the figure's bottom strip, under the axis title whatever the number of bars
    fig.update_layout(barmode="stack", height=100 + 45 * len(rows), margin=dict(l=10, r=80, t=40, b=70),
                      xaxis_title=tr("pool_map.demand.x"), yaxis=dict(autorange="reversed"),
                      legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom"))
    return fig
