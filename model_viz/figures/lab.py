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
from ..scenarios.engine_trace import TraceError
from ..scenarios.lab import BLOCK_STEPS, TREE_STEPS, Comparison, LabRun

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


def totals_rows(runs: list[LabRun]) -> list[dict]:
    """One row per total, one column per run ("A", "B"), formatted; a changed value marked with a dot."""
    totals = [r.totals() for r in runs]
    rows = []
    for key, label in TOTAL_LABEL.items():
        row = {tr("lab.col.total"): tr(label)}
        for name, tot in zip("AB", totals):
            row[name] = _fmt(key, tot[key])
        if len(totals) == 2 and key not in ("wall_s", "tokens_per_s"):  # timings differ run to run
            row[tr("lab.col.differs")] = "●" if totals[0][key] != totals[1][key] else ""
        rows.append(row)
    return rows


def config_diff_rows(cmp: Comparison) -> list[dict]:
    """The settings the two configurations differ in."""
    return [{tr("lab.col.setting"): r["name"].removeprefix("config:"), "A": r["a"], "B": r["b"]}
            for r in cmp.rows if r["name"].startswith("config:")]


def request_rows(run: LabRun) -> list[dict]:
    """Each request: prompt and output length, finish reason, time to first token, latency, text."""
    rows = []
    for o, text in zip(run.outputs, run.texts or [None] * len(run.outputs)):
        m = o.metrics or {}
        rows.append({tr("lab.col.request"): o.req_id, tr("lab.col.prompt_len"): len(o.prompt_token_ids),
                     tr("lab.col.output_len"): len(o.token_ids), tr("lab.col.finish"): o.finish_reason,
                     tr("lab.col.ttft"): round(m.get("ttft_s", 0.0) * 1000, 1),
                     tr("lab.col.latency"): round(m.get("latency_s", 0.0) * 1000, 1),
                     tr("lab.col.preemptions"): m.get("preemptions", 0),
                     tr("lab.col.text"): text if text is not None else " ".join(map(str, o.token_ids)),
                     tr("lab.col.error"): o.error or ""})
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

    return ct.read_steps(header, events) if TREE_STEPS in header else []


# the block snapshots an uploaded header may carry: far above what a Lab run writes (a conversation of
# at most LIMITS.requests turns of LIMITS.prompt_tokens + LIMITS.new_tokens), far below what slows a page
MAX_BLOCK_STEPS = 64  # snapshots (one per turn or request)
MAX_BLOCK_TOKENS = 16_384  # the last unit's end, so also the units and the block boundaries drawn


def _bad_blocks(msg: str) -> TraceError:
    return TraceError("lab.err.bad_blocks", msg=msg)


def _int(x) -> bool:
    return type(x) is int


def _block_step(s, where: str) -> dict:
    """One snapshot checked and bounded: ``steps`` two ints, ``block_size`` a positive int,
    ``units`` ending at increasing positions in ``[1, MAX_BLOCK_TOKENS]``, each ``kv`` a bool and
    ``state`` None or an int."""
    if not isinstance(s, dict):
        raise _bad_blocks(f"{where} is not an object")
    steps, size, units = s.get("steps"), s.get("block_size"), s.get("units")
    if not (isinstance(steps, list) and len(steps) == 2 and all(map(_int, steps))):
        raise _bad_blocks(f"{where}.steps must be two step numbers [first, last], got {str(steps)[:60]}")
    if not (_int(size) and size >= 1):
        raise _bad_blocks(f"{where}.block_size must be a positive int, got {str(size)[:60]}")
    if not isinstance(units, list) or len(units) > MAX_BLOCK_TOKENS:
        raise _bad_blocks(f"{where}.units must be a list of at most {MAX_BLOCK_TOKENS} units")
    last = 0
    for j, u in enumerate(units):
        if not (isinstance(u, dict) and _int(u.get("end")) and isinstance(u.get("kv"), bool)
                and (u.get("state") is None or _int(u.get("state")))):
            raise _bad_blocks(f"{where}.units[{j}] needs end (int), kv (bool) and state (int or null)")
        if not last < u["end"] <= MAX_BLOCK_TOKENS:
            raise _bad_blocks(f"{where}.units[{j}].end must be in ({last}, {MAX_BLOCK_TOKENS}], got {u['end']}")
        last = u["end"]
    label = s.get("label", "")
    return {"req_id": s.get("req_id") if _int(s.get("req_id")) else None,
            "label": label[:40] if isinstance(label, str) else "", "steps": list(steps), "block_size": size,
            "units": [{"end": u["end"], "kv": u["kv"], "state": u.get("state")} for u in units]}


