"""``RequestMemory``: what one request holds in the pool -- its KDA state slot(s) and its MLA KV pages.

Article concept ``memory.unified_pool`` (``docs/article.md#s5-5``). A request owns one state slot of
constant size (``1 + k`` with a rollback strategy that keeps a slot per verified position) and the KV
pages covering its tokens; the leading pages of a prefix-cache hit belong to the cache. The
scheduler decides who runs; this object takes and gives back the memory of that decision, making room
through the prefix cache (eviction) first, and records every page and slot it moves in the trace.
SGLang's ``ReqToTokenPool`` / ``MambaPool`` allocation and vLLM's ``KVCacheManager.allocate_slots`` do
this job there.
"""

from __future__ import annotations

from ..cache import PrefixCache
from ..memory import PageKind, PoolAccounting, PoolExhausted
from ..trace import KVPageEvent, StateSlotEvent
from ..utils import cdiv
from .request import Request


class RequestMemory:
    def __init__(self, pool: PoolAccounting, prefix_cache: PrefixCache, tracer, clock, states_per_request: int = 1):
        self.pool, self.prefix_cache, self.tracer, self.clock = pool, prefix_cache, tracer, clock
        self.page_size = pool.sizes.page_size
        self.states_per_request = states_per_request  # 1 + the rollback strategy's extra slots

    def pages_for(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.page_size)

    def _emit(self, event) -> None:
        if self.tracer.enabled:
            self.tracer.emit(event)

    def grow_pages(self, req: Request, upto_tokens: int) -> bool:
        """KV pages for ``req``'s first ``upto_tokens`` tokens (evicting cached entries for them); False
        (nothing taken) when there is no room."""
        need = self.pages_for(upto_tokens) - len(req.pages)
        if need <= 0:
            return True
        if not self.prefix_cache.make_room(PageKind.MLA_KV, need):
            return False
        pages = self.pool.alloc(PageKind.MLA_KV, need, owner=req.req_id)
        req.pages.extend(pages)
        self._emit(KVPageEvent(step=self.clock.step, op="alloc", pages=pages, req_id=req.req_id))
        return True

    def free_pages_beyond(self, req: Request) -> list[int]:
        """Free the KV pages ``req`` holds past its computed tokens (reserved for drafts it did not keep);
        returns them."""
        extra = req.pages[self.pages_for(req.num_computed_tokens):]
        if extra:
            del req.pages[len(req.pages) - len(extra):]
            self.pool.free(PageKind.MLA_KV, extra)
            self._emit(KVPageEvent(step=self.clock.step, op="free", pages=extra, req_id=req.req_id))
        return extra

    def take_extra_slots(self, req: Request) -> bool:
        """The slots a request holds besides its active one (already in ``req.slot``); False (nothing
        taken) when the pool has none left."""
        extra = self.states_per_request - 1
        if extra == 0:
            return True
        if not self.pool.can_alloc(PageKind.KDA_STATE, extra):
            return False
        req.spec_slots = [req.slot, *self.pool.alloc(PageKind.KDA_STATE, extra, owner=req.req_id)]
        return True

    def release(self, req: Request) -> None:
        """Give back everything ``req`` holds (finish, abort or preemption): its slots, its own pages (the
        shared prefix is the cache's) and the prefix cache's lock on its path."""
        step = self.clock.step
        spare = [x for x in req.spec_slots if x != req.slot and self.pool.owner_of(PageKind.KDA_STATE, x) == req.req_id]
        if spare:  # the extra slots not holding the committed state (that one may be donated)
            self.pool.free(PageKind.KDA_STATE, spare)
            self._emit(StateSlotEvent(step=step, op="free", slots=spare, req_ids=[req.req_id] * len(spare)))
        req.spec_slots = []
        if req.slot is not None:
            self.pool.free(PageKind.KDA_STATE, [req.slot])
            self._emit(StateSlotEvent(step=step, op="free", slots=[req.slot], req_ids=[req.req_id]))
            req.slot = None
        own = req.pages[self.prefix_cache.shared_tokens(req) // self.page_size:]
        if own:
            self.pool.free(PageKind.MLA_KV, own)
            self._emit(KVPageEvent(step=step, op="free", pages=own, req_id=req.req_id))
        req.pages = []
        self.prefix_cache.release(req)

    def has_room_for(self, boundary: int, evict: bool) -> bool:
        """A request's state slots and the KV pages of ``boundary`` tokens, from the pool's one budget
        (``evict``: evicting cached entries for them first)."""
        pool, states, need = self.pool, self.states_per_request, self.pages_for(boundary + 1)
        total = states * pool.sizes.state_bytes + need * pool.sizes.kv_page_bytes
        if evict:  # room for both kinds at once: the slots counted as KV pages' worth of bytes
            self.prefix_cache.make_room(PageKind.MLA_KV, need + cdiv(states * pool.sizes.state_bytes,
                                                                     pool.sizes.kv_page_bytes))
        return (pool.can_alloc(PageKind.KDA_STATE, states) and pool.can_alloc(PageKind.MLA_KV, need)
                and pool.free_bytes >= total)

    def install(self, req: Request, state, boundary: int) -> None:
        """Slots and the pages of ``boundary + 1`` tokens for ``req``, and ``state`` (a
        :class:`~kda_ref.model.layer_state.BoundaryState` after ``boundary`` tokens) written into them through
        the pool's one boundary writer. ``PoolExhausted`` (nothing held) when there is no room."""
        states = self.states_per_request
        if not self.pool.can_alloc(PageKind.KDA_STATE, states):
            raise PoolExhausted("pool: no free state slot on the decode side")
        slots = self.pool.alloc(PageKind.KDA_STATE, states, owner=req.req_id)
        req.slot, req.spec_slots = slots[0], (slots if states > 1 else [])
        if not self.grow_pages(req, boundary + 1):
            self.release(req)
            raise PoolExhausted("pool: no free KV pages on the decode side")
        try:
            self.pool.tensors.install_boundary(req.slot, req.pages, state)
        except Exception:
            self.release(req)  # nothing held after a failed install
            raise
