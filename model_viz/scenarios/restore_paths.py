"""The scenario of the "Restore paths" page (``docs/article.md#s4-2``, ``#s4-3``, ``#s5-4``, ``#s6-10``).

What the engine does when a request's prefix is in the radix cache, as steps: **match**, **back-off**,
the **boundary check**, **copy-on-write restore**, **recompute** of the tail, and the **result** against
a run without cache. "Break it" calls ``RadixPrefixCache.check_boundary`` (it raises
:class:`~kda_ref.cache.BoundaryMismatchError`), then bypasses it through
``RadixPrefixCache.without_boundary_check()`` on one engine instance.

Design notes: ``docs/visualizer.md#restore-paths``.
"""

from __future__ import annotations
from dataclasses import dataclass, field
from kda_ref.cache import BoundaryMismatchError
from kda_ref.memory import PageKind
from kda_ref.trace import BatchComposition, TraceRecorder
from ..scenarios import common as cs


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


def _generate_cached(request: str, mode: str, rec: TraceRecorder):
    """Request A, then B through the same engine; with ``mode != "none"`` B restores a wrong state."""
    llm = cs.radix_llm(tracer=rec)
    a_prompt = cs.text_tokens(PROMPT, PROMPT_LEN)
    a_out = llm.generate([a_prompt], cs.params(MAX_TOKENS))[0].token_ids
    prompt = build_request(request, a_prompt, list(a_out))
    prefix = llm.prefix_cache
    cached = a_prompt + list(a_out[:-1])
    on_a = cs.path_states(prefix.tree, cached)
    known = prompt[:-1]  # the engine matches all but the last prompt token (its logits are needed)
    on_b = cs.path_states(prefix.tree, known)
    cs.require(bool(on_b), f"request {request}: no checkpoint on its path")
    c, node = on_b[-1]
    right = node.state
    units = prefix.tree.match_prefix(known[:c]).kv_indices  # ends on a node boundary: no split
    info = {"prompt": prompt, "cached": cached, "checkpoints": [b for b, _ in on_a], "c": c, "right": right,
            "restored_from": c, "check_ok": True, "check_msg": "", "recorded": prefix.boundary.get(right, (None,))[0]}
    prefix.check_boundary(right, known[:c], units)  # the honest restore passes the engine's check
    bad = _fault(mode, llm, on_a, c, right, known[:c], units, info)
    start = len(rec.events)
    if mode == "none":
        out = llm.generate([prompt], cs.params(GEN))[0]
    else:
        out = _generate_broken(llm, prompt, node, bad)
    return out, info, rec.events[start:]


def _fault(mode: str, llm, on_a, c: int, right: int, tokens: list[int], units: list[int], info: dict) -> int | None:
    """The checkpoint slot B restores with ``mode``'s fault (None for ``"none"``), the engine's boundary check
    asked of it, and into ``info``: where the fault comes from, what the check said, how far its state and
    conv windows are from the right ones. The check compares records, not tensors: it refuses another
    boundary's checkpoint and cannot see conv windows written wrong under the right record."""
    if mode == "none":
        info["state_diff"] = info["conv_diff"] = 0.0
        return None
    prefix, pool = llm.prefix_cache, llm.pool
    rec_t, conv_t = pool.tensors.recurrent, pool.tensors.conv
    others = [(b, n) for b, n in on_a if b != c]
    earlier = [(b, n) for b, n in others if b < c]
    info["restored_from"], wnode = (earlier[-1] if earlier else others[0])
    if mode == "boundary":  # the whole checkpoint of another boundary
        bad = wnode.state
    else:  # the right recurrent state, with the conv windows of another boundary
        (bad,) = pool.alloc(PageKind.CHECKPOINT, 1, owner="viz")
        pool.copy_state(right, bad, PageKind.CHECKPOINT, PageKind.CHECKPOINT)
        conv_t[:, bad] = conv_t[:, wnode.state]
        prefix.boundary[bad] = prefix.boundary[right]  # a faulty conv copy keeps the record it was given
    try:
        prefix.check_boundary(bad, tokens, units)  # what the real engine says about this restore
    except BoundaryMismatchError as e:
        info["check_ok"], info["check_msg"] = False, str(e)
    cs.require(info["check_ok"] == (mode == "conv"), "the engine's boundary check accepted a checkpoint from "
               "another boundary" if mode == "boundary" else "the engine's boundary check refused a slot whose "
               "record is right")
    info["recorded"] = prefix.boundary.get(bad, (None,))[0]
    info["state_diff"] = cs.rel_error(rec_t[:, bad], rec_t[:, right])
    info["conv_diff"] = cs.rel_error(conv_t[:, bad], conv_t[:, right])
    return bad


def _generate_broken(llm, prompt: list[int], node, bad: int):
    """Request B restored from checkpoint ``bad``, deliberately: the node at boundary c points at it and
    this engine's cache skips the boundary check that would refuse it; both are put back afterwards."""
    prefix, right = llm.prefix_cache, node.state
    node.state = bad
    try:
        with prefix.without_boundary_check():
            return llm.generate([prompt], cs.params(GEN))[0]
    finally:
        node.state = right


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
