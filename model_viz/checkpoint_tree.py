"""The data and figures of the "Checkpoint placement" page (article sections 5.1, 5.2, 5.4, 9.2).

A canned scenario — a shared system prompt, two questions that branch after it, a follow-up turn
that continues the first conversation, a request that diverges *inside* the system prompt, and a
follow-up of the second question — runs request by request through
``kda_ref.LLM(prefix_cache="radix", checkpoint_policy=...)`` under a memory budget small enough
that the cache must evict. After every request the radix tree is read back (one snapshot per
request); the engine's ``CacheEvent`` trace says what the cache did meanwhile (match, back-off,
copy-on-write, checkpoint creation, snapshot, donate, evict).

Like the other step-through pages, the scenario is **JSONL text**: the events, with the tree
snapshots in the header (``tree_steps``), so the canned run and an uploaded one go through the same
strict reader (:func:`parse`). The layout is computed once from the union of all snapshots
(``x`` = the token boundary a node ends at, ``y`` = a lane from a networkx depth-first walk), so a
node keeps its position from step to step.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import networkx as nx
import plotly.graph_objects as go

from kda_ref.trace import BatchComposition, CacheEvent, RequestArrived, RequestFinished, TraceRecorder, write_jsonl

from . import cache_scenarios as cs
from . import engine_trace as et
from .i18n import t

PAGE_CONCEPTS = ("sglang.radix.kda_aware", "sglang.checkpoint_policy", "kda.chunk_checkpoints",
                 "sglang.cow_snapshot_donate", "sglang.radix.tombstone", "sglang.radix.match_backoff")

POLICIES = ("chunk", "every_n", "branch")
INTERVAL = 2 * cs.CHUNK  # every_n keeps every 32nd boundary
MAX_TOKENS = 3
TOKEN_BUDGET = 32  # max_num_batched_tokens: a long prefill runs in chunks (snapshots at their ends)
SYSTEM = "System: be brief, cite sources. "
SYSTEM_LEN = 40
# (label, how the prompt is built): "sys" = the system prompt, "q:<text>:<n>" = n tokens of text,
# "out:<i>" = the prompt and output of request i (a follow-up turn), "cut:<n>" = the first n tokens
# of the system prompt (a request that diverges inside it), "prompt:<i>" = request i's prompt
SCENARIO = (
    ("r0", ("sys", "q:Q1 what is a KDA state?:14")),
    ("r1", ("sys", "q:Q2 and the MLA cache?:18")),
    ("r2", ("out:0", "q:Q3 more on that:10")),
    ("r3", ("cut:28", "q:Hi! different system:20")),
    ("r4", ("prompt:1", "q:Q5 shorter please:9")),
)
KNOWN_LABELS = tuple(f"ckpt.req.{label}" for label, _ in SCENARIO)  # labels with a description string
STATE_SLOTS_BUDGET = 7  # memory: this many full states (active ones included) ...
KV_TOKENS_BUDGET = 600  # ... plus this many tokens of MLA KV

COLORS = {"checkpoint": "#2ca02c", "kv_only": "#9e9e9e", "tombstone": "#d62728", "root": "#222222",
          "branch": "#ff7f0e"}


def snapshot(tree) -> list[dict]:
    """The radix tree as plain JSON: one dict per node (not the root), parents before children."""
    out, stack = [], [(c, "root", 0, ()) for c in sorted(tree.root.children.values(), key=lambda n: n.key[0])]
    while stack:
        node, parent, start, path = stack.pop(0)
        full = path + tuple(node.key)
        pid = cs.path_id(full)
        out.append({"id": pid, "parent": parent, "key": list(node.key), "start": start, "end": start + len(node.key),
                    "state": node.state, "kv_lock": node.kv_lock})
        stack += [(c, pid, start + len(node.key), full) for c in sorted(node.children.values(), key=lambda n: n.key[0])]
    return out


def record(policy: str = "chunk") -> str:
    """Run the canned scenario under ``policy``; the trace as JSONL with the tree snapshots in the header."""
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    rec = TraceRecorder()
    sizes = cs.radix_llm().pool.sizes
    budget = STATE_SLOTS_BUDGET * sizes.state_bytes + KV_TOKENS_BUDGET * sizes.kv_page_bytes
    llm = cs.radix_llm(tracer=rec, checkpoint_policy=policy, checkpoint_interval=INTERVAL if policy == "every_n" else None,
                       memory_budget_bytes=budget, max_num_batched_tokens=TOKEN_BUDGET)
    prompts, outputs, steps = [], [], []
    for label, parts in SCENARIO:
        prompt = cs.build_prompt(parts, cs.text_tokens(SYSTEM, SYSTEM_LEN), prompts, outputs)
        first = llm.stats()["steps"] + 1
        out = llm.generate([prompt], cs.params(MAX_TOKENS))[0]
        prompts.append(prompt)
        outputs.append(list(out.token_ids))
        last = llm.stats()["steps"]
        evs = [e for e in cs.cache_events(rec.events) if first <= e.step <= last]
        reused = next((e.position for e in evs if e.op == "copy_on_write" and e.req_id == out.req_id), 0)
        steps.append({"req_id": out.req_id, "label": label, "prompt": prompt, "output": list(out.token_ids),
                      "steps": [first, last], "reused": reused, "tree": snapshot(llm.prefix_cache.tree)})
    keep = (CacheEvent, BatchComposition, RequestArrived, RequestFinished)
    buf = io.StringIO()
    write_jsonl([e for e in rec.events if isinstance(e, keep)], buf, metadata={
        "model": "tiny", "scenario": "checkpoint_tree", "policy": policy, "chunk_size": cs.CHUNK,
        "checkpoint_interval": INTERVAL if policy == "every_n" else None, "budget_bytes": budget,
        "state_bytes": sizes.state_bytes, "kv_token_bytes": sizes.kv_page_bytes, "tree_steps": steps})
    return buf.getvalue()


# ---- reading ---------------------------------------------------------------------------------------
@dataclass
class TreeStep:
    req_id: int
    label: str
    prompt: list[int]
    output: list[int]
    steps: tuple[int, int]
    reused: int
    nodes: dict[str, dict]  # id -> node, parents before children
    events: list[CacheEvent] = field(default_factory=list)

    def children(self) -> dict[str, list[str]]:
        kids: dict[str, list[str]] = {"root": []}
        for pid, n in self.nodes.items():
            kids.setdefault(n["parent"], []).append(pid)
            kids.setdefault(pid, [])
        return kids

    def branch_points(self) -> list[str]:
        """Nodes (or the root) where the tree forks: two or more children."""
        return [pid for pid, k in self.children().items() if len(k) >= 2]

    def num_states(self) -> int:
        return sum(n["state"] is not None for n in self.nodes.values())

    def kv_tokens(self) -> int:
        return sum(len(n["key"]) for n in self.nodes.values())


def _bad(msg: str):
    return et.TraceError("ckpt.err.bad_tree", msg=msg)


def _int(x) -> bool:
    return type(x) is int


def read_steps(header: dict, events: list) -> list[TreeStep]:
    """The tree snapshots of the header, checked, with each request's cache events attached."""
    raw = header.get("tree_steps")
    if not isinstance(raw, list) or not raw:
        raise et.TraceError("ckpt.err.no_tree")
    out = []
    for i, s in enumerate(raw):
        where = f"tree_steps[{i}]"
        if not isinstance(s, dict):
            raise _bad(f"{where} is not an object")
        for k, check in (("req_id", _int), ("reused", _int), ("label", lambda x: isinstance(x, str)),
                         ("prompt", lambda x: isinstance(x, list) and all(map(_int, x))),
                         ("output", lambda x: isinstance(x, list) and all(map(_int, x))),
                         ("steps", lambda x: isinstance(x, list) and len(x) == 2 and all(map(_int, x))),
                         ("tree", lambda x: isinstance(x, list))):
            if k not in s or not check(s[k]):
                raise _bad(f"{where}.{k} is missing or has the wrong type")
        nodes: dict[str, dict] = {}
        ends = {"root": 0}
        for j, n in enumerate(s["tree"]):
            w = f"{where}.tree[{j}]"
            if not isinstance(n, dict) or not all(k in n for k in ("id", "parent", "key", "start", "end", "state")):
                raise _bad(f"{w} needs id, parent, key, start, end, state")
            if not (isinstance(n["id"], str) and isinstance(n["parent"], str) and isinstance(n["key"], list)
                    and n["key"] and all(map(_int, n["key"])) and _int(n["start"]) and _int(n["end"])
                    and (n["state"] is None or _int(n["state"]))):
                raise _bad(f"{w} has a field of the wrong type")
            if n["parent"] not in ends:
                raise _bad(f"{w}: parent {n['parent']!r} is not an earlier node")
            if n["start"] != ends[n["parent"]] or n["end"] != n["start"] + len(n["key"]):
                raise _bad(f"{w}: start/end do not follow the parent and the key")
            if n["id"] in nodes:
                raise _bad(f"{w}: duplicate id {n['id']!r}")
            nodes[n["id"]] = dict(n, kv_lock=n.get("kv_lock", 0) if _int(n.get("kv_lock", 0)) else 0)
            ends[n["id"]] = n["end"]
        a, b = s["steps"]
        evs = [e for e in events if isinstance(e, CacheEvent) and a <= e.step <= b]
        out.append(TreeStep(req_id=s["req_id"], label=s["label"], prompt=s["prompt"], output=s["output"],
                            steps=(a, b), reused=s["reused"], nodes=nodes, events=evs))
    return out


