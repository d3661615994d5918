"""Figures and text of the "Checkpoint density and policies" page: :func:`cost_figure`,
:func:`interval_label`, :func:`sweep_figure`, :func:`bench_figure`, :func:`prefix_figure`.

What they draw comes from :mod:`model_viz.scenarios.checkpoint_density` (the run and its checks); the page
(``app_pages/checkpoint_density.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from kda_ref.cache.cost import CostModel

from ..i18n import t
from ..scenarios.checkpoint_density import BLOCK_SIZE, INTERVALS, cost_model, ratio, recompute


PAGE_CONCEPTS = ("cache.checkpoint_density", "vllm.retention", "vllm.mamba_cache_mode", "vllm.block_eviction",
                 "marconi.eviction", "marconi.alpha_tuning", "model.k3")

# i18n keys, written out whole so a test can see which strings are used
FAMILY_LABEL = {"shared_system_prompt": "checkpoint_density.family.shared_system_prompt", "multi_turn": "checkpoint_density.family.multi_turn",
                "tree_search": "checkpoint_density.family.tree_search", "few_shot": "checkpoint_density.family.few_shot",
                "long_document_qa": "checkpoint_density.family.long_document_qa",
                "shared_prefix": "checkpoint_density.family.shared_prefix"}  # the last: the tiny engine's workload
EVICTION_LABEL = {"lru": "checkpoint_density.eviction.lru", "marconi": "checkpoint_density.eviction.marconi"}
COLORS = {"hit": "#1f77b4", "flops": "#2ca02c", "ckpt": "#6a1b9a", "ratio": "#d62728", "recompute": "#ff7f0e"}
POLICY_COLORS = ("#7f7f7f", "#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#17becf", "#bcbd22")


def family_name(name: str) -> str:
    """A workload family's name in the current language (a name read from a CSV that has none: as written)."""
    return t(FAMILY_LABEL[name]) if name in FAMILY_LABEL else name


def cost_figure(N: int, cost: CostModel | None = None) -> go.Figure:
    """Memory ratio (log) and mean recompute per hit vs the checkpoint interval; ``N`` is marked."""
    c = cost or cost_model()
    xs = [2**k for k in range(5, 16)]  # 32 .. 32768
    be = c.state_bytes / c.kv_bytes_per_token
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[ratio(x, c) for x in xs], mode="lines+markers",
                             name=t("checkpoint_density.cost.leg.ratio"), line=dict(color=COLORS["ratio"], width=2),
                             hovertemplate=t("checkpoint_density.cost.hover.ratio").format() + "<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[recompute(x, c)[2] for x in xs], mode="lines+markers", yaxis="y2",
                             name=t("checkpoint_density.cost.leg.recompute"),
                             line=dict(color=COLORS["recompute"], width=2, dash="dot"),
                             hovertemplate=t("checkpoint_density.cost.hover.recompute").format() + "<extra></extra>"))
    fig.add_trace(go.Scatter(x=[N], y=[ratio(N, c)], mode="markers", name=t("checkpoint_density.cost.leg.selected", N=N),
                             marker=dict(size=16, color=COLORS["ratio"], symbol="star",
                                         line=dict(color="#222", width=1)),
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[N], y=[recompute(N, c)[2]], mode="markers", yaxis="y2", showlegend=False,
                             marker=dict(size=14, color=COLORS["recompute"], symbol="star",
                                         line=dict(color="#222", width=1)),
                             hoverinfo="skip"))
    fig.add_hline(y=1, line=dict(color="#555", dash="dash"),
                  annotation=dict(text=t("checkpoint_density.cost.break_even", n=f"{be:,.0f}"), font=dict(size=11)),
                  annotation_position="bottom left")
    fig.add_vline(x=be, line=dict(color="#555", dash="dash", width=1))
    fig.update_layout(
        title=dict(text=t("checkpoint_density.cost.title", N=N, r=f"{ratio(N, c):.2f}", ms=f"{recompute(N, c)[2]:.2f}")),
        height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(type="log", title=t("checkpoint_density.cost.x"), fixedrange=True, range=[math.log10(24), math.log10(45000)]),
        yaxis=dict(type="log", title=t("checkpoint_density.cost.y"), fixedrange=True, range=[-1.5, 3.3]),
        yaxis2=dict(title=t("checkpoint_density.cost.y2"), overlaying="y", side="right", fixedrange=True, showgrid=False,
                    range=[0, recompute(xs[-1], c)[2] * 1.05]))
    return fig


def interval_label(interval: int | None) -> str:
    if interval is None:
        return t("checkpoint_density.interval.dense", B=BLOCK_SIZE)
    if interval == 0:
        return t("checkpoint_density.interval.reachable")
    return t("checkpoint_density.interval.n", N=interval)


