"""``RequestMemory``: what one request holds in the pool -- its KDA state slot(s) and its MLA KV pages --
and the progress guarantee (``ProgressGuarantee``): taking that memory never stalls the engine.

Article concept ``memory.unified_pool`` (``docs/article.md#s5-5``). A request owns one state slot (``1 + k`` with
a rollback strategy that keeps a slot per verified position) and the KV pages covering its tokens (a prefix-cache
hit's leading pages belong to the cache). This object takes and gives back the memory of the scheduler's
decisions, making room through the prefix cache first, and traces every page and slot it moves (SGLang's
``ReqToTokenPool`` / ``MambaPool`` allocation, vLLM's ``KVCacheManager.allocate_slots``).

Article concept ``engine.progress`` (``docs/architecture.md#progress``): :func:`grow_or_wait`,
:func:`admit_alone` and :func:`check_progress` keep its rules 2-4 for the scheduler (its ``schedule`` and
:mod:`~kda_ref.engine.recovery` call them) through its public parts. SGLang's counterparts:
``SchedulerRuntimeCheckerMixin.on_idle``, ``create_scheduler_watchdog``.
"""

from __future__ import annotations

from ..cache import PrefixCache
from ..memory import PageKind, PoolAccounting, PoolExhausted
from ..trace import AdmissionRefused, EngineStall, KVPageEvent, StateSlotEvent
from ..utils import cdiv
from .request import Request


class RequestMemory:
    def __init__(self, pool: PoolAccounting, prefix_cache: PrefixCache, tracer, clock, states_per_request: int = 1):
        self.pool, self.prefix_cache, self.tracer, self.clock = pool, prefix_cache, tracer, clock
        self.page_size = pool.sizes.page_size
        self.states_per_request = states_per_request  # 1 + the rollback strategy's extra slots

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)  # ceil

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

    def release(self, req: Request, traced: bool = True) -> None:
        """Give back everything ``req`` holds (finish, abort or preemption): its slots, its own pages (the
        shared prefix is the cache's) and the prefix cache's lock on its path. ``traced=False``: without free
        events, for what a failed admission took (the scheduler's ``admit``), whose slots the trace never saw
        allocated (they enter it once the request is admitted)."""
        emit = self._emit if traced else (lambda event: None)
        step = self.clock.step
        spare = [x for x in req.spec_slots if x != req.slot and self.pool.owner_of(PageKind.KDA_STATE, x) == req.req_id]
        if spare:  # the extra slots not holding the committed state (that one may be donated)
            self.pool.free(PageKind.KDA_STATE, spare)
            emit(StateSlotEvent(step=step, op="free", slots=spare, req_ids=[req.req_id] * len(spare)))
        req.spec_slots = []
        if req.slot is not None:
            self.pool.free(PageKind.KDA_STATE, [req.slot])
            emit(StateSlotEvent(step=step, op="free", slots=[req.slot], req_ids=[req.req_id]))
            req.slot = None
        own = req.pages[self.prefix_cache.shared_tokens(req) // self.page_size:]
        if own:
            self.pool.free(PageKind.MLA_KV, own)
            emit(KVPageEvent(step=step, op="free", pages=own, req_id=req.req_id))
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


# ---- the progress guarantee (module docstring, "Progress") ---------------------------------------------
class ProgressWatch:
    """Counts consecutive steps without progress (rule 4 of the module docstring)."""

    def __init__(self, limit: int):
        self.limit = limit  # idle steps tolerated: more than any correct run makes in a row
        self.idle = 0
        self.finished = 0
        self.high: dict[int, int] = {}  # req_id -> most tokens it has had computed (forgotten at finish)

    def observe(self, running, finished: int) -> bool:
        """After a step: whether the engine is stalled (``running``: the running requests; ``finished``:
        how many requests have finished so far)."""
        moved = finished != self.finished
        self.finished = finished
        for req in running:
            if req.num_computed_tokens > self.high.get(req.req_id, -1):
                self.high[req.req_id] = req.num_computed_tokens
                moved = True
        self.idle = 0 if moved else self.idle + 1
        return self.idle > self.limit

    def forget(self, req_id: int) -> None:
        self.high.pop(req_id, None)


def grow_or_wait(s, req, upto: int, out) -> bool:
    """KV pages for ``req``'s first ``upto`` tokens in scheduler ``s``: preempt younger requests (youngest
    first) while they do not fit; when ``req`` is itself the youngest, it waits for the older ones
    (preempted); alone, the cache's unheld entries are dropped (rule 3) or it fails. Whether ``req`` runs now."""
    while not s.memory.grow_pages(req, upto):
        victim = s.running[-1]
        if victim is not req:
            s.preempt(victim, out)
            continue
        if len(s.running) > 1:  # older requests run: they free memory when they finish
            s.preempt(req, out)
            return False
        s.prefix_cache.flush()
        if s.memory.grow_pages(req, upto):
            return True
        refuse(s, req, out, f"running alone, it could not get the KV pages of its first {upto} tokens")
        return False
    return True


def admit_alone(s, req, out) -> None:
    """Rule 2: nothing runs in scheduler ``s`` and ``req`` (the head of the queue) could not be admitted.
    Drop every cache entry (none is locked) and admit it, or finish it with an error."""
    s.prefix_cache.flush()
    if s.admit(req, s.max_num_batched_tokens, out) is None:
        refuse(s, req, out, "nothing else was running and the prefix cache held nothing")


def refuse(s, req, out, why: str) -> None:
    """Finish ``req`` with an error naming its peak against scheduler ``s``'s budget; record it."""
    demand, pool = s.demand(len(req.prompt_token_ids) + req.params.max_tokens), s.pool
    used = {k.value: v for k, v in pool.used_bytes.items() if v}
    message = (f"memory_budget_bytes: request {req.req_id} cannot run under this configuration: it needs "
               f"{demand.describe()} at its peak, against a budget of {pool.budget_bytes} B with "
               f"{pool.free_bytes} B free ({why}; pool in use: {used or 'nothing'})")
    if s.tracer.enabled:
        s.tracer.emit(AdmissionRefused(step=s.clock.step, req_id=req.req_id, need_bytes=demand.bytes,
                                       budget_bytes=pool.budget_bytes, free_bytes=pool.free_bytes,
                                       parts=demand.as_dict(), message=message))
    s.fail(req, message)
    out.refused.append(req)


def check_progress(s, out) -> bool:
    """Rule 4, at the start of a step of scheduler ``s``: if the engine is stalled, every unfinished request
    finishes with an error saying what was held (returned in ``out.refused``). Whether it was stalled."""
    if not s.watch.observe(s.running, s.num_finished):
        return False
    stuck = [*s.running, *s.waiting]
    used = {k.value: v for k, v in s.pool.used_bytes.items()}
    message = (f"engine stalled: no request advanced for {s.watch.idle} steps with {len(s.waiting)} "
               f"waiting and {len(s.running)} running; pool in use {used} of {s.pool.budget_bytes} B; "
               f"prefix cache {s.prefix_cache.occupancy() or 'off'}")
    if s.tracer.enabled:
        s.tracer.emit(EngineStall(step=s.clock.step, req_ids=[r.req_id for r in stuck], idle_steps=s.watch.idle,
                                  waiting=len(s.waiting), running=len(s.running), used_bytes=used, message=message))
    for req in stuck:
        s.fail(req, message)
        out.refused.append(req)
    s.watch.idle = 0
    return True
