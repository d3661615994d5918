"""Figures and text of the "Checkpoint placement" page: :func:`node_kinds`, :func:`layout`,
:func:`request_path`, :func:`tree_figure`, :func:`reuse_figure`, :func:`event_lines`.

What they draw comes from :mod:`model_viz.scenarios.checkpoint_tree` (the run and its checks); the page
(``app_pages/checkpoint_tree.py``) wires widgets to both. ``PAGE_CONCEPTS`` are the concepts the page explains.
"""

from __future__ import annotations
from dataclasses import dataclass
import networkx as nx
import plotly.graph_objects as go
from . import frame
from ..scenarios import common as cs
from ..scenarios import engine_trace as et
from ..i18n import plural, t
from ..scenarios.checkpoint_tree import TreeStep


PAGE_CONCEPTS = ("sglang.radix.kda_aware", "sglang.checkpoint_policy", "kda.chunk_checkpoints",
                 "sglang.cow_snapshot_donate", "sglang.radix.tombstone", "sglang.radix.match_backoff")
X_PAD = 0.04  # of the tree's width, left of the root and right of the deepest node
LEGEND_WIDTH_PX = 600  # the width the legend is laid out for (narrower than the Live and Lab pages' charts)
COLORS = {"checkpoint": "#2ca02c", "kv_only": "#9e9e9e", "tombstone": "#d62728", "root": "#222222",
          "branch": "#ff7f0e"}

# i18n keys, written out whole so a test can see which strings are used
REQUEST_TEXT = {"r0": "checkpoint_tree.req.r0", "r1": "checkpoint_tree.req.r1", "r2": "checkpoint_tree.req.r2",
                "r3": "checkpoint_tree.req.r3", "r4": "checkpoint_tree.req.r4"}  # the canned requests' descriptions
POLICY_LABEL = {"sglang": "checkpoint_tree.policy.sglang", "sglang_no_buffer": "checkpoint_tree.policy.sglang_no_buffer",
                "chunk": "checkpoint_tree.policy.chunk",
                "every_n": "checkpoint_tree.policy.every_n", "branch": "checkpoint_tree.policy.branch"}
POLICY_HELP = {"sglang": "checkpoint_tree.policy_help.sglang",
               "sglang_no_buffer": "checkpoint_tree.policy_help.sglang_no_buffer", "chunk": "checkpoint_tree.policy_help.chunk",
               "every_n": "checkpoint_tree.policy_help.every_n", "branch": "checkpoint_tree.policy_help.branch"}
LEGEND = {"checkpoint": "checkpoint_tree.leg.checkpoint", "kv_only": "checkpoint_tree.leg.kv_only",
          "tombstone": "checkpoint_tree.leg.tombstone"}
EVENT_TEXT = {"track": "checkpoint_tree.ev.track", "match": "checkpoint_tree.ev.match", "backoff": "checkpoint_tree.ev.backoff",
              "copy_on_write": "checkpoint_tree.ev.copy_on_write", "checkpoint_create": "checkpoint_tree.ev.checkpoint_create",
              "snapshot": "checkpoint_tree.ev.snapshot", "donate": "checkpoint_tree.ev.donate",
              "evict": "checkpoint_tree.ev.evict", "tombstone": "checkpoint_tree.ev.tombstone"}


# ---- derived facts -----------------------------------------------------------------------------------
def _paths(step: TreeStep) -> dict[str, tuple]:
    paths: dict[str, tuple] = {"root": ()}
    for pid, n in step.nodes.items():
        paths[pid] = paths[n["parent"]] + tuple(n["key"])
    return paths


def node_kinds(steps: list[TreeStep]) -> list[dict[str, str]]:
    """Per step, node id -> ``checkpoint`` (holds a state), ``tombstone`` (had one in an earlier step,
    lost it) or ``kv_only`` (KV without a state since it exists, e.g. the upper half of a split)."""
    had: set[str] = set()
    out = []
    for s in steps:
        kinds = {}
        for pid, n in s.nodes.items():
            if n["state"] is not None:
                kinds[pid] = "checkpoint"
            else:
                kinds[pid] = "tombstone" if pid in had else "kv_only"
        had |= {pid for pid, n in s.nodes.items() if n["state"] is not None}
        out.append(kinds)
    return out


