"""The scenario of the "Prefix cache is not a KV cache" page (``docs/article.md#s3-1``, ``#s3-2``).

One cached conversation, then every shared-prefix length ``L = 1..T``: the **MLA KV** hit is any ``L``;
the **KDA state** restores the deepest checkpoint ``c <= L`` and recomputes ``L - c`` tokens.
Everything is measured on the engine (:func:`run`, ``LLM(prefix_cache="radix")`` and the tree's own
``match_prefix``), each fact checked with :func:`require` before the page shows it.

Design notes: ``docs/tutorials/prefix_vs_kv.md#0-what-runs``.
"""

from __future__ import annotations
import bisect
from dataclasses import dataclass, field
from kda_ref.trace import TraceRecorder
from ..scenarios import common as cs


PROMPT = "The KV of any prefix is its first rows; a recurrent state exists only where it was saved. "
PROMPT_LEN = 90
MAX_TOKENS = 4  # request A: the cached sequence is the prompt + 3 generated tokens (the last is not computed)
TAIL = "Q: why?"  # what a second request adds after the shared prefix
VERIFY_MAX_TOKENS = 3
MAX_LOGIT_DIFF = 1e-4  # cached vs uncached logits (fp32 rounding of a different batch split)


@dataclass
class Verified:
    """One real second request sharing ``L`` tokens, with the cache and without it."""

    L: int
    reused: int  # tokens the engine restored (its copy_on_write position; 0 on a miss)
    recomputed: int  # shared tokens recomputed after the checkpoint (L - reused)
    tail: int  # the request's own tokens after the shared prefix
    tokens: list[int]  # generated with the cache
    same_tokens: bool
    max_diff: float  # max |logits(cached) - logits(uncached)| over the generated tokens