def parse(data: bytes | str) -> tuple[dict, list[TreeStep]]:
    """Read a canned or uploaded checkpoint-tree trace; :class:`~model_viz.engine_trace.TraceError` if bad."""
    header, events = et.parse_trace(data)
    return header, read_steps(header, events)


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
    g = nx.DiGraph()
    g.add_node("root")
    for pid, p in paths.items():
        parent = next((by_path[p[:n]] for n in range(len(p) - 1, 0, -1) if p[:n] in by_path), "root")
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


# ---- figures -------------------------------------------------------------------------------------------
def tree_figure(steps: list[TreeStep], i: int, lay: Layout, lang: str = "en") -> go.Figure:
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
                             name=t("ckpt.leg.kv", lang)))
    path = request_path(s)
    px_, py_ = [], []
    for pid in path:
        n = s.nodes[pid]
        (ax, ay), (x, y) = pos[n["parent"]], pos[pid]
        px_ += [ax, ax, x, None]
        py_ += [ay, y, y, None]
    color = et.req_color(s.req_id)
    fig.add_trace(go.Scatter(x=px_, y=py_, mode="lines", line=dict(color=color, width=6), opacity=0.55,
                             hoverinfo="skip", name=t("ckpt.leg.path", lang, r=s.label)))
    branch = s.branch_points()
    fig.add_trace(go.Scatter(
        x=[pos[b][0] for b in branch], y=[pos[b][1] for b in branch], mode="markers", hoverinfo="skip",
        marker=dict(symbol="circle-open", size=26, color=COLORS["branch"], line=dict(width=3)),
        name=t("ckpt.leg.branch", lang)))
    for kind, symbol in (("checkpoint", "circle"), ("kv_only", "circle-open"), ("tombstone", "x")):
        ids = [pid for pid in s.nodes if kinds[pid] == kind]
        fig.add_trace(go.Scatter(
            x=[pos[p][0] for p in ids], y=[pos[p][1] for p in ids], mode="markers+text",
            text=[str(s.nodes[p]["end"]) for p in ids], textposition="top center",
            marker=dict(symbol=symbol, size=[17 if p not in prev else 13 for p in ids], color=COLORS[kind],
                        line=dict(width=[3 if p not in prev else 1 for p in ids], color="#222")),
            customdata=[[s.nodes[p]["start"], s.nodes[p]["end"], cs.span_text(s.nodes[p]["key"]),
                         "—" if s.nodes[p]["state"] is None else s.nodes[p]["state"],
                         t("ckpt.new", lang) if p not in prev else ""] for p in ids],
            hovertemplate=cs.hover("ckpt.hover.node", lang), name=t(f"ckpt.leg.{kind}", lang)))
    fig.add_trace(go.Scatter(x=[0], y=[pos["root"][1]], mode="markers+text", text=["root"], textposition="top center",
                             marker=dict(symbol="square", size=12, color=COLORS["root"]), hoverinfo="skip",
                             showlegend=False))
    if s.reused:
        rx = s.reused
        ry = next((pos[p][1] for p in path if s.nodes[p]["end"] == rx), None)
        if ry is not None:
            fig.add_trace(go.Scatter(x=[rx], y=[ry], mode="markers", name=t("ckpt.leg.restored", lang, r=s.label),
                                     marker=dict(symbol="star", size=20, color=color, line=dict(color="#222", width=1)),
                                     hoverinfo="skip"))
    fig.update_layout(
        title=dict(text=t("ckpt.tree.title", lang, r=s.label, i=i + 1, n=len(steps), states=s.num_states(),
                          kv=s.kv_tokens())),
        height=200 + 70 * lay.lanes, margin=dict(l=10, r=10, t=60, b=110),
        legend=dict(orientation="h", yanchor="top", y=-0.16, x=0),
        xaxis=dict(range=[-3, lay.x_max + 4], title=t("ckpt.axis.boundary", lang), fixedrange=True, zeroline=False),
        yaxis=dict(range=[-lay.lanes + 0.4, 0.8], visible=False, fixedrange=True), plot_bgcolor="white")
    return fig


