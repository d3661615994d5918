"""Figures and tables of the Lab page (``app_pages/lab.py``) that the other pages do not already draw.

The Lab shows a run through the other pages' views, fed from its trace: the execution chain
(:mod:`model_viz.figures.hybrid_chain`), the memory pool (:mod:`model_viz.figures.pool_map`), the radix
tree (:mod:`model_viz.figures.checkpoint_tree`). Here: the totals of one or two runs side by side, the
speculative verify steps, each request's metrics and the cache operations of a step -- all from a
:class:`~model_viz.scenarios.lab.LabRun` or its events.
"""

from __future__ import annotations

import plotly.graph_objects as go

from kda_ref.trace import AdmissionRefused, CacheEvent, EngineStall, SpecVerify
from ..i18n import t as tr
from ..scenarios.lab import Comparison, LabRun

PAGE_CONCEPTS = ("engine.continuous_batching", "memory.unified_pool", "sglang.kda_dispatcher",
                 "spec.state_rollback")
# i18n keys, written out whole so the i18n test sees them
TOTAL_LABEL = {
    "steps": "lab.total.steps", "prompt_tokens": "lab.total.prompt_tokens",
    "computed_prompt_tokens": "lab.total.computed", "reused_prompt_tokens": "lab.total.reused",
    "recomputed_prompt_tokens": "lab.total.recomputed", "generated_tokens": "lab.total.generated",
    "forward_tokens": "lab.total.forward", "preemptions": "lab.total.preemptions",
    "checkpoint_bytes": "lab.total.checkpoint_bytes", "peak_pool_bytes": "lab.total.peak_pool",
    "budget_bytes": "lab.total.budget", "spec_accepted_tokens": "lab.total.spec_accepted",
    "spec_draft_tokens": "lab.total.spec_drafts", "wall_s": "lab.total.wall", "tokens_per_s": "lab.total.tps",
}
OK, BAD = "#2ca02c", "#d62728"


def _fmt(key: str, v) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    if key.endswith("bytes") and isinstance(v, int):
        return f"{v / 1024:,.1f} KiB"
    return f"{v:,}" if isinstance(v, int) else str(v)


def totals_rows(runs: list[LabRun], lang: str) -> list[dict]:
    """One row per total, one column per run ("A", "B"), formatted; a changed value marked with a dot."""
    totals = [r.totals() for r in runs]
    rows = []
    for key, label in TOTAL_LABEL.items():
        row = {tr("lab.col.total", lang): tr(label, lang)}
        for name, tot in zip("AB", totals):
            row[name] = _fmt(key, tot[key])
        if len(totals) == 2 and key not in ("wall_s", "tokens_per_s"):  # timings differ run to run
            row[tr("lab.col.differs", lang)] = "●" if totals[0][key] != totals[1][key] else ""
        rows.append(row)
    return rows


def config_diff_rows(cmp: Comparison, lang: str) -> list[dict]:
    """The settings the two configurations differ in."""
    return [{tr("lab.col.setting", lang): r["name"].removeprefix("config:"), "A": r["a"], "B": r["b"]}
            for r in cmp.rows if r["name"].startswith("config:")]


def request_rows(run: LabRun, lang: str) -> list[dict]:
    """Each request: prompt and output length, finish reason, time to first token, latency, text."""
    rows = []
    for o, text in zip(run.outputs, run.texts or [None] * len(run.outputs)):
        m = o.metrics or {}
        rows.append({tr("lab.col.request", lang): o.req_id, tr("lab.col.prompt_len", lang): len(o.prompt_token_ids),
                     tr("lab.col.output_len", lang): len(o.token_ids), tr("lab.col.finish", lang): o.finish_reason,
                     tr("lab.col.ttft", lang): round(m.get("ttft_s", 0.0) * 1000, 1),
                     tr("lab.col.latency", lang): round(m.get("latency_s", 0.0) * 1000, 1),
                     tr("lab.col.preemptions", lang): m.get("preemptions", 0),
                     tr("lab.col.text", lang): text if text is not None else " ".join(map(str, o.token_ids)),
                     tr("lab.col.error", lang): o.error or ""})
    return rows