@dataclass
class PrefixVsKV:
    tokens: list[int]  # the cached sequence of request A (T tokens in the tree)
    prompt_len: int
    checkpoints: list[int]  # positions with a saved state on A's path, ascending
    checkpoint_ops: dict[int, str]  # position -> the cache op that saved it
    kv_len: list[int]  # [L - 1] -> the tree's KV hit for a request sharing L tokens
    state_len: list[int]  # [L - 1] -> the usable prefix after the back-off
    verified: list[Verified] = field(default_factory=list)
    state_bytes: int = 0
    kv_token_bytes: int = 0

    @property
    def T(self) -> int:
        return len(self.tokens)

    def deepest(self, L: int) -> int:
        """The deepest checkpoint position ``<= L`` (0: none, start from scratch)."""
        i = bisect.bisect_right(self.checkpoints, L)
        return self.checkpoints[i - 1] if i else 0

    def default_length(self) -> int:
        """Where the page starts: a verified length in the middle of a chunk (something to recompute)."""
        mid = [v.L for v in self.verified if v.recomputed > 1]
        return mid[len(mid) // 2] if mid else self.T

    def verified_at(self, L: int) -> Verified | None:
        return next((v for v in self.verified if v.L == L), None)


def verify_lengths(checkpoints: list[int], T: int) -> list[int]:
    """The shared lengths checked with a real second request: before the first checkpoint, on one,
    just after one, mid-chunk, just before one, and the whole cached sequence."""
    c = checkpoints
    ls = {max(1, c[0] - 5), c[0], T}
    if len(c) > 2:
        ls |= {c[1] + 1, (c[2] + c[3]) // 2 if len(c) > 3 else c[2] - 3, c[-2] - 1}
    return sorted(x for x in ls if 1 <= x <= T)


def _tail(tokens: list[int], L: int) -> list[int]:
    """The second request's own tokens: the first differs from the cached token at L, so the KV hit
    is exactly L."""
    tail = cs.text_tokens(TAIL, len(TAIL))
    if L < len(tokens) and tail[0] == tokens[L]:
        tail[0] = (tail[0] + 1) % 256
    return tail


def run(prompt_len: int = PROMPT_LEN) -> PrefixVsKV:
    """Run request A, probe every shared length on the real tree, verify a few with real requests."""
    rec = TraceRecorder()
    llm = cs.radix_llm(tracer=rec)
    prompt = cs.text_tokens(PROMPT, prompt_len)
    out_a = llm.generate([prompt], cs.params(MAX_TOKENS))[0]
    tokens = prompt + out_a.token_ids[:-1]  # the last generated token was sampled, never computed
    T = len(tokens)

    ops = {e.position: e.op for e in cs.cache_events(rec.events, 0)
           if e.op in ("checkpoint_create", "snapshot", "donate")}
    tree = llm.prefix_cache.tree
    on_path = [p for p, _ in cs.path_states(tree, tokens)]  # the states on A's path, read from the tree
    cs.require(sorted(ops) == on_path, f"trace checkpoints {sorted(ops)} != tree states {on_path}")
    cs.require(on_path and on_path[-1] == T, "the finished request did not donate its end state")

    full = tree.match_prefix(tokens + [_tail(tokens, T)[0]])
    cs.require(full.kv_len == T, f"KV of the cached sequence: {full.kv_len} of {T} tokens")
    res = PrefixVsKV(tokens=tokens, prompt_len=prompt_len, checkpoints=on_path, checkpoint_ops=ops,
                     kv_len=[], state_len=[], state_bytes=llm.pool.sizes.state_bytes,
                     kv_token_bytes=llm.pool.sizes.kv_page_bytes)
    for L in range(1, T + 1):
        m = tree.match_prefix(tokens[:L] + _tail(tokens, L)[:1])
        cs.require(m.kv_len == L, f"L={L}: KV hit {m.kv_len}")
        cs.require(m.kv_indices == full.kv_indices[:L], f"L={L}: the KV of the prefix is not the first L rows")
        cs.require(m.state_len == res.deepest(L), f"L={L}: back-off to {m.state_len}, expected {res.deepest(L)}")
        res.kv_len.append(m.kv_len)
        res.state_len.append(m.state_len)

    _verify_shared_requests(llm, rec, res)
    return res


def _verify_shared_requests(llm, rec: TraceRecorder, res: PrefixVsKV) -> None:
    """Run a few real second requests sharing ``L`` tokens and append each one's check to ``res.verified``."""
    tokens = res.tokens
    # real second requests sharing L tokens: with the cache (this engine) and without (reference)
    lengths = verify_lengths(res.checkpoints, res.T)
    prompts = [tokens[:L] + _tail(tokens, L) for L in lengths]
    start = len(rec.events)
    cached = llm.generate(prompts, cs.params(VERIFY_MAX_TOKENS))
    ref = cs.plain_llm().generate(prompts, cs.params(VERIFY_MAX_TOKENS))
    reuse = {e.req_id: e.position for e in cs.cache_events(rec.events[start:]) if e.op == "copy_on_write"}
    for L, o, r in zip(lengths, cached, ref):
        got = reuse.get(o.req_id, 0)
        cs.require(got == res.deepest(L), f"L={L}: the engine reused {got}, the tree said {res.deepest(L)}")
        diff = cs.max_abs_diff(o.logits, r.logits)
        same = o.token_ids == r.token_ids
        cs.require(same and diff <= MAX_LOGIT_DIFF, f"L={L}: cached output differs (max |dlogit| {diff:.2e})")
        res.verified.append(Verified(L=L, reused=got, recomputed=L - got, tail=len(TAIL),
                                     tokens=list(o.token_ids), same_tokens=same, max_diff=diff))


def memory_facts(r: PrefixVsKV) -> dict:
    """What the cached sequence costs: its KV, and its states (each one a full state)."""
    return {"T": r.T, "kv_kib": r.T * r.kv_token_bytes / 1024, "n_states": len(r.checkpoints),
            "state_kib": r.state_bytes / 1024, "states_kib": len(r.checkpoints) * r.state_bytes / 1024,
            "dense_kib": r.T * r.state_bytes / 1024}
