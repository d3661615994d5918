"""Figures of the hybrid execution chain (``docs/article.md#s1-1``), from the :class:`~model_viz.scenarios.engine_trace.StepView`
of each engine step.

* :func:`batch_figure` — the packed varlen batch of one step, one segment per sequence (``cu_seqlens``);
* :func:`kernel_grid_figure` — layers x phases: which kernel every layer ran (``kernel_dispatch`` events);
* :func:`timeline_figure` — tokens per step, stacked by request, over the whole trace.

Axes are fixed for a whole trace, so stepping changes the data, not the frame.
Design notes: ``docs/visualizer.md#the-execution-chain-figures``.
"""

from __future__ import annotations
import plotly.graph_objects as go
from ..scenarios.engine_trace import StepView, req_color
from . import frame
from ..i18n import plural, t as tr


PAGE_CONCEPTS = ("chain.hybrid", "engine.continuous_batching", "engine.chunked_prefill", "varlen.metadata",
                 "sglang.kda_dispatcher", "state.mla_kv", "model.attn_res")
PHASES = ("extend", "decode", "verify")  # BatchComposition.phases: a prefill chunk, one decode token, 1 + k verified
PHASE_PATTERN = {"extend": "", "decode": "/", "verify": "x"}

# cell codes of the kernel grid -> colour
IDLE, CHUNK, RECURRENT, MLA_NAIVE, MLA_ABSORBED = 0, 1, 2, 3, 4
GRID_COLORS = ("#eef1f5", "#4e79a7", "#f28e2b", "#76b7b2", "#edc948")
# the MLA kernel of each phase (kda_ref.model.mla_layer.MLAAttention): expand-then-attend for a prefill chunk,
# the absorbed form for one decode query; a verify's 1 + k queries per sequence run the absorbed form in the
# fused verify step (MLAAttention.decode, plan.tokens = 1 + k) when the step is verifies only, else expand
MLA_KERNELS = {"extend": "mla_attention_naive", "decode": "mla_attention_absorbed", "verify": "mla_attention_absorbed"}
SMALL_BATCH = 8  # a batch under 1/SMALL_BATCH of the trace's axis is drawn on its own scale
GRID_LINE_CHARS = 14  # a kernel name in a grid cell is broken after an underscore to lines of at most this many
GRID_FONT_PX = 12  # characters: at 12 px a line is ~100 px, inside a cell of the Lab's half-width grid


def token_axis_max(views: list[StepView]) -> int:
    """The x range of the batch bar and the y range of the timeline: the largest of the token
    budget and the largest batch of the trace."""
    m = 1
    for v in views:
        m = max(m, v.batch.num_tokens, v.decision.token_budget if v.decision else 0)
    return m


MIXED_POLICIES = ("chunk", "split")  # LLM(mixed_batch=...): how a step with decodes and prefill chunks runs

# i18n keys, written out whole so a test can see which strings are used
MIXED_LABEL = {"chunk": "hybrid_chain.mixed.chunk", "split": "hybrid_chain.mixed.split"}
PHASE_LABEL = {"extend": "hybrid_chain.phase.extend", "decode": "hybrid_chain.phase.decode",
               "verify": "hybrid_chain.phase.verify"}
COLUMN_LABEL = {"req": "hybrid_chain.col.req", "phase": "hybrid_chain.col.phase",
                "new_tokens": "hybrid_chain.col.new_tokens", "context_len": "hybrid_chain.col.context_len",
                "range": "hybrid_chain.col.range", "state_slot": "hybrid_chain.col.state_slot",
                "kv_pages": "hybrid_chain.col.kv_pages"}


def _phase_label(phase: str) -> str:
    return tr(PHASE_LABEL[phase]) if phase in PHASE_LABEL else phase  # a phase of a newer trace: its name


def trace_phases(views: list[StepView]) -> tuple[str, ...]:
    """The phase columns of a whole trace (the kernel grid, the timeline's legend): extend and decode,
    and verify when any step verified drafts -- fixed for the trace, so stepping keeps the frame."""
    seen = {p for v in views for p in v.batch.phases}
    return PHASES[:2] + tuple(p for p in PHASES[2:] if p in seen) + tuple(sorted(seen - set(PHASES)))