def refusals(events) -> list[str]:
    """The engine's own words for every request it finished with an error for memory (refused: its peak
    against the budget, by part) or for a stall (what the engine held), in step order."""
    out = []
    for e in events:
        if isinstance(e, AdmissionRefused):
            parts = ", ".join(f"{k} {v:,} B" for k, v in e.parts.items())
            out.append(f"step {e.step}, r{e.req_id}: {e.need_bytes:,} B at its peak ({parts}) > "
                       f"budget {e.budget_bytes:,} B — {e.message}")
        elif isinstance(e, EngineStall):
            out.append(f"step {e.step}, {', '.join(f'r{r}' for r in e.req_ids)}: {e.message}")
    return out


def tree_steps(header: dict, events) -> list:
    """The radix-tree snapshots a trace's header carries (a Lab run with the radix cache, or the
    checkpoint-placement page's trace), read by that page's reader; ``[]`` when there are none, the
    reader's :class:`~model_viz.scenarios.engine_trace.TraceError` when they are malformed."""
    from ..scenarios import checkpoint_tree as ct

    return ct.read_steps(header, events) if "tree_steps" in header else []


def block_steps(header: dict) -> list[dict]:
    """The block-cache snapshots a Lab trace's header carries (``[]`` without them); each checked enough
    to draw: ``units`` of ``{"end": int, "kv": bool, "state": int | None}``."""
    raw = header.get("block_steps")
    ok = isinstance(raw, list) and all(
        isinstance(s, dict) and isinstance(s.get("units"), list) and isinstance(s.get("steps"), list) and all(
            isinstance(u, dict) and type(u.get("end")) is int and isinstance(u.get("kv"), bool) for u in s["units"])
        for s in raw)
    return raw if ok else []


def block_figure(step: dict, lang: str) -> go.Figure:
    """One snapshot of the block cache along a request's tokens: per hash unit, KV cached or not, and the
    units that end where a state is kept (vLLM keeps a state per block only where retention says)."""
    units, size = step["units"], step.get("block_size") or 0
    x = [u["end"] for u in units]
    fig = go.Figure([
        go.Bar(name=tr("lab.fig.kv_unit", lang), x=x, y=[1 if u["kv"] else 0 for u in units], marker_color="#d62728"),
        go.Bar(name=tr("lab.fig.state_kept", lang), x=x, y=[1 if u.get("state") is not None else 0 for u in units],
               marker_color="#1f77b4")])
    for b in range(size, (x[-1] if x else 0) + 1, size) if size else ():
        fig.add_vline(x=b + 0.5, line_dash="dot", line_color="#999")
    fig.update_layout(barmode="group", height=260, margin=dict(l=40, r=20, t=50, b=40),
                      title=tr("lab.fig.block_title", lang, label=step.get("label", ""), n=len(units)),
                      xaxis_title=tr("lab.fig.block_x", lang), yaxis=dict(visible=False))
    return fig


def verify_events(events) -> list[SpecVerify]:
    return [e for e in events if isinstance(e, SpecVerify)]


def verify_figure(events, lang: str) -> go.Figure:
    """Every speculative verify of the run: drafts accepted (green) and rejected (red), by step and
    request; the state of the rejected ones was rolled back (or never kept)."""
    vs = verify_events(events)
    x = [f"{e.step}·r{e.req_id}" for e in vs]
    fig = go.Figure([
        go.Bar(name=tr("lab.fig.accepted", lang), x=x, y=[min(e.num_accepted, len(e.drafts)) for e in vs],
               marker_color=OK),
        go.Bar(name=tr("lab.fig.rejected", lang), x=x, y=[e.rejected for e in vs], marker_color=BAD)])
    fig.update_layout(barmode="stack", height=300, margin=dict(l=50, r=20, t=50, b=60),
                      title=tr("lab.fig.verify_title", lang, n=len(vs)),
                      xaxis_title=tr("lab.fig.verify_x", lang), yaxis_title=tr("lab.fig.drafts", lang))
    return fig


def cache_lines(events, step: int, lang: str) -> list[str]:
    """The prefix-cache operations of one step, one line each (op, request, position, detail)."""
    out = []
    for e in events:
        if isinstance(e, CacheEvent) and e.step == step:
            who = tr("lab.ev.request", lang, r=e.req_id) if e.req_id is not None else ""
            at = tr("lab.ev.position", lang, p=e.position) if e.position is not None else ""
            detail = ", ".join(f"{k}={v}" for k, v in list(e.detail.items())[:4])
            out.append(" ".join(x for x in (f"**{e.op}**", who, at, detail) if x))
    return out