@dataclass
class Layout:
    pos: dict[str, tuple[float, float]]  # id -> (x = end boundary, y = lane)
    x_max: int
    lanes: int


def layout(steps: list[TreeStep]) -> Layout:
    """Fixed positions for every node of every snapshot: x = the token boundary where the node ends,
    y = a lane. The union of the snapshots is one tree (nodes are identified by their token path);
    a networkx depth-first walk gives each leaf a lane, and a parent takes its first child's lane,
    so the oldest path stays on the top line and later branches open below it."""
    paths: dict[str, tuple] = {}
    first_seen: dict[str, int] = {}
    for k, s in enumerate(steps):
        for pid, p in _paths(s).items():
            if pid != "root":
                paths.setdefault(pid, p)
                first_seen.setdefault(pid, k)
    by_path = {p: pid for pid, p in paths.items()}
    ends = sorted({len(p) for p in paths.values()}, reverse=True)  # a parent ends at another node's end
    g = nx.DiGraph()
    g.add_node("root")
    for pid, p in paths.items():  # the deepest other node whose path is a prefix of this one
        parent = next((by_path[p[:n]] for n in ends if n < len(p) and p[:n] in by_path), "root")
        g.add_edge(parent, pid)

    def order(nodes):
        return sorted(nodes, key=lambda n: (first_seen.get(n, -1), paths.get(n, ())))

    lane: dict[str, float] = {}
    nxt = 0
    for n in nx.dfs_postorder_nodes(g, "root", sort_neighbors=order):
        kids = order(g.successors(n))
        if kids:
            lane[n] = lane[kids[0]]
        else:
            lane[n] = nxt
            nxt += 1
    pos = {n: (float(len(paths.get(n, ()))), -float(lane[n])) for n in g.nodes}
    return Layout(pos=pos, x_max=max((len(p) for p in paths.values()), default=1), lanes=max(nxt, 1))


def request_path(step: TreeStep) -> list[str]:
    """The nodes on the path of the step's request (its prompt and computed output), root first."""
    seq = tuple(step.prompt + step.output[:-1])
    return [pid for pid, p in _paths(step).items() if pid != "root" and seq[: len(p)] == p]


def label_sides(ids: list[str], pos: dict[str, tuple[float, float]], x_max: float) -> dict[str, str]:
    """``textposition`` per node: above, unless the nearest labelled node to its left on the same lane is
    closer than a label's width (nodes a few tokens apart at a branch point), then below, alternating."""
    gap = max(1.0, x_max / 18)  # about a three-digit label's width on the axis
    side: dict[str, str] = {}
    by_lane: dict[float, list[str]] = {}
    for pid in ids:
        by_lane.setdefault(pos[pid][1], []).append(pid)
    for lane in by_lane.values():
        prev = None
        for pid in sorted(lane, key=lambda p: pos[p][0]):
            close = prev is not None and pos[pid][0] - pos[prev][0] < gap
            side[pid] = ("bottom center" if side[prev] == "top center" else "top center") if close else "top center"
            prev = pid
    return side


