"""Figures of the hybrid execution chain (``docs/article.md#s1-1``), from the :class:`~model_viz.scenarios.engine_trace.StepView`
of each engine step.

* :func:`batch_figure` — the packed varlen batch of one step: one bar segment per sequence between
  ``cu_seqlens[n]`` and ``cu_seqlens[n+1]``, coloured by request, hatched for decode.
* :func:`kernel_grid_figure` — layers x phases: which kernel every layer ran for the step's extend
  and decode groups. KDA cells come from ``kernel_dispatch`` events; the MLA row is derived from
  the batch phases (our MLA layer runs expand-then-attend for extend, weight-absorbed attention
  for decode: :class:`kda_ref.model.mla_layer.MLAAttention`).
* :func:`timeline_figure` — tokens per step, stacked by request, over the whole trace, with the
  current step highlighted.

Axes are fixed for a whole trace (``token_axis_max``), so stepping changes the data, not the frame.
"""

from __future__ import annotations
import plotly.graph_objects as go
from ..scenarios.engine_trace import StepView, req_color
from ..i18n import t as tr


PAGE_CONCEPTS = ("chain.hybrid", "engine.continuous_batching", "engine.chunked_prefill", "varlen.metadata",
                 "sglang.kda_dispatcher", "state.mla_kv", "model.attn_res")
PHASES = ("extend", "decode")

# cell codes of the kernel grid -> colour
IDLE, CHUNK, RECURRENT, MLA_NAIVE, MLA_ABSORBED = 0, 1, 2, 3, 4
GRID_COLORS = ("#eef1f5", "#4e79a7", "#f28e2b", "#76b7b2", "#edc948")
MLA_KERNELS = {"extend": "mla_attention_naive", "decode": "mla_attention_absorbed"}


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
PHASE_LABEL = {"extend": "hybrid_chain.phase.extend", "decode": "hybrid_chain.phase.decode"}
COLUMN_LABEL = {"req": "hybrid_chain.col.req", "phase": "hybrid_chain.col.phase",
                "new_tokens": "hybrid_chain.col.new_tokens", "context_len": "hybrid_chain.col.context_len",
                "range": "hybrid_chain.col.range", "state_slot": "hybrid_chain.col.state_slot",
                "kv_pages": "hybrid_chain.col.kv_pages"}


def _phase_label(phase: str, lang: str) -> str:
    return tr(PHASE_LABEL[phase], lang)


def batch_rows(view: StepView) -> list[dict]:
    """The batch as table rows (language-neutral keys): one per sequence, in batch order."""
    b = view.batch
    rows = []
    for n, rid in enumerate(b.req_ids):
        rows.append({
            "req": rid, "phase": b.phases[n], "new_tokens": b.cu_seqlens[n + 1] - b.cu_seqlens[n],
            "context_len": b.context_lens[n], "range": f"{b.cu_seqlens[n]}:{b.cu_seqlens[n + 1]}",
            "state_slot": b.state_indices[n],
            "kv_pages": " ".join(map(str, b.block_tables[n])) if b.block_tables is not None else "",
        })
    return rows


