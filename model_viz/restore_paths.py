"""The data and figures of the "Restore paths" page (article sections 4.2, 4.3, 5.4, 6.11).

What the engine does when a request's prefix is in the radix cache, as steps: **match** (the KV
hit), **back-off** (to the deepest checkpoint), the **boundary check** (the checkpoint must hold
the recurrent state *and* the conv windows after exactly the tokens whose KV is reused),
**copy-on-write restore** (the checkpoint is copied into a fresh active slot; the cached one is
never written), **recompute** of the tail, and the **result** compared with a run without cache.

"Break it" restores a checkpoint from the wrong boundary, for real: the engine's
``RadixPrefixCache.check_boundary`` is first called on that checkpoint (it raises
:class:`~kda_ref.cache.BoundaryMismatchError`; the page shows the message), then it is
**deliberately bypassed** on this one engine instance and the request runs anyway, so the page can
show how far the logits move. Nothing here changes ``kda_ref``; the bypass lives only in
:func:`run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from kda_ref.cache import BoundaryMismatchError
from kda_ref.memory import PageKind
from kda_ref.trace import BatchComposition, TraceRecorder

from . import cache_scenarios as cs
from .i18n import t

PAGE_CONCEPTS = ("sglang.radix.match_backoff", "sglang.boundary_consistency", "sglang.cow_snapshot_donate",
                 "state.conv", "memory.state_slot", "kda.chunk_checkpoints")

PROMPT = "Restore the state at the same boundary as the KV, or the answer changes. "
PROMPT_LEN = 70
MAX_TOKENS = 4  # request A (cached first)
GEN = 5  # request B
TAIL = "Now a new question:"
# the request to restore, and how it is built from A: (id, shared prompt tokens or "turn", own tokens)
REQUESTS = (("mid", 57, 8), ("turn", "turn", 6), ("short", 21, 8))
MODES = ("none", "boundary", "conv")
STEPS = ("arrive", "match", "backoff", "check", "restore", "recompute", "compare")
SAME_TOL = 1e-4  # cached vs uncached logits
BROKEN_MIN = 1e-3  # a wrong restore must move the logits at least this much (checked)

COLORS = {"prompt": "#7f7f7f", "kv": "#1f77b4", "ok": "#2ca02c", "bad": "#d62728", "recompute": "#ff7f0e",
          "gen": "#6a1b9a", "ckpt": "#145a32", "idle": "#e5e5e5"}


@dataclass
class RestoreRun:
    request: str
    mode: str
    prompt: list[int]  # request B
    cached_len: int  # T: tokens of A in the tree
    checkpoints: list[int]  # checkpoint boundaries on A's path
    kv_len: int  # the KV hit (match)
    state_len: int  # c: the deepest checkpoint <= kv_len (back-off)
    restored_from: int  # the boundary the restored state really describes (= c unless broken)
    ckpt_slot: int  # the checkpoint the engine copied from
    active_slot: int  # the fresh active slot it copied into
    check_ok: bool
    check_msg: str  # "" when the check passes, else the BoundaryMismatchError message
    recorded_boundary: int | None  # what the checkpoint's boundary record says
    state_diff: float  # relative |S_restored - S_correct| (recurrent, all KDA layers)
    conv_diff: float  # relative |conv_restored - conv_correct|
    chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (engine step, start, tokens) of B's prefill
    tokens: list[int] = field(default_factory=list)  # B's output from this (possibly broken) restore
    correct_tokens: list[int] = field(default_factory=list)  # with a correct restore
    ref_tokens: list[int] = field(default_factory=list)  # without prefix cache
    diffs: list[float] = field(default_factory=list)  # per generated token: max |dlogit| this run vs reference
    correct_diffs: list[float] = field(default_factory=list)  # correct restore vs reference

    @property
    def N(self) -> int:
        return len(self.prompt)

    @property
    def broken(self) -> bool:
        return self.mode != "none"

    @property
    def recompute(self) -> int:
        return self.N - self.state_len

    @property
    def same_tokens(self) -> bool:
        return self.tokens == self.ref_tokens


def build_request(name: str, a_prompt: list[int], a_out: list[int]) -> list[int]:
    spec = next((r for r in REQUESTS if r[0] == name), None)
    if spec is None:
        raise ValueError(f"request: must be one of {[r[0] for r in REQUESTS]}, got {name!r}")
    _, shared, own = spec
    tail = cs.text_tokens(TAIL, own)
    if shared == "turn":  # the next turn of A's conversation: A's prompt, A's answer, a new question
        return a_prompt + a_out + tail
    if tail[0] == a_prompt[shared]:
        tail[0] = (tail[0] + 1) % 256
    return a_prompt[:shared] + tail


def _path_states(tree, tokens: list[int]):
    """(boundary, node) for every node with a state on the path of ``tokens`` (no splitting)."""
    out, node, i = [], tree.root, 0
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        if tokens[i:i + len(child.key)] != child.key:
            break
        node, i = child, i + len(child.key)
        if node.state is not None:
            out.append((i, node))
    return out


def _rel(a, b) -> float:
    den = float(b.float().norm()) or 1.0
    return float((a.float() - b.float()).norm()) / den


def _generate_cached(request: str, mode: str, rec: TraceRecorder):
    """Request A, then B through the same engine; with ``mode != "none"`` B restores a wrong state."""
    llm = cs.radix_llm(tracer=rec)
    a_prompt = cs.text_tokens(PROMPT, PROMPT_LEN)
    a_out = llm.generate([a_prompt], cs.params(MAX_TOKENS))[0].token_ids
    prompt = build_request(request, a_prompt, list(a_out))
    prefix, pool = llm.prefix_cache, llm.pool
    cached = a_prompt + list(a_out[:-1])
    on_a = _path_states(prefix.tree, cached)
    known = prompt[:-1]  # the engine matches all but the last prompt token (its logits are needed)
    on_b = _path_states(prefix.tree, known)
    cs.require(bool(on_b), f"request {request}: no checkpoint on its path")
    c, node = on_b[-1]
    right = node.state
    units = prefix.tree.match_prefix(known[:c]).kv_indices  # ends on a node boundary: no split
    info = {"prompt": prompt, "cached": cached, "checkpoints": [b for b, _ in on_a], "c": c, "right": right,
            "restored_from": c, "check_ok": True, "check_msg": "", "recorded": prefix.boundary.get(right, (None,))[0]}
    prefix.check_boundary(right, known[:c], units)  # the honest restore passes the engine's check
    rec_t, conv_t = pool.tensors.recurrent, pool.tensors.conv
    if mode != "none":
        others = [(b, n) for b, n in on_a if b != c]
        earlier = [(b, n) for b, n in others if b < c]
        wb, wnode = (earlier[-1] if earlier else others[0])
        if mode == "boundary":  # the whole checkpoint of another boundary
            bad = wnode.state
            info["restored_from"] = wb
        else:  # the right recurrent state, with the conv windows of another boundary
            (bad,) = pool.alloc(PageKind.CHECKPOINT, 1, owner="viz")
            pool.copy_state(right, bad, PageKind.CHECKPOINT, PageKind.CHECKPOINT)
            conv_t[:, bad] = conv_t[:, wnode.state]
            info["restored_from"] = wb
        try:
            prefix.check_boundary(bad, known[:c], units)  # what the real engine says about this restore
        except BoundaryMismatchError as e:
            info["check_ok"], info["check_msg"] = False, str(e)
        cs.require(not info["check_ok"], "the engine's boundary check accepted a checkpoint from another boundary")
        info["recorded"] = prefix.boundary.get(bad, (None,))[0]
        info["state_diff"] = _rel(rec_t[:, bad], rec_t[:, right])
        info["conv_diff"] = _rel(conv_t[:, bad], conv_t[:, right])
        # deliberately broken: the node at boundary c now points at the wrong checkpoint, and this
        # engine instance skips the check that would refuse it
        node.state = bad
        prefix.check_boundary = lambda *a, **k: None
    else:
        info["state_diff"] = info["conv_diff"] = 0.0
    start = len(rec.events)
    out = llm.generate([prompt], cs.params(GEN))[0]
    if mode != "none":
        node.state = right
        del prefix.check_boundary  # back to the class's method
    return out, info, rec.events[start:]


def run(request: str = "mid", mode: str = "none") -> RestoreRun:
    """Run A then B with a correct restore, with the chosen (possibly broken) restore, and without cache."""
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
    rec = TraceRecorder()
    out, info, events = _generate_cached(request, mode, rec)
    if mode == "none":
        good = out
    else:
        good, _, _ = _generate_cached(request, "none", TraceRecorder())
    prompt = info["prompt"]
    ref = cs.plain_llm().generate([prompt], cs.params(GEN))[0]

    evs = cs.cache_events(events, out.req_id)
    match = next(e for e in evs if e.op == "match")
    cow = next((e for e in evs if e.op == "copy_on_write"), None)
    cs.require(cow is not None and cow.position == info["c"],
               f"the engine restored at {None if cow is None else cow.position}, expected {info['c']}")
    chunks = [(e.step, e.context_lens[i], e.cu_seqlens[i + 1] - e.cu_seqlens[i])
              for e in events if isinstance(e, BatchComposition)
              for i, r in enumerate(e.req_ids) if r == out.req_id and e.phases[i] == "extend"]
    cs.require(sum(n for _, _, n in chunks) == len(prompt) - info["c"],
               "the prefill after the restore did not cover exactly the tail")
    diffs = [cs.max_abs_diff(a, b) for a, b in zip(out.logits, ref.logits)]
    good_diffs = [cs.max_abs_diff(a, b) for a, b in zip(good.logits, ref.logits)]
    cs.require(good.token_ids == ref.token_ids and max(good_diffs) <= SAME_TOL,
               f"a correct restore changed the output (max |dlogit| {max(good_diffs):.2e})")
    if mode != "none":
        cs.require(max(diffs) > BROKEN_MIN, f"restoring the wrong boundary did not change the logits ({max(diffs):.2e})")
    return RestoreRun(
        request=request, mode=mode, prompt=prompt, cached_len=len(info["cached"]), checkpoints=info["checkpoints"],
        kv_len=int(match.detail["kv_len"]), state_len=int(match.detail["state_len"]),
        restored_from=info["restored_from"], ckpt_slot=int(cow.detail["checkpoint"]),
        active_slot=int(cow.detail["active"]), check_ok=info["check_ok"], check_msg=info["check_msg"],
        recorded_boundary=info["recorded"], state_diff=info["state_diff"], conv_diff=info["conv_diff"], chunks=chunks,
        tokens=list(out.token_ids), correct_tokens=list(good.token_ids), ref_tokens=list(ref.token_ids),
        diffs=diffs, correct_diffs=good_diffs)


# ---- figures -------------------------------------------------------------------------------------
def _bar(fig, y, start, length, color, name, hover, pattern="", show=True):
    fig.add_trace(go.Bar(y=[y], x=[length], base=[start], orientation="h", width=0.55, name=name,
                         marker=dict(color=color, pattern_shape=pattern), showlegend=show and bool(name),
                         hovertemplate=hover + "<extra></extra>"))


def path_figure(r: RestoreRun, i: int, lang: str = "en") -> go.Figure:
    """The restore path up to step ``i`` (index into :data:`STEPS`) on a token axis."""
    step = STEPS[i]
    N, G, c = r.N, len(r.tokens), r.state_len
    rows = [t(f"rst.row.{k}", lang) for k in ("request", "kv", "ckpt", "active")]
    req, kv, ck, act = rows
    fig = go.Figure()
    _bar(fig, req, 0, N, COLORS["prompt"], t("rst.leg.prompt", lang), t("rst.hover.prompt", lang, N=N))
    if i >= STEPS.index("compare"):
        _bar(fig, req, N, G, COLORS["gen"], t("rst.leg.gen", lang), t("rst.hover.gen", lang, G=G), pattern=".")
    if i >= STEPS.index("match"):
        _bar(fig, kv, 0, r.kv_len, COLORS["kv"], t("rst.leg.kv", lang), t("rst.hover.kv", lang, n=r.kv_len))
    if r.cached_len > r.kv_len and i >= STEPS.index("match"):
        _bar(fig, kv, r.kv_len, r.cached_len - r.kv_len, COLORS["idle"], t("rst.leg.other", lang),
             t("rst.hover.other", lang, a=r.kv_len, b=r.cached_len))
    xs = r.checkpoints
    reach = r.kv_len if i >= STEPS.index("match") else -1
    fig.add_trace(go.Scatter(
        x=xs, y=[ck] * len(xs), mode="markers", name=t("rst.leg.ckpt", lang),
        marker=dict(symbol="diamond", size=[18 if (x == c and i >= STEPS.index("backoff")) else 11 for x in xs],
                    color=[COLORS["ckpt"] if x <= reach else "#bdbdbd" for x in xs], line=dict(color="white", width=1)),
        hovertemplate=cs.hover("rst.hover.ckpt", lang)))
    if i >= STEPS.index("backoff") and r.kv_len != c:
        fig.add_annotation(x=c, y=ck, ax=r.kv_len, ay=ck, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=3, arrowwidth=2, arrowcolor=COLORS["recompute"], text="")
    if i >= STEPS.index("check"):
        fig.add_trace(go.Scatter(
            x=[c], y=[ck], mode="markers", hoverinfo="skip",
            name=t("rst.leg.check_bad" if r.broken else "rst.leg.check_ok", lang),
            marker=dict(symbol="circle-open", size=28, line=dict(width=3),
                        color=COLORS["bad"] if r.broken else COLORS["ok"])))
    if i >= STEPS.index("check") and r.broken:
        fig.add_trace(go.Scatter(x=[r.restored_from], y=[ck], mode="markers", name=t("rst.leg.wrong", lang),
                                 marker=dict(symbol="x", size=18, color=COLORS["bad"]),
                                 hovertemplate=t("rst.hover.wrong", lang, b=r.restored_from) + "<extra></extra>"))
    if i >= STEPS.index("restore"):
        color = COLORS["bad"] if r.broken else COLORS["ok"]
        _bar(fig, act, 0, c, color, t("rst.leg.restored", lang),
             t("rst.hover.restored", lang, c=c, ck=r.ckpt_slot, a=r.active_slot))
    if i >= STEPS.index("recompute"):
        _bar(fig, act, c, N - c, COLORS["recompute"], t("rst.leg.recompute", lang),
             t("rst.hover.recompute", lang, c=c, N=N, n=N - c), pattern="/")
    if i >= STEPS.index("compare"):
        ok = [a == b for a, b in zip(r.tokens, r.ref_tokens)]
        fig.add_trace(go.Scatter(
            x=[N + k + 0.5 for k in range(G)], y=[act] * G, mode="markers+text", name=t("rst.leg.tokens", lang),
            text=["✓" if o else "✗" for o in ok], textposition="middle center", textfont=dict(color="white", size=13),
            marker=dict(symbol="square", size=18, color=[COLORS["ok"] if o else COLORS["bad"] for o in ok]),
            hovertemplate=cs.hover("rst.hover.token", lang),
            customdata=[[a, b] for a, b in zip(r.tokens, r.ref_tokens)]))
    fig.add_vline(x=c, line=dict(color="#555", dash="dot", width=1)) if i >= STEPS.index("backoff") else None
    fig.update_layout(
        title=dict(text=t(f"rst.fig.{step}", lang, N=N, kv=r.kv_len, c=c, n=N - c, ck=r.ckpt_slot, a=r.active_slot,
                          b=r.restored_from)),
        barmode="overlay", height=360, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(range=[-0.5, max(N + G, r.cached_len) + 1.5], title=t("rst.axis.position", lang), fixedrange=True),
        yaxis=dict(categoryorder="array", categoryarray=list(reversed(rows)), fixedrange=True))
    return fig


def divergence_figure(r: RestoreRun, lang: str = "en") -> go.Figure:
    """Per generated token: max |Δlogit| against the run without cache (log scale, fixed range)."""
    xs = [str(k + 1) for k in range(len(r.diffs))]
    floor = 1e-8
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[max(d, floor) for d in r.correct_diffs], name=t("rst.div.correct", lang),
                         marker=dict(color=COLORS["ok"])))
    if r.broken:
        fig.add_trace(go.Bar(x=xs, y=[max(d, floor) for d in r.diffs], name=t("rst.div.broken", lang),
                             marker=dict(color=COLORS["bad"])))
    fig.add_hline(y=SAME_TOL, line=dict(color="#555", dash="dash", width=1),
                  annotation_text=t("rst.div.tol", lang, tol=f"{SAME_TOL:g}"), annotation_position="top left")
    fig.update_layout(
        title=dict(text=t("rst.div.title_broken" if r.broken else "rst.div.title_ok", lang,
                          d=f"{max(r.diffs):.1e}", same=sum(a == b for a, b in zip(r.tokens, r.ref_tokens)),
                          G=len(r.tokens))),
        barmode="group", height=300, margin=dict(l=10, r=10, t=60, b=40), legend=dict(orientation="h", y=-0.25, x=0),
        xaxis=dict(title=t("rst.axis.gen", lang), fixedrange=True),
        yaxis=dict(type="log", range=[-8.2, 2], title=t("rst.axis.diff", lang), fixedrange=True))
    return fig


def step_text(r: RestoreRun, i: int, lang: str) -> str:
    """The explanation of step ``i`` for this run (markdown)."""
    step = STEPS[i]
    fmt = dict(N=r.N, known=r.N - 1, kv=r.kv_len, kv_minus_c=r.kv_len - r.state_len, c=r.state_len, n=r.N - r.state_len, ck=r.ckpt_slot,
               a=r.active_slot, b=r.restored_from, T=r.cached_len, chunks=", ".join(f"{s}+{n}" for _, s, n in r.chunks),
               same=sum(a == b for a, b in zip(r.tokens, r.ref_tokens)), G=len(r.tokens),
               d=f"{max(r.diffs):.1e}", dc=f"{max(r.correct_diffs):.1e}", sd=f"{r.state_diff:.2f}",
               cd=f"{r.conv_diff:.2f}")
    if step == "check":
        key = "rst.step.check_bad" if r.broken else "rst.step.check_ok"
    elif step in ("restore", "compare") and r.broken:
        key = f"rst.step.{step}_bad_{r.mode}" if step == "restore" else "rst.step.compare_bad"
    else:
        key = f"rst.step.{step}"
    return t(key, lang, **fmt)