# ---- figures -------------------------------------------------------------------------------------------
def tree_figure(steps: list[TreeStep], i: int, lay: Layout) -> go.Figure:
    """The tree after request ``i``: positions from ``lay`` (fixed), colours by node kind."""
    s = steps[i]
    kinds = node_kinds(steps)[i]
    prev = set(steps[i - 1].nodes) if i > 0 else set()
    pos = lay.pos
    fig = go.Figure()
    ex, ey = [], []
    for pid, n in s.nodes.items():
        (px, py), (x, y) = pos[n["parent"]], pos[pid]
        ex += [px, px, x, None]
        ey += [py, y, y, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#bdbdbd", width=3), hoverinfo="skip",
                             name=t("checkpoint_tree.leg.kv")))
    path = request_path(s)
    px_, py_ = [], []
    for pid in path:
        n = s.nodes[pid]
        (ax, ay), (x, y) = pos[n["parent"]], pos[pid]
        px_ += [ax, ax, x, None]
        py_ += [ay, y, y, None]
    color = et.req_color(s.req_id)
    fig.add_trace(go.Scatter(x=px_, y=py_, mode="lines", line=dict(color=color, width=6), opacity=0.55,
                             hoverinfo="skip", name=t("checkpoint_tree.leg.path", r=s.label)))
    branch = s.branch_points()
    fig.add_trace(go.Scatter(
        x=[pos[b][0] for b in branch], y=[pos[b][1] for b in branch], mode="markers", hoverinfo="skip",
        marker=dict(symbol="circle-open", size=26, color=COLORS["branch"], line=dict(width=3)),
        name=t("checkpoint_tree.leg.branch")))
    _node_traces(fig, s, kinds, prev, lay)
    fig.add_trace(go.Scatter(x=[0], y=[pos["root"][1]], mode="markers+text", text=["root"], textposition="top right",
                             marker=dict(symbol="square", size=12, color=COLORS["root"]), hoverinfo="skip",
                             showlegend=False))
    if s.reused:
        rx = s.reused
        ry = next((pos[p][1] for p in path if s.nodes[p]["end"] == rx), None)
        if ry is not None:
            fig.add_trace(go.Scatter(x=[rx], y=[ry], mode="markers", name=t("checkpoint_tree.leg.restored", r=s.label),
                                     marker=dict(symbol="star", size=20, color=color, line=dict(color="#222", width=1)),
                                     hoverinfo="skip"))
    fig.update_layout(
        title=dict(text=t("checkpoint_tree.tree.title", r=s.label, i=i + 1, n=len(steps),
                          states=plural(s.num_states(), "checkpoint_tree.n_states.one", "checkpoint_tree.n_states.many"),
                          kv=s.kv_tokens())),
        margin=dict(l=10, r=10, b=50),
        xaxis=dict(range=x_range(lay.x_max), title=t("checkpoint_tree.axis.boundary"), fixedrange=True, zeroline=False),
        yaxis=dict(range=[-lay.lanes + 0.4, 0.8], visible=False, fixedrange=True), plot_bgcolor="white")
    return _legend_under_title(fig, plot_px=70 + 70 * lay.lanes)


def _node_traces(fig: go.Figure, s: TreeStep, kinds: dict[str, str], prev: set[str], lay: Layout) -> None:
    """One marker trace per node kind, each node labelled with its end boundary (new nodes drawn larger)."""
    pos = lay.pos
    sides = label_sides(list(s.nodes), pos, lay.x_max)
    for kind, symbol in (("checkpoint", "circle"), ("kv_only", "circle-open"), ("tombstone", "x")):
        ids = [pid for pid in s.nodes if kinds[pid] == kind]
        fig.add_trace(go.Scatter(
            x=[pos[p][0] for p in ids], y=[pos[p][1] for p in ids], mode="markers+text",
            text=[str(s.nodes[p]["end"]) for p in ids], textposition=[sides[p] for p in ids],
            marker=dict(symbol=symbol, size=[17 if p not in prev else 13 for p in ids], color=COLORS[kind],
                        line=dict(width=[3 if p not in prev else 1 for p in ids], color="#222")),
            customdata=[[s.nodes[p]["start"], s.nodes[p]["end"], cs.span_text(s.nodes[p]["key"]),
                         "—" if s.nodes[p]["state"] is None else s.nodes[p]["state"],
                         t("checkpoint_tree.new") if p not in prev else ""] for p in ids],
            hovertemplate=cs.hover("checkpoint_tree.hover.node"), name=t(LEGEND[kind])))


def x_range(x_max: float) -> list[float]:
    """The tree's x range: :data:`X_PAD` of the width beyond the root and the deepest node (3 tokens at
    least), so the labels centred on them (``root``, a node's end) stay inside the plot at any length."""
    pad = max(3.0, X_PAD * x_max)
    return [-pad, x_max + pad]