def sweep_figure(rows: list[dict], selected: int | None, budget_gib: float) -> go.Figure:
    """Hit rate, FLOPs saved and mean checkpoint memory (as a share of the budget) per retention
    setting, at one budget. ``rows[k]`` is the summary for ``INTERVALS[k]`` (a failed run, with an
    ``"error"``, has no bars)."""
    labels = [interval_label(iv) for iv in INTERVALS]
    nan = float("nan")
    rows = [r if "error" not in r else {"token_hit_rate": nan, "flops_saved_frac": nan, "mean_checkpoint_gib": nan,
                                         "evictions": 0} for r in rows]
    k = INTERVALS.index(selected)
    op = [1.0 if j == k else 0.45 for j in range(len(INTERVALS))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[r["token_hit_rate"] for r in rows], name=t("checkpoint_density.sweep.hit"),
                         marker=dict(color=COLORS["hit"], opacity=op),
                         hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=[r["flops_saved_frac"] for r in rows], name=t("checkpoint_density.sweep.flops"),
                         marker=dict(color=COLORS["flops"], opacity=op),
                         hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.add_trace(go.Scatter(x=labels, y=[r["mean_checkpoint_gib"] / budget_gib for r in rows], mode="lines+markers",
                             name=t("checkpoint_density.sweep.ckpt"), line=dict(color=COLORS["ckpt"]),
                             marker=dict(size=[14 if j == k else 8 for j in range(len(INTERVALS))]),
                             customdata=[[r["mean_checkpoint_gib"], r["evictions"]] for r in rows],
                             hovertemplate=t("checkpoint_density.sweep.hover.ckpt").format() + "<extra></extra>"))
    sel = rows[k]
    title = t("checkpoint_density.sweep.title_failed", b=f"{budget_gib:g}", name=labels[k]) \
        if math.isnan(sel["token_hit_rate"]) else \
        t("checkpoint_density.sweep.title", b=f"{budget_gib:g}", name=labels[k], hit=f"{sel['token_hit_rate']:.1%}",
          flops=f"{sel['flops_saved_frac']:.1%}")  # a failed run's rate is NaN: no rate to give
    fig.update_layout(
        title=dict(text=title),
        barmode="group", height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.2, x=0),
        yaxis=dict(range=[0, 1.05], tickformat=".0%", title=t("checkpoint_density.sweep.y"), fixedrange=True),
        xaxis=dict(title=t("checkpoint_density.sweep.x"), fixedrange=True))
    return fig


def _policy_colors(policies: list[str]) -> dict[str, str]:
    return {p: POLICY_COLORS[i % len(POLICY_COLORS)] for i, p in enumerate(policies)}


BUDGET_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")
BUDGET_GLYPHS = {"circle": "●", "square": "■", "diamond": "◆", "triangle-up": "▲", "x": "✕", "star": "★"}
DODGE = 0.27  # of a row: how far the hit-rate chart nudges a budget's marker from the row's line


def bench_figure(rows: list[dict], family: str, metric: str) -> go.Figure:
    """One workload family: ``metric`` (``token_hit_rate`` or ``flops_saved_frac``) per policy and memory
    budget. The hit rate is a dot chart (:func:`_hit_dots`): a row per policy, a marker per budget, the
    values written beside the row; the FLOPs saved are grouped bars on [0, 1]. Policy colours are fixed
    over the whole file."""
    if metric not in ("token_hit_rate", "flops_saved_frac"):
        raise ValueError(f"metric: must be token_hit_rate or flops_saved_frac, got {metric!r}")
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    colors = _policy_colors(policies)
    budgets = sorted({r["budget_gib"] for r in rows})
    mine = [r for r in rows if r["family"] == family]
    if metric == "token_hit_rate":
        return _hit_dots(mine, policies, colors, budgets, family)
    fig = go.Figure()
    for p in policies:
        pts = sorted((r["budget_gib"], r[metric]) for r in mine if r["policy"] == p)
        if pts:
            fig.add_trace(go.Bar(x=[f"{b:g}" for b, _ in pts], y=[y for _, y in pts], name=p, marker=dict(color=colors[p]),
                                 hovertemplate=f"{p}<br>%{{x}} GiB: %{{y:.1%}}<extra></extra>"))
    fig.update_layout(
        title=dict(text=t("checkpoint_density.bench.flops.title", family=family_name(family))), barmode="group", height=400,
        margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.28, x=0, font=dict(size=11)),
        xaxis=dict(type="category", categoryorder="array", categoryarray=[f"{b:g}" for b in budgets],
                   title=t("checkpoint_density.bench.x"), fixedrange=True),
        yaxis=dict(range=[0, 1.05], tickformat=".0%", title=t("checkpoint_density.bench.flops.y"), fixedrange=True))
    return fig