def read_block_steps(header: dict) -> list[dict]:
    """The block-cache snapshots a Lab trace's header carries (``[]`` without them), each checked and
    bounded (:func:`_block_step`) where the header is read, as :func:`tree_steps` checks the radix
    tree's: a malformed or oversized one is the reader's
    :class:`~model_viz.scenarios.engine_trace.TraceError` naming it (``block_steps[0].steps ...``)."""
    raw = header.get(BLOCK_STEPS)
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_BLOCK_STEPS:
        raise _bad_blocks(f"block_steps must be a list of at most {MAX_BLOCK_STEPS} snapshots")
    return [_block_step(s, f"block_steps[{i}]") for i, s in enumerate(raw)]


def block_steps(header: dict) -> list[dict]:
    """:func:`read_block_steps`, with ``[]`` for malformed snapshots (not drawn; the page shows the
    reader's message)."""
    try:
        return read_block_steps(header)
    except TraceError:
        return []


def _boundaries_shape(size: int, last: int) -> dict:
    """Every block boundary up to token ``last`` as ONE dotted path shape (one ``M x,0 V 1`` segment per
    boundary, spanning the plot's height): one object however many blocks, where a shape per boundary
    (``add_vline``) made a figure's cost grow with the square of their number (tens of seconds for 400).
    A shape, not a trace, so the figure's data stays the two bar series."""
    path = " ".join(f"M {b + 0.5},0 V 1" for b in range(size, last + 1, size))
    return dict(type="path", path=path, xref="x", yref="paper", line=dict(dash="dot", color="#999", width=1),
                layer="above")


def block_figure(step: dict) -> go.Figure:
    """One snapshot of the block cache (as :func:`block_steps` returns it) along a request's tokens: per
    hash unit, KV cached or not, and the units that end where a state is kept (vLLM keeps a state per
    block only where retention says); dotted: the block boundaries."""
    units, size = step["units"], step["block_size"]
    x = [u["end"] for u in units]
    fig = go.Figure([
        go.Bar(name=tr("lab.fig.kv_unit"), x=x, y=[1 if u["kv"] else 0 for u in units], marker_color="#d62728"),
        go.Bar(name=tr("lab.fig.state_kept"), x=x, y=[1 if u.get("state") is not None else 0 for u in units],
               marker_color="#1f77b4")])
    fig.update_layout(barmode="group", height=260, margin=dict(l=40, r=20, t=50, b=40),
                      shapes=[_boundaries_shape(size, x[-1])] if x and x[-1] >= size else [],
                      title=tr("lab.fig.block_title", label=step.get("label", ""), n=len(units)),
                      xaxis_title=tr("lab.fig.block_x"), yaxis=dict(visible=False))
    return fig


def verify_events(events) -> list[SpecVerify]:
    return [e for e in events if isinstance(e, SpecVerify)]


def verify_figure(events) -> go.Figure:
    """Every speculative verify of the run: drafts accepted (green) and rejected (red), by step and
    request; the state of the rejected ones was rolled back (or never kept)."""
    vs = verify_events(events)
    x = [f"{e.step}·r{e.req_id}" for e in vs]
    fig = go.Figure([
        go.Bar(name=tr("lab.fig.accepted"), x=x, y=[min(e.num_accepted, len(e.drafts)) for e in vs],
               marker_color=OK),
        go.Bar(name=tr("lab.fig.rejected"), x=x, y=[e.rejected for e in vs], marker_color=BAD)])
    fig.update_layout(barmode="stack", height=300, margin=dict(l=50, r=20, t=50, b=60),
                      title=tr("lab.fig.verify_title", n=len(vs)),
                      xaxis_title=tr("lab.fig.verify_x"), yaxis_title=tr("lab.fig.drafts"))
    return fig


def cache_lines(events, step: int) -> list[str]:
    """The prefix-cache operations of one step, one line each (op, request, position, detail)."""
    out = []
    for e in events:
        if isinstance(e, CacheEvent) and e.step == step:
            who = tr("lab.ev.request", r=e.req_id) if e.req_id is not None else ""
            at = tr("lab.ev.position", p=e.position) if e.position is not None else ""
            shown = [(k, v) for k, v in e.detail.items() if v is not None][:4]  # an unset field says nothing
            detail = ", ".join(f"{k}={v}" for k, v in shown)
            out.append(" ".join(x for x in (f"**{e.op}**", who, at, detail) if x))
    return out
