"""``RequestDemand``: everything one request holds at its peak, counted before it is queued.

Article concept ``engine.progress`` (``docs/architecture.md#progress``). :meth:`LLM.add_request
<kda_ref.LLM.add_request>` sizes a request's peak from the pieces the engine allocates, each asked of its
owner: the active KDA state slot, the rollback strategy's extra slots, the prefix cache's pinned checkpoints,
the MLA KV pages of ``prompt + max_tokens`` (and the draft-tree nodes past them); a draft model's own cache is
reported beside, outside ``memory_budget_bytes``. The engine refuses a configuration under which no request
could run. Counterparts: ``vllm/v1/core/kv_cache_utils.py::check_enough_kv_cache_memory`` (at start-up),
SGLang's ``MambaRadixCache.inc_lock_ref``. Design notes: ``docs/architecture.md#progress``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

import torch

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


def request_demand(sizes, pinned: list[tuple[str, int]], spec, num_tokens: int, draft_bytes=None) -> RequestDemand:
    """The peak of one request whose prompt and output together are ``num_tokens`` tokens, from the pool's
    unit ``sizes``, the prefix cache's ``pinned`` checkpoints (:meth:`~kda_ref.cache.PrefixCache.
    pinned_checkpoints`) and the :class:`~kda_ref.speculative.SpecConfig` ``spec`` (or ``None``);
    ``draft_bytes(num_tokens)``: a draft model's own cache, held outside the pool. The scheduler calls it
    with its engine's pieces (:meth:`~kda_ref.engine.scheduler.Scheduler.demand`), and
    :func:`config_demand` with a configuration's."""
    parts = [DemandPart("active KDA state slot", 1, sizes.state_bytes, PageKind.KDA_STATE.value)]
    outside = []
    if spec is not None:
        extra = spec.rollback.extra_slots(spec.num_speculative_tokens)
        if extra:
            parts.append(DemandPart(f"extra state slots of spec_state={spec.rollback.name!r}", extra,
                                    sizes.state_bytes, PageKind.KDA_STATE.value))
        num_tokens += spec.lookahead_tokens()
        draft = draft_bytes(num_tokens) if draft_bytes is not None else 0
        if draft:
            outside.append(DemandPart("draft model cache", 1, draft))
    ckpt = PageKind.CHECKPOINT
    parts += [DemandPart(what, n, sizes.of(ckpt), ckpt.value) for what, n in pinned]
    pages = cdiv(num_tokens, sizes.page_size)
    parts.append(DemandPart(f"MLA KV pages of {sizes.page_size} token{'s' * (sizes.page_size > 1)}", pages,
                            sizes.kv_page_bytes, PageKind.MLA_KV.value))
    return RequestDemand(num_tokens, tuple(parts), tuple(outside))


def config_demand(model_config, config, chunk_size: int = 64) -> Callable[[int], RequestDemand]:
    """``demand(num_tokens)`` of the engine ``LLM(model_config, config=config)`` would build, without
    building it: the prefix cache over an accounting-only pool (no tensors) tells its pinned checkpoints,
    at the first call (a budget too small for any pool is refused where the engines are built, not here).
    A front end that loads no model checks requests with it: the process mode of disaggregation, and
    ``kda-ref serve``'s HTTP process (:class:`kda_ref.server.core_client.EngineCoreClient`). A draft
    model's own cache (outside the pool, never refused for) is not counted here."""
    from ..cache import make_prefix_cache
    from ..memory import VirtualPool

    @cache
    def pieces() -> tuple:
        c = config.cache
        pool = VirtualPool(model_config, c.memory_budget_bytes, page_size=c.pool_page_size,
                           dtype=torch.float32, checkpoint_dtype=c.checkpoint_dtype)
        prefix_cache = make_prefix_cache(c.prefix_cache, pool, chunk_size=config.chunk_size or chunk_size)
        return pool.sizes, prefix_cache.pinned_checkpoints()

    return lambda num_tokens: request_demand(*pieces(), config.speculative, num_tokens)
