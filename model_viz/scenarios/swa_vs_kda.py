"""The scenario of the "SWA vs KDA" page (``docs/article.md#s9-1``): why the way engines
checkpoint sliding-window attention does not carry over to KDA.

An SWA hit can stop at any position (SGLang ``SWARadixCache``, vLLM
``SlidingWindowManager.find_longest_cache_hit``); a KDA hit restores the deepest checkpoint ``c <= t``.
Request A (:data:`PROMPT_LEN` tokens, steps of :data:`STEP_TOKENS`) runs through
``LLM(prefix_cache="radix")``, then a request B sharing ``t`` tokens; the MLA layer's KV rows stand in
for an SWA layer's.

Design notes: ``docs/visualizer.md#swa-vs-kda-caching``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kda_ref.trace import TraceRecorder
from ..scenarios import common as cs

PROMPT = "A sliding window keeps rows; a recurrent state keeps one folded matrix. "
PROMPT_LEN = 100
STEP_TOKENS = 40  # chunked prefill: A runs as steps of 40, 40, 20 tokens
GEN = 4  # tokens A generates
TRACK_INTERVAL = 32  # "sglang": decode tokens between tracked states (a multiple of the chunk, 16)
POLICIES = ("sglang", "chunk", "branch")
WINDOWS = (8, 16, 32, 64)
DEFAULT_WINDOW = 32
SAME_TOL = 1e-5  # cached vs fresh rows / states, fp32


@dataclass
class SwaKdaView:
    policy: str
    window: int
    t: int  # B shares A's first t tokens
    prompt_len: int  # A's prompt
    cached_len: int  # tokens of A whose KV rows the cache holds after A finished
    checkpoints: list[int]  # positions with a KDA checkpoint on A's path
    # SWA (stand-in: the MLA layer's rows)
    window_rows: tuple[int, int]  # [lo, t): the rows an SWA layer needs at t
    swa_row_diff: float | None  # max |cached row - fresh row| over the window; None: rows not cached
    # KDA
    restore_at: int  # c: the engine's state_len for B (deepest checkpoint <= t)
    kv_hit: int  # the engine's kv_len for B
    recompute: int  # t - c: tokens of the shared prefix the engine prefills again
    state_diff_at_c: float  # relative |checkpoint at c - fresh state after c tokens|
    later_diff: float | None  # relative |first checkpoint after t - fresh state after t| (None if none)

    @property
    def swa_ok(self) -> bool:
        """An SWA layer's cache at t can be assembled from the cached rows."""
        return self.swa_row_diff is not None

    @property
    def kda_exact(self) -> bool:
        return self.restore_at == self.t

    @property
    def later(self) -> list[int]:
        return [p for p in self.checkpoints if p > self.t]


def check_args(policy: str, window: int, t: int) -> None:
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    if not isinstance(window, int) or not 1 <= window <= PROMPT_LEN:
        raise ValueError(f"window: must be an int in 1..{PROMPT_LEN}, got {window!r}")
    if not isinstance(t, int) or not 1 <= t <= PROMPT_LEN:
        raise ValueError(f"t: must be an int in 1..{PROMPT_LEN} (a position inside A's prompt), got {t!r}")


def run(policy: str = "sglang", window: int = DEFAULT_WINDOW, t: int = 56) -> SwaKdaView:
    """Serve A, then B = A[:t] + one new token on the same engine; read what each cache can restore."""
    check_args(policy, window, t)
    rec = TraceRecorder()
    llm = cs.radix_llm(tracer=rec, checkpoint_policy=policy, track_interval=TRACK_INTERVAL, max_num_batched_tokens=STEP_TOKENS)
    a_prompt = cs.text_tokens(PROMPT, PROMPT_LEN)
    a_out = list(llm.generate([a_prompt], cs.params(GEN))[0].token_ids)
    cached = a_prompt + a_out[:-1]
    tree, pool = llm.prefix_cache.tree, llm.pool
    on_path = cs.path_states(tree, cached)
    checkpoints = [p for p, _ in on_path]
    # the KV rows the tree holds for A's path (page size 1: one page per token); a policy that donates
    # a tracked state keeps A's KV only up to that state
    kv_units = tree.match_prefix(cached).kv_indices
    held = len(kv_units)

    # SWA: the window's rows, cut out of A's cached rows, equal a fresh run's over A[:t]
    fresh_rows, fresh_state = cs.fresh_run(cs.tiny_model(cs.CHUNK), a_prompt[:t])
    lo = max(0, t - window)
    swa_diff = None
    if t <= held:
        cached_rows = pool.tensors.kv[:, torch.tensor(kv_units[lo:t]), 0]
        swa_diff = float((cached_rows - fresh_rows[:, lo:t]).abs().max())
        cs.require(swa_diff <= SAME_TOL, f"the cached window rows differ from a fresh run's by {swa_diff:.2e}")

    # KDA: what the engine restores for B, and whether that checkpoint is the state it claims to be
    later = next((node for p, node in on_path if p > t), None)
    later_diff = None if later is None else cs.rel_error(pool.tensors.recurrent[:, later.state], fresh_state)
    c_expected = max((p for p in checkpoints if p <= t), default=0)
    state_diff_c = 0.0
    if c_expected:
        node_c = next(node for p, node in on_path if p == c_expected)
        state_diff_c = cs.rel_error(pool.tensors.recurrent[:, node_c.state], cs.fresh_run(cs.tiny_model(cs.CHUNK), a_prompt[:c_expected])[1])
        cs.require(state_diff_c <= SAME_TOL, f"the checkpoint at {c_expected} is not the state after {c_expected} tokens")
    new_tok = (a_prompt[t] + 1) % 256 if t < PROMPT_LEN else (a_out[0] + 1) % 256  # B leaves A's path after t
    start = len(rec.events)
    llm.generate([a_prompt[:t] + [new_tok]], cs.params(1))
    match = next(e for e in cs.cache_events(rec.events[start:]) if e.op == "match")
    kv_hit, state_len = int(match.detail["kv_len"]), int(match.detail["state_len"])
    cs.require(kv_hit == min(t, held), f"B shares {t} tokens with A, {held} are cached, the engine matched {kv_hit}")
    cs.require(state_len == c_expected, f"the engine restored at {state_len}, the deepest checkpoint <= {t} is {c_expected}")
    return SwaKdaView(policy=policy, window=window, t=t, prompt_len=PROMPT_LEN, cached_len=held,
                      checkpoints=checkpoints, window_rows=(lo, t), swa_row_diff=swa_diff, restore_at=state_len,
                      kv_hit=kv_hit, recompute=t - state_len, state_diff_at_c=state_diff_c, later_diff=later_diff)