def batch_figure(view: StepView, x_max: int, *, lang: str = "en") -> go.Figure:
    """One horizontal bar of the packed batch: segment n spans ``cu_seqlens[n]:cu_seqlens[n+1]``."""
    b = view.batch
    fig = go.Figure()
    for n, rid in enumerate(b.req_ids):
        s, e = b.cu_seqlens[n], b.cu_seqlens[n + 1]
        phase = b.phases[n]
        fig.add_trace(go.Bar(
            x=[e - s], base=[s], y=[""], orientation="h", name=f"r{rid}", showlegend=False,
            marker=dict(color=req_color(rid), line=dict(color="white", width=2),
                        pattern=dict(shape="/" if phase == "decode" else "", fgcolor="white",
                                     fillmode="overlay")),
            text=[f"r{rid} · {_phase_label(phase, lang)} · {e - s}"], textposition="inside",
            insidetextanchor="middle", textfont=dict(color="white", size=13),
            hovertemplate=(f"r{rid} ({phase})<br>cu_seqlens[{n}]={s} .. cu_seqlens[{n + 1}]={e}<br>"
                           f"context_len={b.context_lens[n]}, slot={b.state_indices[n]}<extra></extra>"),
        ))
    budget = view.decision.token_budget if view.decision else None
    if budget:
        fig.add_vline(x=budget, line=dict(color="#444", dash="dash", width=1.5))
        fig.add_annotation(x=budget, y=1.0, yref="paper", text=tr("hybrid_chain.fig.budget", lang, n=budget),
                           showarrow=False, xanchor="right", yanchor="bottom", font=dict(size=11))
    fig.update_xaxes(range=[0, x_max + 0.5], tickmode="array", tickvals=list(b.cu_seqlens),
                     title_text=tr("hybrid_chain.fig.batch.x", lang), showgrid=False)
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(
        title=dict(text=tr("hybrid_chain.fig.batch.title", lang, step=view.step, cu=list(b.cu_seqlens)), x=0.0,
                   font=dict(size=15)),
        barmode="overlay", height=190, margin=dict(l=20, r=20, t=60, b=45), uirevision="chain-batch",
    )
    return fig


def grid_cells(view: StepView, kda_layers: list[int], mla_layers: list[int]) -> list[dict]:
    """One dict per (layer, phase): ``layer``, ``kind`` (KDA / MLA), ``phase``, ``code``, ``kernel``,
    ``num_seqs``, ``num_tokens``; rows in layer order, extend then decode."""
    b = view.batch
    seqs = {p: [n for n, ph in enumerate(b.phases) if ph == p] for p in PHASES}
    toks = {p: sum(b.cu_seqlens[n + 1] - b.cu_seqlens[n] for n in seqs[p]) for p in PHASES}
    cells = []
    for layer in sorted(set(kda_layers) | set(mla_layers)):
        kind = "MLA" if layer in mla_layers else "KDA"
        for p in PHASES:
            cell = {"layer": layer, "kind": kind, "phase": p, "code": IDLE, "kernel": "", "num_seqs": 0,
                    "num_tokens": 0}
            if kind == "KDA":
                d = view.dispatch(layer, p)
                if d is not None:
                    cell.update(code=CHUNK if d.kernel.startswith("chunk") else RECURRENT, kernel=d.kernel,
                                num_seqs=d.num_seqs, num_tokens=d.num_tokens, backend=d.backend)
            elif seqs[p]:
                cell.update(code=MLA_NAIVE if p == "extend" else MLA_ABSORBED, kernel=MLA_KERNELS[p],
                            num_seqs=len(seqs[p]), num_tokens=toks[p])
            cells.append(cell)
    return cells


