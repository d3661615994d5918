"""The scenario of the "Checkpoint placement" page (``docs/article.md#s5-1``, ``#s5-2``, ``#s5-4``, ``#s9-2``).

A canned scenario of five requests runs one by one through
``kda_ref.LLM(prefix_cache="radix", checkpoint_policy=...)`` under a budget that forces eviction; the
radix tree is read back after every request. The scenario is **JSONL text** (tree snapshots in the
header, ``tree_steps``), read by the strict :func:`parse` like an upload; the layout is computed once
from all snapshots, so a node keeps its position from step to step.

Design notes: ``docs/tutorials/checkpoint_tree.md#0-what-runs``.
"""

from __future__ import annotations
import io
from dataclasses import dataclass, field
from kda_ref.trace import BatchComposition, CacheEvent, RequestArrived, RequestFinished, TraceRecorder, write_jsonl
from kda_ref.cache.radix.policies import CHECKPOINT_POLICIES
from kda_ref.cache.picture import TREE_STEPS, tree_nodes
from ..scenarios import common as cs
from ..scenarios import engine_trace as et


POLICIES = tuple(CHECKPOINT_POLICIES)  # "sglang", "sglang_no_buffer", "chunk", "every_n", "branch"
INTERVAL = 2 * cs.CHUNK  # every_n keeps every 32nd boundary
TRACK_INTERVAL = 2 * cs.CHUNK  # sglang: decode states every 32 tokens (SGLang's default 256, scaled with the chunk)
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
STATE_SLOTS_BUDGET = 7  # memory: this many full states (active ones included) ...
KV_TOKENS_BUDGET = 600  # ... plus this many tokens of MLA KV


def snapshot(tree) -> list[dict]:
    """The radix tree as plain JSON: one dict per node (not the root), parents before children
    (:func:`kda_ref.cache.picture.tree_nodes`, the format the server's live trace sends too)."""
    return tree_nodes(tree)


def _interval(policy: str) -> int | None:
    """``checkpoint_interval`` for ``policy``: :data:`INTERVAL` for one that takes it, else None."""
    return INTERVAL if CHECKPOINT_POLICIES[policy].needs_interval else None


def record(policy: str = "sglang") -> str:
    """Run the canned scenario under ``policy``; the trace as JSONL with the tree snapshots in the header."""
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    rec = TraceRecorder()
    sizes = cs.radix_llm().pool.sizes
    budget = STATE_SLOTS_BUDGET * sizes.state_bytes + KV_TOKENS_BUDGET * sizes.kv_page_bytes
    llm = cs.radix_llm(tracer=rec, checkpoint_policy=policy, checkpoint_interval=_interval(policy),
                       track_interval=TRACK_INTERVAL, memory_budget_bytes=budget, max_num_batched_tokens=TOKEN_BUDGET)
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
        "checkpoint_interval": _interval(policy),
        "track_interval": TRACK_INTERVAL if CHECKPOINT_POLICIES[policy].uses_track_interval else None,
        "budget_bytes": budget,
        "state_bytes": sizes.state_bytes, "kv_token_bytes": sizes.kv_page_bytes, TREE_STEPS: steps})
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
    return et.TraceError("checkpoint_tree.err.bad_tree", msg=msg)


def _int(x) -> bool:
    return type(x) is int


def read_steps(header: dict, events: list) -> list[TreeStep]:
    """The tree snapshots of the header, checked, with each request's cache events attached."""
    raw = header.get(TREE_STEPS)
    if not isinstance(raw, list) or not raw:
        raise et.TraceError("checkpoint_tree.err.no_tree")
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


def trace_policy(header: dict) -> str | None:
    """The checkpoint policy a trace was recorded under: the canned run's ``policy``, or an engine header's
    ``checkpoint_policy`` (a Lab or ``kda-ref`` run); None when it names none of :data:`POLICIES`."""
    engine = header.get("engine") if isinstance(header.get("engine"), dict) else {}
    named = header.get("policy", engine.get("checkpoint_policy"))
    return named if named in POLICIES else None


def held_bytes(header: dict, step: TreeStep) -> int:
    """What the states the tree holds at ``step`` weigh: one checkpoint unit each (``checkpoint_unit_bytes``,
    smaller than a state's ``state_bytes`` under a compressing ``checkpoint_dtype``); 0 without sizes."""
    unit = next((header[k] for k in ("checkpoint_unit_bytes", "state_bytes")
                 if isinstance(header.get(k), int) and not isinstance(header.get(k), bool)), 0)
    return step.num_states() * unit


def parse(data: bytes | str) -> tuple[dict, list[TreeStep]]:
    """Read a canned or uploaded checkpoint-tree trace; :class:`~model_viz.scenarios.engine_trace.TraceError` if bad."""
    header, events = et.parse_trace(data)
    return header, read_steps(header, events)