def segment_text(view: StepView, n: int) -> str:
    """Sequence ``n``'s label in the batch bar: ``r0 · extend · 12``, or for a verify
    ``r0 · verify · 1 + 3 · 2 kept`` (the last committed token, the drafts, the drafts kept)."""
    b = view.batch
    rid, phase, L = b.req_ids[n], b.phases[n], b.cu_seqlens[n + 1] - b.cu_seqlens[n]
    ver = view.verify_of(rid) if phase == "verify" else None
    if ver is None:
        return f"r{rid} · {_phase_label(phase)} · {L}"
    return tr("hybrid_chain.fig.verify_segment", req=rid, phase=_phase_label(phase),
              drafts=len(ver.drafts), kept=min(ver.kept - 1, ver.num_accepted))


def batch_rows(view: StepView) -> list[dict]:
    """The batch as table rows (language-neutral keys): one per sequence, in batch order."""
    b = view.batch
    rows = []
    for n, rid in enumerate(b.req_ids):
        rows.append({
            "req": rid, "phase": b.phases[n], "new_tokens": b.cu_seqlens[n + 1] - b.cu_seqlens[n],
            "context_len": b.context_lens[n], "range": f"{b.cu_seqlens[n]}:{b.cu_seqlens[n + 1]}",
            "state_slot": b.state_indices[n],
            "kv_pages": _pages_cell(b, n),
        })
    return rows


def _pages_cell(b, n: int) -> str:
    """Sequence ``n``'s block table as text: its pages, or ``(count) …`` and the last ones when the event
    carries only the table's tail (:data:`kda_ref.trace.BLOCK_TABLE_TAIL`)."""
    if b.block_tables is None:
        return ""
    pages = " ".join(map(str, b.block_tables[n]))
    total = None if b.num_pages is None else b.num_pages[n]
    return pages if total is None or total == len(b.block_tables[n]) else f"({total}) \u2026 {pages}"


def batch_figure(view: StepView, x_max: int) -> go.Figure:
    """One horizontal bar of the packed batch: segment n spans ``cu_seqlens[n]:cu_seqlens[n+1]``."""
    b = view.batch
    fig = go.Figure()
    for n, rid in enumerate(b.req_ids):
        s, e = b.cu_seqlens[n], b.cu_seqlens[n + 1]
        phase = b.phases[n]
        fig.add_trace(go.Bar(
            x=[e - s], base=[s], y=[""], orientation="h", name=f"r{rid}", showlegend=False,
            marker=dict(color=req_color(rid), line=dict(color="white", width=2),
                        pattern=dict(shape=PHASE_PATTERN.get(phase, ""), fgcolor="white", fillmode="overlay")),
            text=[segment_text(view, n)], textposition="inside", insidetextanchor="middle",
            textfont=dict(color="white", size=13), constraintext="none",
            hovertemplate=(f"r{rid} ({phase})<br>cu_seqlens[{n}]={s} .. cu_seqlens[{n + 1}]={e}<br>"
                           f"context_len={b.context_lens[n]}, slot={b.state_indices[n]}<extra></extra>"),
        ))
    title = _batch_title(view)
    two_lines = "<br>" in title
    budget = view.decision.token_budget if view.decision else None
    own_scale = b.num_tokens * SMALL_BATCH < x_max  # a small batch: its own axis, the budget named at the edge
    top = b.num_tokens if own_scale else x_max
    if budget and not own_scale:
        fig.add_vline(x=budget, line=dict(color="#444", dash="dash", width=1.5))
    if budget:
        fig.add_annotation(x=min(budget, top + 0.5), y=1.0, yref="paper", showarrow=False, xanchor="right",
                           yanchor="bottom", font=dict(size=11),
                           text=tr("hybrid_chain.fig.budget_off" if own_scale else "hybrid_chain.fig.budget", n=budget))
    fig.update_xaxes(range=[0, top + 0.5], tickmode="array", tickvals=list(b.cu_seqlens),
                     title_text=tr("hybrid_chain.fig.batch.x"), showgrid=False)
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(
        title=dict(text=title, x=0.0, font=dict(size=15)),
        barmode="overlay", height=190 + 16 * two_lines, margin=dict(l=20, r=20, t=60 + 16 * two_lines, b=45),
        uirevision="chain-batch",
    )
    return fig


