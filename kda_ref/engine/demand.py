"""``RequestDemand``: everything one request holds at its peak, counted before it is queued.

Article concept ``engine.progress`` (``docs/architecture.md#progress``). A request that the pool cannot
hold even alone must be refused when it arrives, not left waiting forever: so :meth:`LLM.add_request
<kda_ref.LLM.add_request>` sizes the request's peak from the same pieces the engine allocates, and the
engine refuses a configuration under which no request at all could run. The pieces, each asked of the
object that owns it (no name is compared here):

* the **active KDA state slot** (recurrent state + conv windows of every KDA layer);
* the **rollback strategy's extra slots** (:meth:`~kda_ref.speculative.RollbackStrategy.extra_slots`:
  ``spec_state="slots"`` holds ``1 + k`` slots, as vLLM allocates ``num_spec + 1`` state blocks);
* the **prefix cache's per-request checkpoints** (:meth:`~kda_ref.cache.PrefixCache.pinned_checkpoints`):
  the state its path's lock pins (SGLang's ``MambaRadixCache.inc_lock_ref`` locks the node's own
  ``mamba_value``), the sglang policy's two ping-pong track slots, the block cache's pending replay
  point;
* the **MLA KV pages** of ``prompt + max_tokens`` tokens, plus the draft-tree nodes written past them
  (:meth:`~kda_ref.engine.speculation.Speculation.lookahead_tokens`);
* held *outside* the pool and so not counted against ``memory_budget_bytes``: the draft model's own
  cache (SGLang's draft worker has pools of its own), reported beside the rest.

vLLM does the engine-level half at start-up (``vllm/v1/core/kv_cache_utils.py::
check_enough_kv_cache_memory``: the KV cache must hold one request of ``max_model_len``); SGLang
rejects a prompt longer than its token pool when the request arrives. Neither counts the recurrent-state
slots a hybrid request pins, which is where a small budget stalls a KDA engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memory import PageKind
from ..utils import cdiv


@dataclass(frozen=True)
class DemandPart:
    """``count`` units of ``unit_bytes`` each, described by ``what`` (for messages and pages), of the
    pool's page kind ``kind`` (``"kda_state"``, ``"checkpoint"``, ``"mla_kv"``; ``""`` outside the pool)."""

    what: str
    count: int
    unit_bytes: int
    kind: str = ""

    @property
    def bytes(self) -> int:
        return self.count * self.unit_bytes


@dataclass(frozen=True)
class RequestDemand:
    """What a request of ``tokens`` tokens (prompt, output and draft lookahead) holds at its peak."""

    tokens: int
    parts: tuple[DemandPart, ...]  # in the pool, against memory_budget_bytes
    outside: tuple[DemandPart, ...] = ()  # held outside the pool

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    def as_dict(self) -> dict[str, int]:
        """``{part: bytes}`` of the pool's parts (a trace event's field, a page's table)."""
        return {p.what: p.bytes for p in self.parts}

    def describe(self) -> str:
        """``"191168 B = 62976 B for 1 active KDA state slot + ..."`` (and what is held outside the pool)."""
        terms = " + ".join(f"{p.bytes} B for {p.count} {p.what}" for p in self.parts if p.count)
        out = "".join(f"; {p.bytes} B for {p.count} {p.what} is held outside the pool" for p in self.outside
                      if p.count)
        return f"{self.bytes} B = {terms}{out}"


def request_demand(pool, prefix_cache, speculation, num_tokens: int) -> RequestDemand:
    """The peak of one request whose prompt and output together are ``num_tokens`` tokens, on ``pool``
    with ``prefix_cache`` and ``speculation`` (a :class:`~kda_ref.engine.speculation.Speculation` or
    ``None``). The scheduler calls it (:meth:`~kda_ref.engine.scheduler.Scheduler.demand`)."""
    sizes = pool.sizes
    parts = [DemandPart("active KDA state slot", 1, sizes.state_bytes, PageKind.KDA_STATE.value)]
    outside = []
    if speculation is not None:
        extra = speculation.extra_slots()
        if extra:
            parts.append(DemandPart(f"extra state slots of spec_state={speculation.rollback.name!r}", extra,
                                    sizes.state_bytes, PageKind.KDA_STATE.value))
        num_tokens += speculation.lookahead_tokens()
        draft = speculation.draft_cache_bytes(num_tokens)
        if draft:
            outside.append(DemandPart("draft model cache", 1, draft))
    ckpt = PageKind.CHECKPOINT
    parts += [DemandPart(what, n, sizes.of(ckpt), ckpt.value) for what, n in prefix_cache.pinned_checkpoints()]
    pages = cdiv(num_tokens, sizes.page_size)
    parts.append(DemandPart(f"MLA KV pages of {sizes.page_size} token{'s' * (sizes.page_size > 1)}", pages,
                            sizes.kv_page_bytes, PageKind.MLA_KV.value))
    return RequestDemand(num_tokens, tuple(parts), tuple(outside))
