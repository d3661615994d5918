"""Continuous batching with chunked prefill under a token budget, and preemption by recompute.

Article concept ``engine.continuous_batching`` / ``engine.chunked_prefill`` (the execution chain,
section 1.1): every step the scheduler fills one token budget (``max_num_batched_tokens``) with,
in order, the running requests (a decode token, or the next chunk of a prefill) and then newly
admitted requests, and the runner executes them as ONE varlen forward. This is the shape of
vLLM's v1 ``Scheduler.schedule`` (running first, then waiting; a request is just "tokens computed
so far" vs "tokens known") and of nano-vllm's ``Scheduler``; SGLang's ``ScheduleBatch`` mixes
extend and decode the same way with ``--enable-mixed-chunk``.

Memory: a request owns one KDA state slot (constant size) and the MLA KV pages covering its
tokens. When a running request needs a page and the budget is spent, the most recently admitted
other request is **preempted**: its slot and pages are freed and it goes back to the front of the
queue to be recomputed later (vLLM's recompute preemption; SGLang's retract). A KDA state cannot
be partially freed — from the state after token t nothing earlier can be recovered (article
section 2.2) — so preemption always restarts the request from token 0 unless a prefix cache saved
a checkpoint.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..memory import PageKind, UnifiedMemoryPool
from ..trace import NULL_TRACER, KVPageEvent, Preemption, StateSlotEvent
from .request import Request, RequestStatus


@dataclass
class ScheduledItem:
    req: Request
    num_new_tokens: int
    start: int  # = req.num_computed_tokens when scheduled

    @property
    def completes(self) -> bool:
        """After this step every known token of the request is in the cache: sample the next one."""
        return self.start + self.num_new_tokens == self.req.num_tokens

    @property
    def is_decode(self) -> bool:
        return self.num_new_tokens == 1 and self.start > 0 and self.completes and bool(self.req.output_token_ids)


@dataclass
class SchedulerOutput:
    items: list[ScheduledItem] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    cache_hits: list[tuple[int, int]] = field(default_factory=list)  # (req_id, reused prefix tokens)
    token_budget: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(it.num_new_tokens for it in self.items)


class Scheduler:
    def __init__(self, pool: UnifiedMemoryPool, max_num_seqs: int, max_num_batched_tokens: int, tracer=NULL_TRACER,
                 prefix=None, align: int = 64):
        self.pool = pool
        self.prefix = prefix  # a RadixPrefixCache or BlockPrefixCache, or None
        self.align = align  # the KDA chunk size (chunk-start states are checkpoints)
        self.tracer = tracer
        self.step_id = 0  # set by the engine before every schedule() (for trace events)
        self.page_size = pool.sizes.page_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def release(self, req: Request) -> None:
        """Give back everything ``req`` holds (finish, abort or preemption)."""
        tr = self.tracer
        if req.slot is not None:
            self.pool.free(PageKind.KDA_STATE, [req.slot])
            if tr.enabled:
                tr.emit(StateSlotEvent(step=self.step_id, op="free", slots=[req.slot], req_ids=[req.req_id]))
            req.slot = None
        own = req.pages[req.shared_len // self.page_size:]  # the shared prefix belongs to the prefix cache
        if own:
            self.pool.free(PageKind.MLA_KV, own)
            if tr.enabled:
                tr.emit(KVPageEvent(step=self.step_id, op="free", pages=own, req_id=req.req_id))
        req.pages, req.shared_len = [], 0
        if self.prefix is not None:
            self.prefix.release(req)

    def finish(self, req: Request) -> None:
        self.release(req)
        if req in self.running:
            self.running.remove(req)

    def abort(self, req_id: int) -> Request | None:
        for queue in (self.running, self.waiting):
            for req in list(queue):
                if req.req_id == req_id:
                    self.release(req)
                    queue.remove(req)
                    req.status = RequestStatus.ABORTED
                    req.finish_reason = "abort"
                    return req
        return None

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        if self.tracer.enabled:
            self.tracer.emit(Preemption(step=self.step_id, req_id=req.req_id, reason="out of KV pages",
                                        freed_pages=len(req.pages), freed_slots=int(req.slot is not None)))
        self.release(req)
        self.running.remove(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        out.preempted.append(req)

    def _grow_pages(self, req: Request, upto_tokens: int) -> bool:
        need = self.pages_for(upto_tokens) - len(req.pages)
        if need <= 0:
            return True
        if not self.pool.can_alloc(PageKind.MLA_KV, need):
            if self.prefix is None or not self.prefix.make_room(PageKind.MLA_KV, need):
                return False
        pages = self.pool.alloc(PageKind.MLA_KV, need, owner=req.req_id)
        req.pages.extend(pages)
        if self.tracer.enabled:
            self.tracer.emit(KVPageEvent(step=self.step_id, op="alloc", pages=pages, req_id=req.req_id))
        return True

    def _chunk(self, req: Request, budget: int) -> int:
        """Tokens to run for ``req`` this step: all that is left within the budget, cut by the prefix
        cache (if any) so that the states it wants exist at the end of the step
        (``align_chunk``: chunk-aligned ends for the radix cache, block alignment and forced cuts for
        the block cache)."""
        n = min(req.num_tokens - req.num_computed_tokens, budget)
        if self.prefix is not None:
            n = self.prefix.align_chunk(req, n)
        return n

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(token_budget=self.max_num_batched_tokens)
        budget = self.max_num_batched_tokens
        # 1. running requests, oldest first: a decode token or the next prefill chunk
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk(req, budget)
            while not self._grow_pages(req, req.num_computed_tokens + n):
                victim = self.running[-1]  # the youngest
                if victim is req:
                    break
                self._preempt(victim, out)
            else:
                out.items.append(ScheduledItem(req, n, req.num_computed_tokens))
                budget -= n
                i += 1
                continue
            self._preempt(req, out)  # could not grow even alone: start over later
        # 2. admit waiting requests while there is room
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            state = self.pool.sizes.state_bytes
            if self.prefix is not None:
                self.prefix.make_room(PageKind.KDA_STATE, 1)
            if not (self.pool.can_alloc(PageKind.KDA_STATE, 1) and state <= self.pool.free_bytes):
                break
            hit = self.prefix is not None and self.prefix.admit(req)
            if req.slot is None:  # a miss: take the slot now, so making room for KV counts it
                (req.slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=req.req_id)
            n = self._chunk(req, budget)
            need = self.pages_for(req.num_computed_tokens + n) - len(req.pages)
            if self.prefix is not None:
                self.prefix.make_room(PageKind.MLA_KV, need)
            if not self.pool.can_alloc(PageKind.MLA_KV, need):
                self.release(req)  # undo the slot and a cache hit's lock
                req.num_computed_tokens = 0
                break
            if hit:
                out.cache_hits.append((req.req_id, req.num_computed_tokens))
            self.waiting.popleft()
            if self.tracer.enabled:
                self.tracer.emit(StateSlotEvent(step=self.step_id, op="alloc", slots=[req.slot], req_ids=[req.req_id]))
            self._grow_pages(req, req.num_computed_tokens + n)
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.admitted.append(req)
            out.items.append(ScheduledItem(req, n, req.num_computed_tokens))
            budget -= n
        return out