def hit_range(values: list[float]) -> list[float]:
    """The hit-rate axis: where the values are, with room for a marker on each side (a 0 % value sits
    inside the plot, not on its edge)."""
    lo, hi = min(values, default=0.0), max(values, default=1.0)
    pad = max(0.02, 0.06 * (hi - lo))
    return [lo - pad, hi + pad]


def _hit_dots(mine: list[dict], policies: list[str], colors: dict[str, str], budgets: list[float], family: str) -> go.Figure:
    """The hit rate of each policy (a row, in the file's order, in its colour) at each budget (a marker
    symbol, :data:`BUDGET_SYMBOLS`, nudged up or down within the row so equal values stay apart), the row's
    values written at its right under a head naming the budgets by their symbols: eight policies within a
    few points of each other and a policy at 0 % are each a row of their own, none hidden under another."""
    fig = go.Figure()
    sym = {b: BUDGET_SYMBOLS[k % len(BUDGET_SYMBOLS)] for k, b in enumerate(budgets)}
    nudge = {b: (k - (len(budgets) - 1) / 2) * DODGE for k, b in enumerate(budgets)}
    shown = [p for p in policies if any(r["policy"] == p for r in mine)]
    for row, p in enumerate(shown):
        pts = sorted((r["budget_gib"], r["token_hit_rate"]) for r in mine if r["policy"] == p)
        fig.add_trace(go.Scatter(
            x=[y for _, y in pts], y=[row + nudge[b] for b, _ in pts], mode="markers", name=p, showlegend=False,
            cliponaxis=False,
            marker=dict(color=colors[p], size=9, symbol=[sym[b] for b, _ in pts], line=dict(color="#333", width=0.5)),
            customdata=[f"{b:g}" for b, _ in pts], hovertemplate=f"{p}<br>%{{customdata}} GiB: %{{x:.1%}}<extra></extra>"))
        fig.add_annotation(x=1.0, xref="paper", xanchor="left", xshift=8, y=row, showarrow=False, font=dict(size=11),
                           text=" / ".join(f"{y:.1%}".removesuffix("%") for _, y in pts) + " %")
    fig.add_annotation(x=1.0, xref="paper", xanchor="left", xshift=8, y=1.0, yref="paper", yanchor="bottom",
                       showarrow=False, font=dict(size=11),  # the column's head, and the symbols' legend
                       text=" / ".join(f"{BUDGET_GLYPHS[sym[b]]} {b:g}" for b in budgets) + " GiB")
    fig.update_layout(
        title=dict(text=t("checkpoint_density.bench.hit.title", family=family_name(family))), height=130 + 30 * len(shown),
        margin=dict(l=10, r=170, t=60, b=40), plot_bgcolor="white", showlegend=False,
        xaxis=dict(range=hit_range([r["token_hit_rate"] for r in mine]), tickformat=".0%", showgrid=True, nticks=6,
                   gridcolor="#e5e5e5", zeroline=False, title=t("checkpoint_density.bench.hit.y"), fixedrange=True),
        yaxis=dict(tickmode="array", tickvals=list(range(len(shown))), ticktext=shown, range=[len(shown) - 0.5, -0.5],
                   showgrid=False, zeroline=False, automargin=True, fixedrange=True))
    return fig


def prefix_figure(rows: list[dict], workload_name: str) -> go.Figure:
    """The tiny engine's density benchmark for one workload: reused share of the prompt tokens per policy
    and budget, with the 48B checkpoint GiB those states would take as the bar text."""
    budgets = sorted({r["budget_mb"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    mine = [r for r in rows if r["workload"] == workload_name]
    palette = ("#c6dbef", "#6baed6", "#2171b5", "#08306b", "#4a1486")
    fig = go.Figure()
    for j, b in enumerate(budgets):
        pts = {r["policy"]: r for r in mine if r["budget_mb"] == b}
        fig.add_trace(go.Bar(
            x=[p for p in policies if p in pts],
            y=[pts[p]["cached_prompt_tokens"] / pts[p]["prompt_tokens"] if pts[p]["prompt_tokens"] else 0.0
               for p in policies if p in pts],
            text=[f"{pts[p]['48b_checkpoint_gib']:.2f}" for p in policies if p in pts], textposition="outside",
            name=t("checkpoint_density.tiny.budget", mb=f"{b:g}"), marker=dict(color=palette[j % len(palette)]),
            hovertemplate=t("checkpoint_density.tiny.hover").format() + "<extra></extra>"))
    fig.update_layout(
        title=dict(text=t("checkpoint_density.tiny.title", w=family_name(workload_name))), barmode="group", height=360,
        margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(type="category", categoryorder="array", categoryarray=policies, fixedrange=True),
        yaxis=dict(range=[0, 1.15], tickformat=".0%", title=t("checkpoint_density.tiny.y"), fixedrange=True))
    return fig