def _batch_title(view: StepView) -> str:
    """The batch bar's title: the step and its ``cu_seqlens``, and the sequences that ran in a forward of
    their own (a draft tree's root and nodes, :attr:`kda_ref.trace.BatchComposition.own_forwards`)."""
    b = view.batch
    text = tr("hybrid_chain.fig.batch.title", step=view.step, cu=list(b.cu_seqlens))
    own = b.own_forwards or []
    if own:  # a second, smaller line: a half-width chart clips a long title
        note = tr("hybrid_chain.fig.batch.own_forwards", reqs=", ".join(f"r{b.req_ids[n]}" for n in own))
        text += f"<br><span style='font-size:12px'>{note}</span>"
    return text


def grid_cells(view: StepView, kda_layers: list[int], mla_layers: list[int],
               phases: tuple[str, ...] | None = None) -> list[dict]:
    """One dict per (layer, phase): ``layer``, ``kind`` (KDA / MLA), ``phase``, ``code``, ``kernel``,
    ``num_seqs``, ``num_tokens``; rows in layer order, the phases in ``phases`` order (default: this
    step's, :func:`trace_phases`)."""
    b = view.batch
    phases = phases or trace_phases([view])
    seqs = {p: [n for n, ph in enumerate(b.phases) if ph == p] for p in phases}
    toks = {p: sum(b.cu_seqlens[n + 1] - b.cu_seqlens[n] for n in seqs[p]) for p in phases}
    mla = {p: MLA_KERNELS.get(p, "mla_attention_naive") for p in phases}
    # a trace written before BatchComposition.own_forwards holds a draft tree's root alone in the batch: every
    # layer ran the KDA layers' verify tokens (in other phases the chunk kernel may take a mixed step's
    # decodes too, which MLA runs apart)
    d = view.dispatch(kda_layers[0], "verify") if kda_layers and "verify" in phases else None
    if d is not None and d.num_tokens > toks["verify"]:
        seqs["verify"], toks["verify"] = list(range(d.num_seqs)), d.num_tokens
    if "verify" in mla and set(b.phases) != {"verify"}:  # verifies mixed with other work: the expand form
        mla["verify"] = "mla_attention_naive"
    cells = []
    for layer in sorted(set(kda_layers) | set(mla_layers)):
        kind = "MLA" if layer in mla_layers else "KDA"
        for p in phases:
            cell = {"layer": layer, "kind": kind, "phase": p, "code": IDLE, "kernel": "", "num_seqs": 0,
                    "num_tokens": 0}
            if kind == "KDA":
                d = view.dispatch(layer, p)
                if d is not None:
                    cell.update(code=CHUNK if d.kernel.startswith("chunk") else RECURRENT, kernel=d.kernel,
                                num_seqs=d.num_seqs, num_tokens=d.num_tokens, backend=d.backend)
            elif seqs[p]:
                cell.update(code=MLA_ABSORBED if mla[p] == "mla_attention_absorbed" else MLA_NAIVE, kernel=mla[p],
                            num_seqs=len(seqs[p]), num_tokens=toks[p])
            cells.append(cell)
    return cells


def wrap_kernel(name: str, width: int = GRID_LINE_CHARS) -> list[str]:
    """``name`` in lines of at most ``width`` characters, broken after underscores (``mla_attention_`` /
    ``naive``); a part longer than ``width`` keeps a line of its own. Joined, the lines are ``name``."""
    lines: list[str] = []
    for part in name.replace("_", "_\0").split("\0"):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return [ln for ln in lines if ln] or [""]