def legend_rows(names: list[str], width_px: int | None = None) -> int:
    """About how many rows a horizontal legend of ``names`` takes on ``width_px`` (:data:`LEGEND_WIDTH_PX`)
    of the figure: each entry its symbol (40 px) and its text (7 px a Latin character, 12 px a Chinese one)."""
    width_px = width_px or LEGEND_WIDTH_PX
    rows, used = 1, 0
    for name in names:
        w = 40 + sum(12 if ord(ch) >= 0x2E80 else 7 for ch in name)
        if used and used + w > width_px:
            rows, used = rows + 1, 0
        used += w
    return rows


def _legend_under_title(fig: go.Figure, plot_px: int) -> go.Figure:
    """The legend right under the title (both in the top margin, the title below the modebar), the top
    margin as deep as both: a legend that wraps onto more rows (:func:`legend_rows`) deepens the margin
    instead of climbing over the title; the figure grows with it, the plot keeps ``plot_px``."""
    frame.title_room(fig)
    top = frame.title_band_px(fig) + frame.GAP_PX
    rows = legend_rows([d.name for d in fig.data if d.showlegend is not False and d.name])
    margin_t = top + rows * frame.LEGEND_ROW_PX + frame.GAP_PX
    height = margin_t + plot_px + fig.layout.margin.b
    fig.update_layout(height=height, margin=dict(t=margin_t),
                      legend=dict(orientation="h", yref="container", y=1 - top / height, yanchor="top",
                                  x=0, xanchor="left"))
    return fig


def reuse_figure(steps: list[TreeStep], i: int) -> go.Figure:
    """Per request: prompt tokens restored from a checkpoint vs computed; checkpoints kept after it."""
    labels = [s.label for s in steps]
    reused = [s.reused for s in steps]
    computed = [len(s.prompt) - s.reused for s in steps]
    op = [1.0 if k == i else 0.35 for k in range(len(steps))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=reused, name=t("checkpoint_tree.bar.reused"), marker=dict(color="#2ca02c", opacity=op)))
    fig.add_trace(go.Bar(x=labels, y=computed, name=t("checkpoint_tree.bar.computed"),
                         marker=dict(color="#ff7f0e", opacity=op, pattern_shape="/")))
    fig.add_trace(go.Scatter(x=labels, y=[s.num_states() for s in steps], name=t("checkpoint_tree.bar.states"),
                             mode="lines+markers", yaxis="y2", line=dict(color="#6a1b9a"),
                             marker=dict(size=[14 if k == i else 8 for k in range(len(steps))])))
    top = max(len(s.prompt) for s in steps)
    fig.update_layout(
        title=dict(text=t("checkpoint_tree.bar.title", r=steps[i].label, reused=reused[i], computed=computed[i])),
        barmode="stack", height=300, margin=dict(l=10, r=10, t=60, b=30), legend=dict(orientation="h", y=-0.2, x=0),
        yaxis=dict(range=[0, top * 1.1], title=t("checkpoint_tree.bar.tokens"), fixedrange=True),
        yaxis2=dict(range=[0, max(s.num_states() for s in steps) + 2], overlaying="y", side="right", dtick=1,
                    title=t("checkpoint_tree.bar.states"), fixedrange=True, showgrid=False),
        xaxis=dict(fixedrange=True))
    return fig


def event_lines(step: TreeStep) -> list[str]:
    """The cache events of the step as sentences (one per event, in order)."""
    lines = []
    for e in step.events:
        if e.op not in cs.CACHE_OPS_SHOWN:
            continue
        d = dict(e.detail or {})
        r = "—" if e.req_id is None else f"r{e.req_id}"
        fmt = {"r": r, "pos": "—" if e.position is None else e.position, "kv": d.get("kv_len", "—"),
               "st": d.get("state_len", "—"), "b": d.get("branching_len") if d.get("branching_len") is not None else "—",
               "frm": d.get("from_len", "—"), "ckpt": d.get("checkpoint", "—"), "active": d.get("active", "—"),
               "why": d.get("reason", "—"), "step": e.step}
        lines.append(t(EVENT_TEXT[e.op], **fmt))
    return lines
