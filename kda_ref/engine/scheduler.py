"""The scheduler: owns one engine step from the decision to the bookkeeping after the forward.

Article concepts ``engine.continuous_batching`` / ``engine.chunked_prefill`` (the execution chain,
``docs/article.md#s1-1``). One step is three calls, as in nano-vllm's ``LLMEngine.step``::

    sched = scheduler.schedule()          # who runs, how many tokens each; memory and cache admission
    out   = runner.run(sched)             # ONE varlen forward, then sampling
    done  = scheduler.postprocess(sched, out)   # counters, cache states, new tokens, finishes

**schedule** fills one token budget (``max_num_batched_tokens``) with, in order, the running
requests (a decode token, or the next chunk of a prefill) and then newly admitted requests. This is
the shape of vLLM's v1 ``Scheduler.schedule`` (running first, then waiting; a request is just
"tokens computed so far" vs "tokens known") and of nano-vllm's ``Scheduler``; SGLang's
``ScheduleBatch`` mixes extend and decode the same way with ``--enable-mixed-chunk``.

**postprocess** is the only place that moves a request forward: it hands the chunk kernel's
chunk-start states and the step-end states to the prefix cache, appends sampled tokens, and
finishes requests (donating their state to the cache, releasing their memory). The scheduler is
the cache's only driver: admission, chunk alignment, eviction, checkpoints, donation and release
all happen here, through the :class:`~kda_ref.cache.PrefixCache` interface.

**Failures stay with one request.** A request's counters only move in ``postprocess``, after the
forward succeeded, so a failed step never half-advances anyone's bookkeeping. A sampling failure
(``StepOutput.errors``) finishes that request with ``finish_reason == "error"``; the others of the
step go on as if it had not been there. A failed *forward* has already updated every scheduled
request's state slot in place (the KDA kernels write their final states into the pool), so those
states are no longer trusted: every request of the step is preempted and recomputed (from token 0,
or from a prefix-cache checkpoint, which only ever holds states of completed steps) and marked a
*suspect*. A suspect runs alone in its steps until it finishes; if its own forward fails, it is the
culprit and finishes with an error. Recovery therefore costs nothing on the happy path (no snapshot
of the states before each step) and recomputation after a failure. Neither SGLang nor vLLM isolate
a failing request: an exception in their model step stops the engine (vLLM's
``EngineDeadError``); a reference engine that demonstrates caching correctness cannot let one bad
request silently change another's answer.

Memory: a request owns one KDA state slot (constant size) and the MLA KV pages covering its
tokens. When a running request needs a page and the budget is spent, the most recently admitted
other request is **preempted**: its slot and pages are freed and it goes back to the front of the
queue to be recomputed later (vLLM's recompute preemption; SGLang's retract). A KDA state cannot
be partially freed — from the state after token t nothing earlier can be recovered (article
``docs/article.md#s2-2``) — so preemption always restarts the request from token 0 unless a prefix cache saved
a checkpoint.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from ..cache import PrefixCache
from ..memory import PageKind, PoolAccounting, PoolExhausted
from ..trace import NULL_TRACER, KVPageEvent, Preemption, RequestFinished, SpecVerify, StateSlotEvent, StepClock
from ..speculative import Drafter, SpecConfig, make_drafter
from ..speculative.tree import DraftTree
from ..utils import cdiv
from .config import SchedulerConfig
from .request import Request, RequestStatus
from .step_trace import emit_step_events


@dataclass
class ScheduledItem:
    req: Request
    num_new_tokens: int  # tokens the forward runs for the request (its known ones, then any drafts)
    start: int  # = req.num_computed_tokens when scheduled
    drafts: list[int] = field(default_factory=list)  # speculative: draft tokens verified after the last known one
    context_parallel: bool = False  # the rest of the prompt, prefilled by the context-parallel ranks (alone)
    tree: DraftTree | None = None  # speculative, tree drafts: the root (this decode item) and the nodes, one forward

    @property
    def completes(self) -> bool:
        """After this step every known token of the request is in the cache: sample the next one."""
        return self.start + self.num_new_tokens - len(self.drafts) == self.req.num_tokens

    @property
    def is_decode(self) -> bool:
        return (self.num_new_tokens == 1 and self.start > 0 and self.completes and bool(self.req.output_token_ids)
                and not self.drafts)


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
    def __init__(self, pool: PoolAccounting, prefix_cache: PrefixCache, config: SchedulerConfig,
                 eos_token_id: int | None = None, tracer=NULL_TRACER, clock: StepClock | None = None,
                 spec: SpecConfig | None = None, drafter: Drafter | None = None, pad_drafts: bool = False,
                 cp_min_tokens: int | None = None, fold=None):
        """``config``: the step's limits; ``spec`` / ``drafter``: speculation (the drafter proposes, the
        spec's :class:`~kda_ref.speculative.RollbackStrategy` commits; ``fold``: the runner's fixed-shape
        ReplaySSM fold, :meth:`~kda_ref.engine.runner.ModelRunner.fold_replay`); ``pad_drafts`` (static
        decode): a short draft is padded with its last token (kept only where the target agrees, like any
        draft), so that speculative rows verify the same ``1 + k`` tokens and fit a static bucket;
        ``cp_min_tokens``: prompts at least this long are prefilled in a step of their own by the
        context-parallel ranks (``None``: off)."""
        max_num_seqs, max_num_batched_tokens = config.max_num_seqs, config.max_num_batched_tokens
        self.pool = pool
        self.prefix_cache = prefix_cache
        self.tracer = tracer
        self.clock = clock if clock is not None else StepClock()  # advanced here, once per schedule()
        self.eos_token_id = eos_token_id
        self.page_size = pool.sizes.page_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.suspects: set[int] = set()  # requests of a failed forward: each runs alone until it finishes
        self.num_preemptions = 0
        self.num_forward_failures = 0
        self.counters = {"computed_prompt_tokens": 0, "cached_prompt_tokens": 0, "generated_tokens": 0,
                         "steps": 0, "forward_tokens": 0}
        self.cp_min_tokens = cp_min_tokens
        self.finish_listeners: list = []  # called with a finishing request while it still holds its slot and pages
        self.spec, self.pad_drafts, self.fold = spec, pad_drafts, fold
        self.rollback = spec.rollback if spec is not None else None
        self.drafter = None
        if spec is not None:
            self.drafter = drafter if drafter is not None else make_drafter(spec)
            self.counters.update(spec_draft_tokens=0, spec_accepted_tokens=0, spec_verify_steps=0,
                                 spec_state_bytes=0)

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def add_finish_listener(self, listener) -> None:
        """Call ``listener(req)`` when a request finishes normally, before its state is donated and its
        memory freed (:meth:`kda_ref.LLM.add_finish_listener`)."""
        self.finish_listeners.append(listener)

    def has_room_for(self, boundary: int, evict: bool) -> bool:
        """A seat (``max_num_seqs``), a request's state slots and the KV pages of ``boundary`` tokens, all
        from the pool's one budget (``evict``: evicting cached entries for them first)."""
        if len(self.running) >= self.max_num_seqs:
            return False
        pool, states, need = self.pool, 1 + self.extra_state_slots(), self.pages_for(boundary + 1)
        total = states * pool.sizes.state_bytes + need * pool.sizes.kv_page_bytes
        if evict:  # room for both kinds at once: the slots counted as KV pages' worth of bytes
            self.prefix_cache.make_room(PageKind.MLA_KV, need + cdiv(states * pool.sizes.state_bytes,
                                                                     pool.sizes.kv_page_bytes))
        return (pool.can_alloc(PageKind.KDA_STATE, states) and pool.can_alloc(PageKind.MLA_KV, need)
                and pool.free_bytes >= total)

    def admit_prefilled(self, req: Request, state, first_token: int) -> None:
        """Admit the queued ``req`` straight into the running set from a state computed elsewhere (a
        prefill/decode handoff, :meth:`kda_ref.LLM.admit_prefilled`): its slots and the pages of its
        ``len(prompt)`` tokens, the state installed, its first token appended. ``PoolExhausted`` (nothing
        held, the request still queued) when the pool has no room."""
        boundary = len(req.prompt_token_ids)
        states = 1 + self.extra_state_slots()  # as admission gives: the strategy's 1 + k slots
        if not self.pool.can_alloc(PageKind.KDA_STATE, states):
            raise PoolExhausted("pool: no free state slot on the decode side")
        slots = self.pool.alloc(PageKind.KDA_STATE, states, owner=req.req_id)
        req.slot, req.spec_slots = slots[0], (slots if states > 1 else [])
        if not self._grow_pages(req, boundary + 1):
            self.release(req)
            raise PoolExhausted("pool: no free KV pages on the decode side")
        self.pool.tensors.install_boundary(req.slot, req.pages, state)
        self.waiting.remove(req)
        req.num_computed_tokens = boundary
        req.output_token_ids.append(first_token)
        req.first_token_time = time.perf_counter()
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def pages_for(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.page_size)

    # ---- memory ------------------------------------------------------------------------------------
    def release(self, req: Request) -> None:
        """Give back everything ``req`` holds (finish, abort or preemption)."""
        tr, step = self.tracer, self.clock.step
        spare = [x for x in req.spec_slots if x != req.slot and self.pool.owner_of(PageKind.KDA_STATE, x) == req.req_id]
        if spare:  # spec_state="slots": the slots not holding the committed state (that one may be donated)
            self.pool.free(PageKind.KDA_STATE, spare)
            if tr.enabled:
                tr.emit(StateSlotEvent(step=step, op="free", slots=spare, req_ids=[req.req_id] * len(spare)))
        req.spec_slots = []
        if req.slot is not None:
            self.pool.free(PageKind.KDA_STATE, [req.slot])
            if tr.enabled:
                tr.emit(StateSlotEvent(step=step, op="free", slots=[req.slot], req_ids=[req.req_id]))
            req.slot = None
        own = req.pages[self.prefix_cache.shared_tokens(req) // self.page_size:]  # the shared prefix is the cache's
        if own:
            self.pool.free(PageKind.MLA_KV, own)
            if tr.enabled:
                tr.emit(KVPageEvent(step=step, op="free", pages=own, req_id=req.req_id))
        req.pages = []
        self.prefix_cache.release(req)
        if self.drafter is not None:
            self.drafter.release(req.req_id)

    def finish(self, req: Request) -> None:
        self.release(req)
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.suspects.discard(req.req_id)

    def fail(self, req: Request, message: str) -> None:
        """Finish ``req`` with ``finish_reason == "error"`` and give back what it holds."""
        req.status, req.finish_reason, req.error = RequestStatus.FINISHED, "error", message
        req.finish_time = time.perf_counter()
        self.finish(req)
        if self.tracer.enabled:
            self.tracer.emit(RequestFinished(step=self.clock.step, req_id=req.req_id, reason="error",
                                             output_len=len(req.output_token_ids)))

    def abort(self, req_id: int) -> Request | None:
        for queue in (self.running, self.waiting):
            for req in list(queue):
                if req.req_id == req_id:
                    self.release(req)
                    queue.remove(req)
                    self.suspects.discard(req_id)
                    req.status = RequestStatus.ABORTED
                    req.finish_reason = "abort"
                    return req
        return None

    def _preempt(self, req: Request, out: SchedulerOutput | None, reason: str = "out of KV pages") -> None:
        if self.tracer.enabled:
            self.tracer.emit(Preemption(step=self.clock.step, req_id=req.req_id, reason=reason,
                                        freed_pages=len(req.pages), freed_slots=int(req.slot is not None)))
        self.release(req)
        self.running.remove(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        if out is not None:
            out.preempted.append(req)

    def forward_failed(self, sched: SchedulerOutput, err: BaseException) -> list[Request]:
        """The forward of ``sched`` raised ``err``. A request that ran alone is the culprit: it fails.
        Otherwise every request of the step is recomputed, each alone (see the module docstring).
        Returns the requests that finished (with an error)."""
        self.num_forward_failures += 1
        message = f"the forward pass failed: {type(err).__name__}: {err}"
        reqs = [it.req for it in sched.items]
        if len(reqs) == 1:
            self.fail(reqs[0], message)
            return reqs
        for req in reversed(reqs):  # appendleft in reverse keeps the batch's order at the queue's head
            self._preempt(req, None, reason="forward failed: recompute alone")
            self.suspects.add(req.req_id)
        return []

    def _grow_pages(self, req: Request, upto_tokens: int) -> bool:
        need = self.pages_for(upto_tokens) - len(req.pages)
        if need <= 0:
            return True
        if not self.prefix_cache.make_room(PageKind.MLA_KV, need):
            return False
        pages = self.pool.alloc(PageKind.MLA_KV, need, owner=req.req_id)
        req.pages.extend(pages)
        if self.tracer.enabled:
            self.tracer.emit(KVPageEvent(step=self.clock.step, op="alloc", pages=pages, req_id=req.req_id))
        return True

    def _chunk(self, req: Request, budget: int, whole: bool = False) -> int:
        """Tokens to run for ``req`` this step: all that is left within the budget, cut by the prefix
        cache so that the states it wants exist at the end of the step (``align_chunk``:
        chunk-aligned ends for the radix cache, block alignment and forced cuts for the block cache).
        ``whole``: the whole rest of the prompt (a context-parallel admission)."""
        if whole:
            return req.num_tokens - req.num_computed_tokens
        return self.prefix_cache.align_chunk(req, min(req.num_tokens - req.num_computed_tokens, budget))

    def _cp_eligible(self, req: Request) -> bool:
        """A fresh request (no output yet) whose prompt is at least ``cp_min_tokens`` long."""
        return (self.cp_min_tokens is not None and not req.output_token_ids
                and len(req.prompt_token_ids) >= self.cp_min_tokens)

    def _schedule_cp(self, out: SchedulerOutput) -> bool:
        """Admit the head of the queue alone, with the rest of its prompt (after any prefix-cache hit)
        as one context-parallel item; False (nothing changed) when memory does not allow it now."""
        n = self._admit(self.waiting[0], self.max_num_batched_tokens, out, whole=True)
        if n is None:
            return False
        out.items[-1].context_parallel = True
        return True

    def _tree(self, req: Request, budget: int) -> DraftTree | None:
        """A draft tree for a decoding request when tree speculation is on (``spec_tree_width > 1``),
        its depth bounded like a chain's and the tokens its verify runs (the root and every node) by the
        step's budget; None when nothing recurs."""
        if self.spec is None or self.spec.tree_width == 1 or not self.drafter.supports_trees:
            return None
        if req.num_computed_tokens != req.num_tokens - 1 or not req.output_token_ids:
            return None
        room = min(self.spec.num_speculative_tokens, req.params.max_tokens - len(req.output_token_ids) - 1)
        width = min(self.spec.tree_width, (budget - 1) // max(room, 1))
        if room < 1 or width < 1:
            return None
        tree = self.drafter.propose_tree(req.req_id, req.all_token_ids, room, width)
        return tree if len(tree) else None

    def _drafts(self, req: Request, budget: int) -> list[int]:
        """Draft tokens for a decoding request when speculation is on: at most ``k``, at most what
        the budget leaves after its own token, and one fewer than the tokens it may still generate
        (the step always emits one more than it accepts)."""
        if self.drafter is None or req.num_computed_tokens != req.num_tokens - 1 or not req.output_token_ids:
            return []
        room = min(self.spec.num_speculative_tokens, budget - 1, req.params.max_tokens - len(req.output_token_ids) - 1)
        drafts = self.drafter.propose(req.req_id, req.all_token_ids, room) if room > 0 else []
        if self.pad_drafts and drafts:  # fill up to ``room`` so that verify rows have one length (a static bucket)
            drafts = drafts + [drafts[-1]] * (room - len(drafts))
        return drafts

    def extra_state_slots(self) -> int:
        """State slots a request holds besides its active one, as the rollback strategy reserves them at
        admission (``spec_state="slots"``: ``k``, as vLLM allocates ``num_spec + 1`` state blocks per
        request), else 0."""
        return self.rollback.extra_slots(self.spec.num_speculative_tokens) if self.rollback is not None else 0

    # ---- 1. schedule ---------------------------------------------------------------------------------
    def _admit(self, req: Request, budget: int, out: SchedulerOutput, whole: bool = False) -> int | None:
        """Admit ``req`` (from the waiting queue) with a chunk of at most ``budget`` tokens: state slot
        (or a prefix-cache hit), KV pages. Returns the chunk's length, or None (nothing changed) when
        memory does not allow it now."""
        cache = self.prefix_cache
        states = 1 + self.extra_state_slots()  # a strategy may reserve the request's 1 + k slots up front
        cache.make_room(PageKind.KDA_STATE, states)
        if not (self.pool.can_alloc(PageKind.KDA_STATE, states) and states * self.pool.sizes.state_bytes <= self.pool.free_bytes):
            return None
        hit = cache.admit(req)
        if req.slot is None:  # a miss: take the slot now, so making room for KV counts it
            (req.slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=req.req_id)
        if states > 1:
            if not self.pool.can_alloc(PageKind.KDA_STATE, states - 1):  # a cache hit used the room
                self.release(req)
                req.num_computed_tokens = 0
                return None
            req.spec_slots = [req.slot, *self.pool.alloc(PageKind.KDA_STATE, states - 1, owner=req.req_id)]
        n = self._chunk(req, budget, whole)
        need = self.pages_for(req.num_computed_tokens + n) - len(req.pages)
        cache.make_room(PageKind.MLA_KV, need)
        if not self.pool.can_alloc(PageKind.MLA_KV, need):
            self.release(req)  # undo the slot and a cache hit's lock
            req.num_computed_tokens = 0
            return None
        if hit:
            out.cache_hits.append((req.req_id, req.num_computed_tokens))
            self.counters["cached_prompt_tokens"] += min(req.num_computed_tokens, len(req.prompt_token_ids))
        self.waiting.remove(req)
        if self.tracer.enabled:
            slots = req.spec_slots or [req.slot]
            self.tracer.emit(StateSlotEvent(step=self.clock.step, op="alloc", slots=slots,
                                            req_ids=[req.req_id] * len(slots)))
        self._grow_pages(req, req.num_computed_tokens + n)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        out.admitted.append(req)
        out.items.append(ScheduledItem(req, n, req.num_computed_tokens))
        return n

    def _schedule_suspect(self, out: SchedulerOutput) -> SchedulerOutput:
        """A step with one suspect only (the oldest): its next chunk if it runs, else its admission."""
        budget = self.max_num_batched_tokens
        self.suspects &= {r.req_id for r in (*self.running, *self.waiting)}
        if not self.suspects:
            return out
        running = [r for r in self.running if r.req_id in self.suspects]
        if running:
            req = running[0]
            n = self._chunk(req, budget)
            while not self._grow_pages(req, req.num_computed_tokens + n):
                victims = [r for r in self.running if r is not req]
                if not victims:
                    self._preempt(req, out)
                    return out
                self._preempt(victims[-1], out)
            out.items.append(ScheduledItem(req, n, req.num_computed_tokens))
            return out
        req = next(r for r in self.waiting if r.req_id in self.suspects)
        while self._admit(req, budget, out) is None:  # make room: the youngest running requests wait again
            if not self.running:
                break
            self._preempt(self.running[-1], out)
        return out

    def schedule(self) -> SchedulerOutput:
        """Start a step: decide what runs under the token budget (advances the step clock)."""
        self.clock.advance()
        self.counters["steps"] += 1
        out = SchedulerOutput(token_budget=self.max_num_batched_tokens)
        if self.suspects:
            self._schedule_suspect(out)
            if out.items or self.suspects:
                return out
        if self.waiting and self._cp_eligible(self.waiting[0]) and len(self.running) < self.max_num_seqs \
                and self._schedule_cp(out):
            return out  # the long prompt's step: the running requests wait one step
        budget = self.max_num_batched_tokens
        # running requests, oldest first: a decode token or the next prefill chunk
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            tree = self._tree(req, budget)
            drafts = [] if tree is not None else self._drafts(req, budget)
            n = 1 + len(drafts) if drafts else self._chunk(req, budget)
            # a tree's nodes are written into the request's pages after its root: room for all of them
            while not self._grow_pages(req, req.num_computed_tokens + n + (len(tree) if tree else 0)):
                victim = self.running[-1]  # the youngest
                if victim is req:
                    break
                self._preempt(victim, out)
            else:
                out.items.append(ScheduledItem(req, n, req.num_computed_tokens, drafts, tree=tree))
                budget -= n + (len(tree) if tree else 0)
                i += 1
                continue
            self._preempt(req, out)  # could not grow even alone: start over later
        # admit waiting requests while there is room
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            if self._cp_eligible(self.waiting[0]) and out.items:
                break  # a long prompt waits for a step of its own (context parallelism)
            n = self._admit(self.waiting[0], budget, out)
            if n is None:
                break
            budget -= n
        out.items.sort(key=lambda it: it.tree is not None)  # stable: tree items last, each its own forward
        return out

    # ---- 3. postprocess ------------------------------------------------------------------------------
    def postprocess(self, sched: SchedulerOutput, out) -> list[Request]:
        """Finish the step after the forward (``out``: the runner's
        :class:`~kda_ref.engine.runner.StepOutput`): states to the prefix cache, counters, sampled
        tokens, finished requests (donated to the cache and released). Returns the finished ones."""
        if self.tracer.enabled:
            emit_step_events(self.tracer, self.clock.step, self, sched, out.batch, getattr(out, "static", None))
        # a tree item's forward runs its nodes too
        self.counters["forward_tokens"] += sched.num_tokens + sum(len(it.tree) for it in sched.items if it.tree)
        scheduled = [(it.req, it.start) for it in sched.items]
        self.prefix_cache.save_boundary_states(scheduled, out.chunk_states)
        kept = self._commit_speculation(sched, out)
        finished = []
        self._postprocess_items(sched, out, kept, scheduled, finished)
        return finished

    def _postprocess_items(self, sched: SchedulerOutput, out, kept: dict[int, int], scheduled, finished) -> None:
        for n, it in enumerate(sched.items):
            req = it.req
            if n in out.errors:  # sampling failed for this request alone
                self.fail(req, out.errors[n])
                finished.append(req)
                continue
            if n in out.spec:
                if self._postprocess_spec(req, it, out, n, kept[n], scheduled):
                    finished.append(req)
                continue
            if n in out.tree:
                if self._postprocess_tree(req, it, out.tree[n], n, scheduled):
                    finished.append(req)
                continue
            self.counters["computed_prompt_tokens"] += max(0, min(len(req.prompt_token_ids),
                                                                  it.start + it.num_new_tokens) - it.start)
            req.num_computed_tokens += it.num_new_tokens
            self.prefix_cache.snapshot(req, req.num_computed_tokens, it.start)  # if the policy keeps this boundary
            if not it.completes:
                continue
            tok = out.token_ids[n]
            self._append(req, [tok], out.logits[n:n + 1])
            if self._finish_if_stopped(req, tok):
                finished.append(req)

    # ---- speculative steps ---------------------------------------------------------------------------
    def _commit_speculation(self, sched: SchedulerOutput, out) -> dict[int, int]:
        """For every speculative item: how many verified tokens it keeps -- the accepted drafts and
        the last committed token, cut where the request stops (a stop token, ``max_tokens``) -- and
        its state made the one after exactly those tokens by the rollback strategy
        (:meth:`~kda_ref.speculative.RollbackStrategy.commit`). Returns ``{item index: tokens kept}``."""
        kept = {}
        for n, step in out.spec.items():
            if n in out.errors:
                continue
            it = sched.items[n]
            kept[n] = len(self._cut_at_stop(it.req, step.result.tokens(it.drafts)))
            c = self.counters
            c["spec_verify_steps"] += 1
            c["spec_draft_tokens"] += len(it.drafts)
            c["spec_accepted_tokens"] += kept[n] - 1
        if kept:
            self.rollback.commit(self.pool, out, kept, {n: sched.items[n].req for n in kept}, fold=self.fold)
        if out.spec:  # rollback storage: per_step's states of this step, the extra slots, or the inputs
            verified = {n: len(sched.items[n].drafts) + 1 for n in out.spec}
            held = self.rollback.rollback_bytes(self.pool, out, verified, self.running)
            self.counters["spec_state_bytes"] = max(self.counters["spec_state_bytes"], held)
        return kept

    def _postprocess_spec(self, req: Request, it: ScheduledItem, out, n: int, kept: int, scheduled) -> bool:
        """Append the ``kept`` tokens of a verified speculative item, offer the prefix cache the
        states inside the kept run (never one after a rejected draft), release the KV pages of the
        rejected positions, finish the request if it stopped. Returns whether it finished."""
        step = out.spec[n]
        emitted = step.result.tokens(it.drafts)[:kept]
        states = out.accepted_states({n: kept}, self.pool) if self.prefix_cache.enabled else {}
        extra = self._keep_verified(req, it, emitted, step.logits, states, scheduled)  # pages of rejected positions
        if self.tracer.enabled:
            res = step.result
            self.tracer.emit(SpecVerify(step=self.clock.step, req_id=req.req_id, context_len=it.start,
                                        drafts=list(it.drafts), num_accepted=res.num_accepted,
                                        next_token=res.next_token, kept=kept, strategy=self.rollback.name,
                                        committed_row=kept - 1, rejected=len(it.drafts) + 1 - kept,
                                        freed_pages=list(extra)))
        return self._finish_if_stopped(req, emitted[-1])

    def _postprocess_tree(self, req: Request, it: ScheduledItem, step, n: int, scheduled) -> bool:
        """A verified draft tree (:mod:`kda_ref.engine.tree_verify`): keep the root, the accepted
        nodes and the next token (cut where the request stops), the state after the last kept token into
        the request's slot and the kept nodes' KV rows moved to the accepted branch's positions, the
        states inside the kept run offered to the prefix cache; the pages beyond freed. Returns whether
        the request finished."""
        emitted = self._cut_at_stop(req, step.tokens())
        kept = len(emitted)
        # the states inside the kept run, only for a cache that may keep one
        states = step.accepted_states(self.pool, n, kept) if self.prefix_cache.enabled else {}
        step.commit(self.pool, req, kept)
        c = self.counters
        c["spec_verify_steps"] += 1
        c["spec_draft_tokens"] += len(step.tree)
        c["spec_accepted_tokens"] += kept - 1
        # the state after the root and after every node (per_step storage, during the step)
        c["spec_state_bytes"] = max(c["spec_state_bytes"], (1 + len(step.tree)) * self.pool.sizes.state_bytes)
        extra = self._keep_verified(req, it, emitted, step.logits(), states, scheduled)  # pages reserved for the nodes
        if self.tracer.enabled:
            path = [step.tree.tokens[i] for i in step.result.path]
            self.tracer.emit(SpecVerify(step=self.clock.step, req_id=req.req_id, context_len=it.start,
                                        drafts=list(step.tree.tokens), num_accepted=len(step.result.path),
                                        next_token=step.result.next_token, kept=kept, strategy="per_step",
                                        committed_row=kept - 1, rejected=len(step.tree) - (kept - 1),
                                        freed_pages=list(extra), tree_parents=list(step.tree.parents),
                                        accepted_path=path))
        return self._finish_if_stopped(req, emitted[-1])

    def _keep_verified(self, req: Request, it: ScheduledItem, emitted: list[int], logits, states: dict,
                       scheduled) -> list[int]:
        """What a verify (chain or tree) keeps, once its state is committed: the ``emitted`` tokens (the
        last committed one's successor ... the next token; ``logits[m]`` produced token ``m``), the
        states inside the kept run offered to the prefix cache, the step-end snapshot; frees and returns
        the pages past the kept tokens."""
        req.num_computed_tokens = it.start + len(emitted)  # the last committed token and the kept drafts
        req.spec_steps += 1
        req.spec_accepted += len(emitted) - 1
        self._append(req, emitted, logits)
        if states:
            self.prefix_cache.save_boundary_states(scheduled, states, speculative=True)
        self.prefix_cache.snapshot(req, req.num_computed_tokens, it.start, decode=True)
        return self._free_pages_beyond(req)

    def _finish_if_stopped(self, req: Request, tok: int) -> bool:
        """Finish ``req`` if its last token ``tok`` stops it; whether it did."""
        reason = self._finish_reason(req, tok)
        if reason:
            self._finish_request(req, reason)
        return reason is not None

    def _cut_at_stop(self, req: Request, emitted: list[int]) -> list[int]:
        """``emitted`` up to the first token that finishes ``req`` (a stop token, ``max_tokens``)."""
        for m, tok in enumerate(emitted, start=1):
            if self._finish_reason(req, tok, extra=m) is not None:
                return emitted[:m]
        return emitted

    def _free_pages_beyond(self, req: Request) -> list[int]:
        """Free the KV pages ``req`` holds past its computed tokens (reserved for drafts it did not
        keep); returns them."""
        extra = req.pages[self.pages_for(req.num_computed_tokens):]
        if extra:
            del req.pages[len(req.pages) - len(extra):]
            self.pool.free(PageKind.MLA_KV, extra)
            if self.tracer.enabled:
                self.tracer.emit(KVPageEvent(step=self.clock.step, op="free", pages=extra, req_id=req.req_id))
        return extra

    def _append(self, req: Request, tokens: list[int], logits) -> None:
        """Append generated ``tokens`` (``logits[m]``: the logits that produced token ``m``)."""
        for m, tok in enumerate(tokens):
            if req.params.return_logits:
                req.logits.append(logits[m].clone())
            req.output_token_ids.append(tok)
        self.counters["generated_tokens"] += len(tokens)
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()

    def _finish_request(self, req: Request, reason: str) -> None:
        req.status, req.finish_reason, req.finish_time = RequestStatus.FINISHED, reason, time.perf_counter()
        for listener in self.finish_listeners:  # a disaggregated prefill reads the request's state before it is freed
            listener(req)
        self.prefix_cache.donate(req)
        self.finish(req)
        if self.tracer.enabled:
            self.tracer.emit(RequestFinished(step=self.clock.step, req_id=req.req_id, reason=reason,
                                             output_len=len(req.output_token_ids)))

    def _finish_reason(self, req: Request, tok: int, extra: int = 0) -> str | None:
        """Why ``req`` stops after ``tok`` (with ``extra`` of its tokens not yet appended), or None."""
        return req.params.stop_reason(tok, self.eos_token_id, len(req.output_token_ids) + extra)