def kernel_grid_figure(view: StepView, kda_layers: list[int], mla_layers: list[int], *,
                       phases: tuple[str, ...] | None = None) -> go.Figure:
    """Layers (rows, input at the top) x phases (columns; pass :func:`trace_phases` of the whole trace
    to keep them fixed while stepping): the kernel each layer ran in this step."""
    phases = phases or trace_phases([view])
    cells = grid_cells(view, kda_layers, mla_layers, phases)
    layers = sorted({c["layer"] for c in cells})
    ylab = [tr("hybrid_chain.fig.layer", layer=layer, kind="MLA" if layer in mla_layers else "KDA")
            for layer in layers]
    xlab = [_phase_label(p) for p in phases]
    z, text = [], []
    for layer in layers:
        row = [c for c in cells if c["layer"] == layer]
        z.append([c["code"] for c in row])
        text.append([
            f"<b>{'<br>'.join(wrap_kernel(c['kernel']))}</b><br>"
            + tr("hybrid_chain.fig.cell", seqs=c["num_seqs"], tokens=c["num_tokens"])
            if c["code"] != IDLE else tr("hybrid_chain.fig.idle") for c in row
        ])
    n = len(GRID_COLORS)
    scale = []
    for i, col in enumerate(GRID_COLORS):  # a discrete colour scale: code i -> GRID_COLORS[i]
        scale += [[i / n, col], [(i + 1) / n, col]]
    fig = go.Figure(go.Heatmap(
        z=z, x=xlab, y=ylab, zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False, xgap=4, ygap=4,
        text=text, texttemplate="%{text}", textfont=dict(size=GRID_FONT_PX), hoverinfo="skip",
    ))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=13), automargin=True)  # the layer names never clipped
    fig.update_xaxes(side="top", tickfont=dict(size=13), automargin=True)
    fig.update_layout(
        title=dict(text=tr("hybrid_chain.fig.grid.title", step=view.step), x=0.0, font=dict(size=15)),
        height=110 + 78 * len(layers), margin=dict(l=20, r=20, t=80, b=20), uirevision="chain-grid",
    )
    return fig


MAX_SERIES = 12  # requests drawn as their own bars in the timeline; the rest are one "other requests" series


def timeline_series(views: list[StepView], max_series: int = MAX_SERIES) -> tuple[list[int], dict, list[int]]:
    """Tokens per step by (request, phase), in one pass over the steps: ``(steps, {(rid | "other",
    phase): [tokens per step]}, the requests drawn on their own)``. The ``max_series`` requests with
    the most tokens keep their own series; the others are summed into ``"other"`` (an uploaded trace
    of hundreds of requests stays a handful of bar series)."""
    steps = [v.step for v in views]
    per: dict = {}
    total: dict[int, int] = {}
    for k, v in enumerate(views):
        b = v.batch
        for n, rid in enumerate(b.req_ids):
            L = b.cu_seqlens[n + 1] - b.cu_seqlens[n]
            per.setdefault((rid, b.phases[n]), {})[k] = per.get((rid, b.phases[n]), {}).get(k, 0) + L
            total[rid] = total.get(rid, 0) + L
    own = sorted(sorted(total, key=lambda r: -total[r])[:max_series])
    series: dict = {}
    for (rid, phase), by_step in per.items():
        key = (rid if rid in own else "other", phase)
        ys = series.setdefault(key, [0] * len(views))
        for k, L in by_step.items():
            ys[k] += L
    return steps, series, own


def trace_budget(views: list[StepView]) -> int | None:
    """The largest token budget the scheduler gave a step of the trace (None: no step says)."""
    return max((v.decision.token_budget for v in views if v.decision and v.decision.token_budget), default=None)


def timeline_figure(views: list[StepView], current: int) -> go.Figure:
    """Tokens per step, stacked by request (hatched: decode), with step ``views[current]`` highlighted;
    at most :data:`MAX_SERIES` requests get their own colour, the rest are grey "other requests". The y
    axis follows the largest batch of the trace (fixed while stepping), so a run of 1-token decode steps
    under a 512-token budget still shows its bars; the budget is a dashed line when it is near the data,
    else named at the top (:func:`model_viz.figures.frame.limit_axis`)."""
    xs = [v.step for v in views]
    fig = go.Figure()
    _timeline_bars(fig, views)
    cur = views[current].step
    fig.add_vrect(x0=cur - 0.5, x1=cur + 0.5, fillcolor="rgba(255,210,77,0.35)", line_width=0, layer="below")
    budget = trace_budget(views)
    texts = [tr(k, n=budget) if budget else "" for k in ("hybrid_chain.fig.budget", "hybrid_chain.fig.budget_off")]
    top = frame.limit_axis(fig, max(v.batch.num_tokens for v in views), budget, *texts)
    pre = [(v.step, p.req_id) for v in views for p in v.preemptions]
    if pre:  # one marker trace, not one annotation per preemption
        fig.add_trace(go.Scatter(
            x=[x for x, _ in pre], y=[top * 1.03] * len(pre), mode="text", text=["⚠"] * len(pre), showlegend=False,
            hovertext=[tr("hybrid_chain.fig.preempted", req=r) for _, r in pre], hoverinfo="text"))
    fig.update_xaxes(range=[xs[0] - 0.5, xs[-1] + 0.5], title_text=tr("hybrid_chain.fig.step"),
                     dtick=frame.step_dtick(xs[-1] - xs[0]))
    fig.update_yaxes(title_text=tr("hybrid_chain.fig.tokens"))
    fig.update_layout(
        title=dict(text=tr("hybrid_chain.fig.timeline.title", step=cur), x=0.0, font=dict(size=15)),
        barmode="stack", height=420, margin=dict(l=60, r=20, t=60, b=45), uirevision="chain-timeline",
        legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.01, font=dict(size=11)),
    )
    return fig