def kernel_grid_figure(view: StepView, kda_layers: list[int], mla_layers: list[int], *,
                       lang: str = "en") -> go.Figure:
    """Layers (rows, input at the top) x phases (columns): the kernel each layer ran in this step."""
    cells = grid_cells(view, kda_layers, mla_layers)
    layers = sorted({c["layer"] for c in cells})
    ylab = [tr("hybrid_chain.fig.layer", lang, layer=layer, kind="MLA" if layer in mla_layers else "KDA")
            for layer in layers]
    xlab = [_phase_label(p, lang) for p in PHASES]
    z, text = [], []
    for layer in layers:
        row = [c for c in cells if c["layer"] == layer]
        z.append([c["code"] for c in row])
        text.append([
            f"<b>{c['kernel']}</b><br>" + tr("hybrid_chain.fig.cell", lang, seqs=c["num_seqs"], tokens=c["num_tokens"])
            if c["code"] != IDLE else tr("hybrid_chain.fig.idle", lang) for c in row
        ])
    n = len(GRID_COLORS)
    scale = []
    for i, col in enumerate(GRID_COLORS):  # a discrete colour scale: code i -> GRID_COLORS[i]
        scale += [[i / n, col], [(i + 1) / n, col]]
    fig = go.Figure(go.Heatmap(
        z=z, x=xlab, y=ylab, zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False, xgap=4, ygap=4,
        text=text, texttemplate="%{text}", textfont=dict(size=13), hoverinfo="skip",
    ))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=13))
    fig.update_xaxes(side="top", tickfont=dict(size=13))
    fig.update_layout(
        title=dict(text=tr("hybrid_chain.fig.grid.title", lang, step=view.step), x=0.0, font=dict(size=15)),
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


def timeline_figure(views: list[StepView], current: int, y_max: int, *, lang: str = "en") -> go.Figure:
    """Tokens per step, stacked by request (hatched: decode), with step ``views[current]`` highlighted;
    at most :data:`MAX_SERIES` requests get their own colour, the rest are grey "other requests"."""
    xs, series, own = timeline_series(views)
    fig = go.Figure()
    for rid in [*own, "other"]:
        for phase in PHASES:
            ys = series.get((rid, phase))
            if ys is None:
                continue
            name = (f"r{rid}" if rid != "other" else tr("hybrid_chain.fig.other_requests", lang, n=len(
                {r for v in views for r in v.batch.req_ids}) - len(own)))
            fig.add_trace(go.Bar(
                x=xs, y=ys, name=f"{name} · {_phase_label(phase, lang)}", legendgroup=str(rid),
                marker=dict(color=req_color(rid) if rid != "other" else "#b0b0b0",
                            pattern=dict(shape="/" if phase == "decode" else "", fgcolor="white", fillmode="overlay")),
                hovertemplate=f"{name} {phase}<br>step %{{x}}: %{{y}} tokens<extra></extra>",
            ))
    cur = views[current].step
    fig.add_vrect(x0=cur - 0.5, x1=cur + 0.5, fillcolor="rgba(255,210,77,0.35)", line_width=0, layer="below")
    pre = [(v.step, p.req_id) for v in views for p in v.preemptions]
    if pre:  # one marker trace, not one annotation per preemption
        fig.add_trace(go.Scatter(
            x=[x for x, _ in pre], y=[y_max * 1.03] * len(pre), mode="text", text=["⚠"] * len(pre), showlegend=False,
            hovertext=[tr("hybrid_chain.fig.preempted", lang, req=r) for _, r in pre], hoverinfo="text"))
    fig.update_xaxes(range=[xs[0] - 0.5, xs[-1] + 0.5], title_text=tr("hybrid_chain.fig.step", lang),
                     dtick=1 if len(xs) <= 40 else None)
    fig.update_yaxes(range=[0, y_max * 1.08], title_text=tr("hybrid_chain.fig.tokens", lang))
    fig.update_layout(
        title=dict(text=tr("hybrid_chain.fig.timeline.title", lang, step=cur), x=0.0, font=dict(size=15)),
        barmode="stack", height=420, margin=dict(l=60, r=20, t=60, b=45), uirevision="chain-timeline",
        legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.01, font=dict(size=11)),
    )
    return fig


def step_summary(view: StepView, index: int, total: int, lang: str) -> str:
    """A markdown line: what the scheduler decided in this step."""
    d = view.decision
    chunks = ", ".join(f"r{r}×{n}" for r, n in d.prefill_chunks) if d and d.prefill_chunks else "—"
    decodes = ", ".join(f"r{r}" for r in d.decodes) if d and d.decodes else "—"
    admitted = ", ".join(f"r{r}" for r in d.admitted) if d and d.admitted else "—"
    waiting = ", ".join(f"r{r}" for r in d.waiting) if d and d.waiting else "—"
    text = tr("hybrid_chain.current", lang, step=view.step, i=index + 1, n=total, seqs=len(view.batch.req_ids),
              tokens=view.batch.num_tokens, budget=d.token_budget if d else "?", chunks=chunks, decodes=decodes,
              admitted=admitted, waiting=waiting)
    done = [f"r{f.req_id}" for f in view.finished]
    if done:
        text += " " + tr("hybrid_chain.finished", lang, reqs=", ".join(done))
    if view.preemptions:
        text += " " + tr("hybrid_chain.preempted", lang, reqs=", ".join(f"r{p.req_id}" for p in view.preemptions))
    return text
