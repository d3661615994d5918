"""Figures and text of the "Restore paths" page: :func:`path_figure`, :func:`divergence_figure`,
:func:`step_text`.

What they draw comes from :mod:`model_viz.scenarios.restore_paths` (the run and its checks); the page
(``app_pages/restore_paths.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
import plotly.graph_objects as go
from ..scenarios import common as cs
from ..i18n import t
from ..scenarios.restore_paths import RestoreRun, SAME_TOL, STEPS


PAGE_CONCEPTS = ("sglang.radix.match_backoff", "sglang.boundary_consistency", "sglang.cow_snapshot_donate",
                 "state.conv", "memory.state_slot", "kda.chunk_checkpoints")

# i18n keys, written out whole so a test can see which strings are used
REQUEST_LABEL = {"mid": "restore_paths.req.mid", "turn": "restore_paths.req.turn", "short": "restore_paths.req.short"}
MODE_LABEL = {"boundary": "restore_paths.mode.boundary", "conv": "restore_paths.mode.conv"}
STEP_NAME = {"arrive": "restore_paths.stepname.arrive", "match": "restore_paths.stepname.match",
             "backoff": "restore_paths.stepname.backoff", "check": "restore_paths.stepname.check",
             "restore": "restore_paths.stepname.restore", "recompute": "restore_paths.stepname.recompute",
             "compare": "restore_paths.stepname.compare"}
STEP_TEXT = {"arrive": "restore_paths.step.arrive", "match": "restore_paths.step.match",
             "backoff": "restore_paths.step.backoff", "restore": "restore_paths.step.restore",
             "recompute": "restore_paths.step.recompute", "compare": "restore_paths.step.compare"}
RESTORE_BAD = {"boundary": "restore_paths.step.restore_bad_boundary", "conv": "restore_paths.step.restore_bad_conv"}
# the check compares records: it refuses another boundary's checkpoint, and passes conv windows written wrong
CHECK_TEXT = {"none": "restore_paths.step.check_ok", "boundary": "restore_paths.step.check_bad",
              "conv": "restore_paths.step.check_conv"}
COMPARE_BAD = {"boundary": "restore_paths.step.compare_bad", "conv": "restore_paths.step.compare_bad_conv"}
WRONG_LABEL = {"boundary": "restore_paths.leg.wrong", "conv": "restore_paths.leg.wrong_conv"}
FIG_TITLE = {"arrive": "restore_paths.fig.arrive", "match": "restore_paths.fig.match", "backoff": "restore_paths.fig.backoff",
             "check": "restore_paths.fig.check", "restore": "restore_paths.fig.restore",
             "recompute": "restore_paths.fig.recompute", "compare": "restore_paths.fig.compare"}
COLORS = {"prompt": "#7f7f7f", "kv": "#1f77b4", "ok": "#2ca02c", "bad": "#d62728", "recompute": "#ff7f0e",
          "gen": "#6a1b9a", "ckpt": "#145a32", "idle": "#e5e5e5"}


# ---- figures -------------------------------------------------------------------------------------
def _bar(fig, y, start, length, color, name, hover, pattern="", show=True):
    fig.add_trace(go.Bar(y=[y], x=[length], base=[start], orientation="h", width=0.55, name=name,
                         marker=dict(color=color, pattern_shape=pattern), showlegend=show and bool(name),
                         hovertemplate=hover + "<extra></extra>"))


def path_figure(r: RestoreRun, i: int) -> go.Figure:
    """The restore path up to step ``i`` (index into :data:`STEPS`) on a token axis."""
    step = STEPS[i]
    N, G, c = r.N, len(r.tokens), r.state_len
    rows = [t(k) for k in ("restore_paths.row.request", "restore_paths.row.kv", "restore_paths.row.ckpt",
                                 "restore_paths.row.active")]
    req, kv, ck, act = rows
    fig = go.Figure()
    _request_and_kv_rows(fig, r, i, req, kv)
    _checkpoint_row(fig, r, i, ck)
    _active_row(fig, r, i, act)
    fig.add_vline(x=c, line=dict(color="#555", dash="dot", width=1)) if i >= STEPS.index("backoff") else None
    fig.update_layout(
        title=dict(text=t(FIG_TITLE[step], N=N, kv=r.kv_len, c=c, n=N - c, ck=r.ckpt_slot, a=r.active_slot,
                          b=r.restored_from)),
        barmode="overlay", height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(range=[-0.5, max(N + G, r.cached_len) + 1.5], title=t("restore_paths.axis.position"), fixedrange=True),
        yaxis=dict(categoryorder="array", categoryarray=list(reversed(rows)), fixedrange=True))
    return fig


def _request_and_kv_rows(fig: go.Figure, r: RestoreRun, i: int, req: str, kv: str) -> None:
    """The request row (prompt, then the generated tokens) and the KV row (the hit, then the rest of the cache)."""
    N, G = r.N, len(r.tokens)
    _bar(fig, req, 0, N, COLORS["prompt"], t("restore_paths.leg.prompt"), t("restore_paths.hover.prompt", N=N))
    if i >= STEPS.index("compare"):
        _bar(fig, req, N, G, COLORS["gen"], t("restore_paths.leg.gen"), t("restore_paths.hover.gen", G=G), pattern=".")
    if i >= STEPS.index("match"):
        _bar(fig, kv, 0, r.kv_len, COLORS["kv"], t("restore_paths.leg.kv"), t("restore_paths.hover.kv", n=r.kv_len))
    if r.cached_len > r.kv_len and i >= STEPS.index("match"):
        _bar(fig, kv, r.kv_len, r.cached_len - r.kv_len, COLORS["idle"], t("restore_paths.leg.other"),
             t("restore_paths.hover.other", a=r.kv_len, b=r.cached_len))


def _checkpoint_row(fig: go.Figure, r: RestoreRun, i: int, ck: str) -> None:
    """The checkpoint row: the saved states, the back-off arrow, the boundary check and a wrong restore."""
    c = r.state_len
    xs = r.checkpoints
    reach = r.kv_len if i >= STEPS.index("match") else -1
    fig.add_trace(go.Scatter(
        x=xs, y=[ck] * len(xs), mode="markers", name=t("restore_paths.leg.ckpt"),
        marker=dict(symbol="diamond", size=[18 if (x == c and i >= STEPS.index("backoff")) else 11 for x in xs],
                    color=[COLORS["ckpt"] if x <= reach else "#bdbdbd" for x in xs], line=dict(color="white", width=1)),
        hovertemplate=cs.hover("restore_paths.hover.ckpt")))
    if i >= STEPS.index("backoff") and r.kv_len != c:
        fig.add_annotation(x=c, y=ck, ax=r.kv_len, ay=ck, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=3, arrowwidth=2, arrowcolor=COLORS["recompute"], text="")
    if i >= STEPS.index("check"):
        fig.add_trace(go.Scatter(
            x=[c], y=[ck], mode="markers", hoverinfo="skip",
            name=t("restore_paths.leg.check_ok" if r.check_ok else "restore_paths.leg.check_bad"),
            marker=dict(symbol="circle-open", size=28, line=dict(width=3),
                        color=COLORS["ok"] if r.check_ok else COLORS["bad"])))
    if i >= STEPS.index("check") and r.broken:
        fig.add_trace(go.Scatter(x=[r.restored_from], y=[ck], mode="markers", name=t(WRONG_LABEL[r.mode]),
                                 marker=dict(symbol="x", size=18, color=COLORS["bad"]),
                                 hovertemplate=t("restore_paths.hover.wrong", b=r.restored_from) + "<extra></extra>"))


def _active_row(fig: go.Figure, r: RestoreRun, i: int, act: str) -> None:
    """The active-slot row: the restored state, the recomputed tokens, then each generated token checked."""
    N, G, c = r.N, len(r.tokens), r.state_len
    if i >= STEPS.index("restore"):
        color = COLORS["bad"] if r.broken else COLORS["ok"]
        _bar(fig, act, 0, c, color, t("restore_paths.leg.restored"),
             t("restore_paths.hover.restored", c=c, ck=r.ckpt_slot, a=r.active_slot))
    if i >= STEPS.index("recompute"):
        _bar(fig, act, c, N - c, COLORS["recompute"], t("restore_paths.leg.recompute"),
             t("restore_paths.hover.recompute", c=c, N=N, n=N - c), pattern="/")
    if i >= STEPS.index("compare"):
        ok = [a == b for a, b in zip(r.tokens, r.ref_tokens)]
        fig.add_trace(go.Scatter(
            x=[N + k + 0.5 for k in range(G)], y=[act] * G, mode="markers+text", name=t("restore_paths.leg.tokens"),
            text=["✓" if o else "✗" for o in ok], textposition="middle center", textfont=dict(color="white", size=13),
            marker=dict(symbol="square", size=18, color=[COLORS["ok"] if o else COLORS["bad"] for o in ok]),
            hovertemplate=cs.hover("restore_paths.hover.token"),
            customdata=[[a, b] for a, b in zip(r.tokens, r.ref_tokens)]))


def divergence_figure(r: RestoreRun) -> go.Figure:
    """Per generated token: max |Δlogit| against the run without cache (log scale, fixed range)."""
    xs = [str(k + 1) for k in range(len(r.diffs))]
    floor = 1e-8
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[max(d, floor) for d in r.correct_diffs], name=t("restore_paths.div.correct"),
                         marker=dict(color=COLORS["ok"])))
    if r.broken:
        fig.add_trace(go.Bar(x=xs, y=[max(d, floor) for d in r.diffs], name=t("restore_paths.div.broken"),
                             marker=dict(color=COLORS["bad"])))
    fig.add_hline(y=SAME_TOL, line=dict(color="#555", dash="dash", width=1),
                  annotation_text=t("restore_paths.div.tol", tol=f"{SAME_TOL:g}"), annotation_position="top left")
    fig.update_layout(
        title=dict(text=t("restore_paths.div.title_broken" if r.broken else "restore_paths.div.title_ok", d=f"{max(r.diffs):.1e}", same=sum(a == b for a, b in zip(r.tokens, r.ref_tokens)),
                          G=len(r.tokens))),
        barmode="group", height=300, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(title=t("restore_paths.axis.gen"), fixedrange=True),
        yaxis=dict(type="log", range=[-8.2, 2], title=t("restore_paths.axis.diff"), fixedrange=True))
    return fig


def step_text(r: RestoreRun, i: int) -> str:
    """The explanation of step ``i`` for this run (markdown)."""
    step = STEPS[i]
    fmt = dict(N=r.N, known=r.N - 1, kv=r.kv_len, kv_minus_c=r.kv_len - r.state_len, c=r.state_len, n=r.N - r.state_len, ck=r.ckpt_slot,
               a=r.active_slot, b=r.restored_from, T=r.cached_len, chunks=", ".join(f"{s}+{n}" for _, s, n in r.chunks),
               same=sum(a == b for a, b in zip(r.tokens, r.ref_tokens)), G=len(r.tokens),
               d=f"{max(r.diffs):.1e}", dc=f"{max(r.correct_diffs):.1e}", sd=f"{r.state_diff:.2f}",
               cd=f"{r.conv_diff:.2f}")
    if step == "check":
        key = CHECK_TEXT[r.mode]
    elif step in ("restore", "compare") and r.broken:
        key = RESTORE_BAD[r.mode] if step == "restore" else COMPARE_BAD[r.mode]
    else:
        key = STEP_TEXT[step]
    return t(key, **fmt)