def _timeline_bars(fig: go.Figure, views: list[StepView]) -> None:
    """The timeline's bar series (:func:`timeline_series`): one per (request, phase), "other requests" grey."""
    xs, series, own = timeline_series(views)
    for rid in [*own, "other"]:
        for phase in trace_phases(views):
            ys = series.get((rid, phase))
            if ys is None:
                continue
            name = (f"r{rid}" if rid != "other" else tr("hybrid_chain.fig.other_requests", n=len(
                {r for v in views for r in v.batch.req_ids}) - len(own)))
            fig.add_trace(go.Bar(
                x=xs, y=ys, name=f"{name} · {_phase_label(phase)}", legendgroup=str(rid),
                marker=dict(color=req_color(rid) if rid != "other" else "#b0b0b0",
                            pattern=dict(shape=PHASE_PATTERN.get(phase, ""), fgcolor="white", fillmode="overlay")),
                hovertemplate=f"{name} {phase}<br>step %{{x}}: %{{y}} tokens<extra></extra>",
            ))


def step_summary(view: StepView) -> str:
    """A markdown line: what the scheduler decided in this step, by the engine's own step number.
    A speculative request's verify is named as one (``verify r0: 1 + 3 tokens, 2 kept``), never as a
    prefill chunk, also in traces written before :class:`~kda_ref.trace.ScheduleDecision` listed
    verifies apart."""
    d, b = view.decision, view.batch
    verifying = {rid for rid, ph in zip(b.req_ids, b.phases) if ph == "verify"}
    dash = "—"
    chunks = ", ".join(f"r{r}×{n}" for r, n in d.prefill_chunks if r not in verifying) if d else ""
    decodes = ", ".join(f"r{r}" for r in d.decodes) if d else ""
    admitted = ", ".join(f"r{r}" for r in d.admitted) if d else ""
    waiting = ", ".join(f"r{r}" for r in d.waiting) if d else ""
    text = tr("hybrid_chain.current", step=view.step, seqs=plural(len(b.req_ids), "hybrid_chain.n_seqs.one", "hybrid_chain.n_seqs.many"),
              tokens=b.num_tokens, budget=d.token_budget if d else "?", chunks=chunks or dash,
              decodes=decodes or dash, admitted=admitted or dash, waiting=waiting or dash)
    if view.verifies:
        text += " " + tr("hybrid_chain.verifies", items="; ".join(verify_line(v) for v in view.verifies))
    done = [f"r{f.req_id}" for f in view.finished]
    if done:
        text += " " + tr("hybrid_chain.finished", reqs=", ".join(done))
    if view.preemptions:
        text += " " + tr("hybrid_chain.preempted", reqs=", ".join(f"r{p.req_id}" for p in view.preemptions))
    if view.aborted:  # LLM.abort between this step and the next: the memory it frees is gone from the next step
        text += " " + tr("hybrid_chain.aborted", reqs=", ".join(f"r{a.req_id}" for a in view.aborted))
    return text


def verify_line(v) -> str:
    """``verify r0: 1 + 3 tokens, 2 kept`` for one :class:`~kda_ref.trace.SpecVerify`."""
    return tr("hybrid_chain.verify_line", req=v.req_id, drafts=len(v.drafts),
              kept=min(v.kept - 1, v.num_accepted))