def reuse_figure(steps: list[TreeStep], i: int, lang: str = "en") -> go.Figure:
    """Per request: prompt tokens restored from a checkpoint vs computed; checkpoints kept after it."""
    labels = [s.label for s in steps]
    reused = [s.reused for s in steps]
    computed = [len(s.prompt) - s.reused for s in steps]
    op = [1.0 if k == i else 0.35 for k in range(len(steps))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=reused, name=t("ckpt.bar.reused", lang), marker=dict(color="#2ca02c", opacity=op)))
    fig.add_trace(go.Bar(x=labels, y=computed, name=t("ckpt.bar.computed", lang),
                         marker=dict(color="#ff7f0e", opacity=op, pattern_shape="/")))
    fig.add_trace(go.Scatter(x=labels, y=[s.num_states() for s in steps], name=t("ckpt.bar.states", lang),
                             mode="lines+markers", yaxis="y2", line=dict(color="#6a1b9a"),
                             marker=dict(size=[14 if k == i else 8 for k in range(len(steps))])))
    top = max(len(s.prompt) for s in steps)
    fig.update_layout(
        title=dict(text=t("ckpt.bar.title", lang, r=steps[i].label, reused=reused[i], computed=computed[i])),
        barmode="stack", height=300, margin=dict(l=10, r=10, t=60, b=30), legend=dict(orientation="h", y=-0.2, x=0),
        yaxis=dict(range=[0, top * 1.1], title=t("ckpt.bar.tokens", lang), fixedrange=True),
        yaxis2=dict(range=[0, max(s.num_states() for s in steps) + 2], overlaying="y", side="right", dtick=1,
                    title=t("ckpt.bar.states", lang), fixedrange=True, showgrid=False),
        xaxis=dict(fixedrange=True))
    return fig


def event_lines(step: TreeStep, lang: str) -> list[str]:
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
        lines.append(t(f"ckpt.ev.{e.op}", lang, **fmt))
    return lines
