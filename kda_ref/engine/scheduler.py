"""The scheduler: owns one engine step from the decision to the bookkeeping after the forward.

Article concepts ``engine.continuous_batching`` / ``engine.chunked_prefill`` (the execution chain,
``docs/article.md#s1-1``). One step is three calls, as in nano-vllm's ``LLMEngine.step``: :meth:`schedule`
(running requests first, then admissions, under ``max_num_batched_tokens``: vLLM v1's ``Scheduler.schedule``),
``runner.run`` and :meth:`postprocess`, the only place that moves a request forward. The scheduler is the
prefix cache's only driver; recovery, the handoff and the progress guarantee are functions that take it.
Preemption is by recompute (vLLM's recompute preemption, SGLang's retract).
Design notes: ``docs/architecture.md#the-scheduler``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from ..cache import PrefixCache
from ..memory import PageKind, PoolAccounting
from ..speculative import Drafter, SpecConfig
from ..speculative.tree import DraftTree
from ..trace import NULL_TRACER, Preemption, RequestFinished, StateSlotEvent, StepClock
from .config import SchedulerConfig
from .demand import RequestDemand, request_demand
from .recovery import schedule_suspect
from .request import Request, RequestStatus
from .request_memory import ProgressWatch, RequestMemory, admit_alone, check_progress, grow_or_wait
from .sampling import token_logprobs, wants_prompt_logprobs
from .stopping import text_ids, token_stop_reason
from .spec_steps import Speculation
from .step_trace import emit_pool_snapshot, emit_step_events

STALL_MARGIN = 16  # steps without progress tolerated beyond max_model_len (admissions, a CP step, suspects)


# ---- what one step runs: the scheduler's decision, handed to the model runner as plain data ---------
@dataclass
class ScheduledItem:
    """One request's share of a step: its new tokens, where they start, any drafts or draft tree to verify."""

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
    """One step (vLLM's ``SchedulerOutput``, SGLang's ``ScheduleBatch``): its items, and what scheduling did."""

    items: list[ScheduledItem] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    cache_hits: list[tuple[int, int]] = field(default_factory=list)  # (req_id, reused prefix tokens)
    refused: list[Request] = field(default_factory=list)  # finished with an error while scheduling (no memory, stall)
    token_budget: int = 0
    # the step's kind, counted as its items are added (add_item): the runner and postprocess read these once
    # instead of asking every item again (a plain decode step: num_decodes == len(items), nothing else)
    num_tokens: int = 0  # new tokens of every item
    num_verifies: int = 0  # items that verify a chain of drafts
    num_trees: int = 0  # items that verify a draft tree (last in items: each runs a forward of its own)
    num_decodes: int = 0  # items that run one token after a cached context, with no drafts and no tree
    num_prompt_logprobs: int = 0  # prompt chunks whose requests asked for prompt logprobs (every row's logits)

    def add_item(self, req: Request, n: int, drafts: list[int] | None = None,
                 tree: DraftTree | None = None) -> None:
        """``req`` runs ``n`` new tokens this step, from the ones it has computed (any drafts among them)."""
        self.take(ScheduledItem(req, n, req.num_computed_tokens, drafts or [], tree=tree))

    def take(self, it: ScheduledItem) -> None:
        """Append ``it`` and count it in the step's kind (:meth:`add_item`; the runner's tree split)."""
        self.items.append(it)
        self.num_tokens += it.num_new_tokens
        if it.drafts:
            self.num_verifies += 1
        elif it.tree is not None:
            self.num_trees += 1
        elif it.num_new_tokens == 1 and it.start > 0:
            self.num_decodes += 1
        if it.req.params.prompt_logprobs is not None and wants_prompt_logprobs(it):
            self.num_prompt_logprobs += 1

    @property
    def is_decode_only(self) -> bool:
        """Every item decodes one token (the fused decode step's shape)."""
        return self.num_decodes == len(self.items)


class Scheduler:
    def __init__(self, pool: PoolAccounting, prefix_cache: PrefixCache, config: SchedulerConfig,
                 eos_token_ids: tuple[int, ...] = (), tracer=NULL_TRACER, clock: StepClock | None = None,
                 spec: SpecConfig | None = None, drafter: Drafter | None = None, pad_drafts: bool = False,
                 cp_min_tokens: int | None = None, max_model_len: int = 4096):
        """``config``: the step's limits; ``spec`` / ``drafter``: speculation (the drafter proposes, the
        spec's :class:`~kda_ref.speculative.RollbackStrategy` commits); ``pad_drafts`` (static
        decode): a short draft is padded with its last token (kept only where the target agrees, like any
        draft), so that speculative rows verify the same ``1 + k`` tokens and fit a static bucket;
        ``cp_min_tokens``: prompts at least this long are prefilled in a step of their own by the
        context-parallel ranks, and so is the rest of one the prefix cache cut while that rest is this long
        (``None``: off); ``max_model_len``: the longest request, which bounds the
        steps a correct run can go without progress (:class:`~kda_ref.engine.request_memory.ProgressWatch`)."""
        self.pool, self.prefix_cache, self.tracer = pool, prefix_cache, tracer
        self.clock = clock if clock is not None else StepClock()  # advanced here, once per schedule()
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_num_seqs, self.max_num_batched_tokens = config.max_num_seqs, config.max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.suspects: set[int] = set()  # requests of a failed forward: each runs alone until it finishes
        self.num_preemptions = 0
        self.num_forward_failures = 0
        self.num_finished = 0  # finished, failed or aborted: progress, for the watch
        self.watch = ProgressWatch(max_model_len + STALL_MARGIN)
        self.counters = {"computed_prompt_tokens": 0, "cached_prompt_tokens": 0, "generated_tokens": 0,
                         "steps": 0, "forward_tokens": 0}
        self.cp_min_tokens = cp_min_tokens
        self.finish_listeners: list = []  # called with a finishing request while it still holds its slot and pages
        self.spec = spec
        self.speculation = Speculation(spec, drafter, pad_drafts, self.counters) if spec is not None else None
        self.memory = RequestMemory(pool, prefix_cache, tracer, self.clock, 1 + self.extra_state_slots())

    @property
    def drafter(self) -> Drafter | None:
        """The speculative drafter (``None`` without speculation); tests may swap in their own."""
        return self.speculation.drafter if self.speculation is not None else None

    @drafter.setter
    def drafter(self, drafter: Drafter) -> None:
        if not isinstance(drafter, Drafter):  # the engine calls what the contract declares, nothing probed
            raise TypeError(f"drafter: expected a kda_ref.speculative.Drafter subclass, got {type(drafter).__name__}")
        self.speculation.drafter = drafter

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def add_finish_listener(self, listener) -> None:
        """Call ``listener(req)`` when a request finishes normally, before its state is donated and its
        memory freed (:meth:`kda_ref.LLM.add_finish_listener`)."""
        if not callable(listener):
            raise TypeError(f"listener: must be callable, got {type(listener).__name__}")
        self.finish_listeners.append(listener)

    def demand(self, num_tokens: int) -> RequestDemand:
        """The peak of a request of ``num_tokens`` prompt + output tokens on this engine (its slots, the
        cache's pinned checkpoints, its KV pages): :meth:`kda_ref.LLM.check_request` refuses one that
        exceeds the budget."""
        sp = self.speculation
        return request_demand(self.pool.sizes, self.prefix_cache.pinned_checkpoints(), self.spec, num_tokens,
                              sp.draft_cache_bytes if sp is not None else None)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def pages_for(self, num_tokens: int) -> int:
        return self.memory.pages_for(num_tokens)

    def release(self, req: Request) -> None:
        """Give back everything ``req`` holds (finish, abort or preemption), the drafter's state included."""
        self.memory.release(req)
        if self.speculation is not None:
            self.speculation.release(req)

    def finish(self, req: Request) -> None:
        self.release(req)
        self.num_finished += 1
        self.watch.forget(req.req_id)
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
        """Finish the running or waiting request ``req_id`` as aborted; None when there is none."""
        req = next((r for r in (*self.running, *self.waiting) if r.req_id == req_id), None)
        if req is not None:
            self.finish(req)
            req.status, req.finish_reason = RequestStatus.ABORTED, "abort"
        return req

    def preempt(self, req: Request, out: SchedulerOutput | None, reason: str = "out of KV pages") -> None:
        """Give back what running ``req`` holds and queue it at the head, to be recomputed (recorded in
        ``out.preempted``); the progress guarantee and failure recovery call it too."""
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

    def recompute_room(self, req: Request) -> int:
        """The KV pages a preempted ``req`` needs free before it is admitted again: those of every token it
        had, which it recomputes before it makes progress. With room for its first chunk alone, it took that
        room and was preempted again at its next growth, every other step while older requests ran (492
        preemptions for 8 requests in one run). SGLang guards against the same with a reserve: after a retract
        it re-estimates ``new_token_ratio``, the share of the running requests' remaining output that admission
        keeps free (``NewTokenRatioTracker.estimate_new_token_ratio_after_retract``, 0.5.23). Only a check: the
        pages are taken chunk by chunk (:meth:`admit` calls it)."""
        return self.pages_for(len(req.all_token_ids)) - len(req.pages)

    def chunk(self, req: Request, budget: int, whole: bool = False) -> int:
        """Tokens to run for ``req`` this step: all that is left within the budget, cut by the prefix
        cache so that the states it wants exist at the end of the step (``align_chunk``:
        chunk-aligned ends for the radix cache, block alignment and forced cuts for the block cache).
        ``whole``: the whole rest of the prompt whatever the budget (a context-parallel admission), still
        cut where the cache wants a state (the block cache's last block boundary in ``align`` mode)."""
        n = req.num_tokens - req.num_computed_tokens
        if not whole:
            n = min(n, budget)
        return self.prefix_cache.align_chunk(req, n) if self.prefix_cache.enabled else n

    def _cp_eligible(self, req: Request) -> bool:
        """A fresh request (no output yet) whose prompt is at least ``cp_min_tokens`` long."""
        return (self.cp_min_tokens is not None and not req.output_token_ids
                and len(req.prompt_token_ids) >= self.cp_min_tokens)

    def _continue_cp(self, out: SchedulerOutput) -> bool:
        """The oldest running request whose prompt still has at least ``cp_min_tokens`` tokens to prefill (a
        context-parallel admission the prefix cache cut where it wants a state, at a junction): the rest of
        its prompt as one context-parallel item, in a step of its own, cut again where the cache wants a
        state. False (nothing scheduled) when there is none, or its pages must wait."""
        req = next((r for r in self.running if not r.output_token_ids
                    and len(r.prompt_token_ids) - r.num_computed_tokens >= self.cp_min_tokens), None)
        if req is None:
            return False
        n = self.chunk(req, self.max_num_batched_tokens, whole=True)
        if not grow_or_wait(self, req, req.num_computed_tokens + n, out):
            return False  # it left the running set (waits for older requests, or failed alone)
        out.add_item(req, n, [], None)
        out.items[-1].context_parallel = True
        return True

    def _schedule_cp(self, out: SchedulerOutput) -> bool:
        """Admit the head of the queue alone, with the rest of its prompt (after any prefix-cache hit)
        as one context-parallel item; False (nothing changed) when memory does not allow it now."""
        n = self.admit(self.waiting[0], self.max_num_batched_tokens, out, whole=True)
        if n is None:
            return False
        out.items[-1].context_parallel = True
        return True

    def extra_state_slots(self) -> int:
        """State slots a request holds besides its active one, as the rollback strategy reserves them at
        admission (``spec_state="slots"``: ``k``), else 0."""
        return self.speculation.extra_slots() if self.speculation is not None else 0

    # ---- 1. schedule ---------------------------------------------------------------------------------
    def admit(self, req: Request, budget: int, out: SchedulerOutput, whole: bool = False) -> int | None:
        """Admit ``req`` (from the waiting queue) with a chunk of at most ``budget`` tokens: state slot
        (or a prefix-cache hit), KV pages. Returns the chunk's length, or None (nothing changed) when
        memory does not allow it now."""
        cache = self.prefix_cache
        states = 1 + self.extra_state_slots()  # a strategy may reserve the request's 1 + k slots up front
        cache.make_room(PageKind.KDA_STATE, states)
        if not (self.pool.can_alloc(PageKind.KDA_STATE, states) and states * self.pool.sizes.state_bytes <= self.pool.free_bytes):
            return None
        hit = cache.admit(req, reuse=req.params.prompt_logprobs is None)  # prompt logprobs: computed whole
        if req.slot is None:  # a miss: take the slot now, so making room for KV counts it
            (req.slot,) = self.pool.alloc(PageKind.KDA_STATE, 1, owner=req.req_id)
        if not self.memory.take_extra_slots(req):  # a cache hit used the room
            self._undo_admission(req)
            return None
        n = self.chunk(req, budget, whole)
        need = self.pages_for(req.num_computed_tokens + n) - len(req.pages)
        if req.num_preemptions:  # back only when its whole recompute fits (recompute_room)
            need = max(need, self.recompute_room(req))
        cache.make_room(PageKind.MLA_KV, need)
        if not self.pool.can_alloc(PageKind.MLA_KV, need):
            self._undo_admission(req)
            return None
        first = req.num_cached_tokens is None  # its first admission (a preempted request's recompute is not a hit)
        cache.admitted(req, hit if first else 0)
        cached = min(req.num_computed_tokens, len(req.prompt_token_ids)) if hit else 0
        if first:
            req.num_cached_tokens = cached
            # counted once a request, as its prompt is queried once (vLLM 0.32's PrefixCacheStats.record keeps a
            # preempted request's lookups apart from hits / queries): a hit rate cannot pass 100 %
            self.counters["cached_prompt_tokens"] += cached
        if hit:
            out.cache_hits.append((req.req_id, req.num_computed_tokens))
        self.waiting.remove(req)
        if self.tracer.enabled:
            slots = req.spec_slots or [req.slot]
            self.tracer.emit(StateSlotEvent(step=self.clock.step, op="alloc", slots=slots,
                                            req_ids=[req.req_id] * len(slots)))
        self.memory.grow_pages(req, req.num_computed_tokens + n)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        out.admitted.append(req)
        out.add_item(req, n)
        return n

    def _undo_admission(self, req: Request) -> None:
        """What a failed :meth:`admit` took, given back: the slot, a cache hit's slot and lock (no trace events:
        the request's slots enter the trace only once it is admitted)."""
        self.memory.release(req, traced=False)
        if self.speculation is not None:
            self.speculation.release(req)
        req.num_computed_tokens = 0

    def schedule(self) -> SchedulerOutput:
        """Start a step: decide what runs under the token budget (advances the step clock)."""
        self.clock.step += 1  # the step clock (trace.StepClock): the scheduler is its one owner
        self.counters["steps"] += 1
        out = SchedulerOutput(token_budget=self.max_num_batched_tokens)
        if check_progress(self, out):
            return out
        if self.suspects:
            schedule_suspect(self, out)
            if out.items or self.suspects:
                return out
        if self.cp_min_tokens is not None and self._continue_cp(out):
            return out  # the rest of a long prompt, over the ranks: the other running requests wait one step
        if self.waiting and self._cp_eligible(self.waiting[0]) and len(self.running) < self.max_num_seqs \
                and self._schedule_cp(out):
            return out  # the long prompt's step: the running requests wait one step
        budget = self.max_num_batched_tokens
        # running requests, oldest first: a decode token or the next prefill chunk
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            tree = self.speculation.tree(req, budget) if self.speculation else None
            drafts = [] if tree is not None or not self.speculation else self.speculation.drafts(req, budget)
            n = 1 + len(drafts) if drafts else self.chunk(req, budget)
            # a tree's nodes are written into the request's pages after its root: room for all of them
            if not grow_or_wait(self, req, req.num_computed_tokens + n + (len(tree) if tree else 0), out):
                continue  # it left the running set (waits for older requests, or failed alone)
            out.add_item(req, n, drafts, tree)
            budget -= n + (len(tree) if tree else 0)
            i += 1
        # admit waiting requests while there is room -- none in a step that preempted (vLLM 0.32's
        # Scheduler.schedule: `if not preempted_reqs`; docs/architecture.md#the-scheduler)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted:
            if self._cp_eligible(self.waiting[0]) and out.items:
                break  # a long prompt waits for a step of its own (context parallelism)
            n = self.admit(self.waiting[0], budget, out)
            if n is None:
                break
            budget -= n
        if not out.items and not self.running and self.waiting:
            admit_alone(self, self.waiting[0], out)  # the progress guarantee: idle means admit
        if out.num_trees:
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
        self.counters["forward_tokens"] += sched.num_tokens + (sum(len(it.tree) for it in sched.items if it.tree)
                                                               if sched.num_trees else 0)
        scheduled = [(it.req, it.start) for it in sched.items]
        if out.chunk_states:  # a prefill chunk's boundary states (a decode step has none)
            self.prefix_cache.save_boundary_states(scheduled, out.chunk_states)
        verified = self._commit_speculation(sched, out) if sched.num_verifies else None
        if self.speculation is not None:
            self.speculation.observe(sched.items, out, verified)
        finished = []
        self._postprocess_items(sched, out, verified, scheduled, finished)
        if self.tracer.enabled:
            emit_pool_snapshot(self.tracer, self.clock.step, self.pool)
        return finished

    def _postprocess_items(self, sched: SchedulerOutput, out, verified, scheduled, finished) -> None:
        for n, it in enumerate(sched.items):
            req = it.req
            if n in out.errors:  # sampling failed for this request alone
                self.fail(req, out.errors[n])
                finished.append(req)
                continue
            try:  # inline, not a call per request: the plain decode step's calls are pinned (test_decode_path.py)
                if n in out.spec:
                    if self.speculation.finish_chain(self, it, out, n, verified, scheduled):
                        finished.append(req)
                    continue
                if n in out.tree:
                    if self.speculation.finish_tree(self, it, out.tree[n], n, scheduled):
                        finished.append(req)
                    continue
                self.counters["computed_prompt_tokens"] += max(0, min(len(req.prompt_token_ids),
                                                                      it.start + it.num_new_tokens) - it.start)
                req.num_computed_tokens += it.num_new_tokens
                if self.prefix_cache.enabled:  # the state kept if the cache's policy keeps this boundary
                    self.prefix_cache.snapshot(req, req.num_computed_tokens, it.start)
                if not it.completes:
                    continue
                tok = out.token_ids[n]
                self.append_tokens(req, [tok], out.logits[n:n + 1])
                if self.finish_if_stopped(req, tok):
                    finished.append(req)
            except Exception as err:  # noqa: BLE001 -- its tokenizer or a finish listener raised: this request alone
                self._fail_in_postprocess(req, err, finished)

    def _fail_in_postprocess(self, req: Request, err: Exception, finished: list) -> None:
        """``req``'s share of a step's output raised (a tokenizer's decode, a finish listener): it alone finishes
        with ``finish_reason == "error"``; the step's other requests take their tokens as usual."""
        if req in self.running or req in self.waiting:  # not finished yet (a listener raises mid-finish)
            self.fail(req, f"its step's output could not be taken: {type(err).__name__}: {err}")
        if req not in finished:
            finished.append(req)

    def _commit_speculation(self, sched: SchedulerOutput, out):
        """The verified chains' kept runs committed (:meth:`Speculation.commit`), or ``None`` without any."""
        if self.speculation is None or not out.spec:
            return None
        return self.speculation.commit(self, sched.items, out, self.pool, self.running)

    # ---- finishing: what the plain path and the speculative half (kda_ref.engine.spec_steps) call ------
    def finish_if_stopped(self, req: Request, tok: int) -> bool:
        """Finish ``req`` if its last token ``tok`` stops it; whether it did."""
        reason = self._finish_reason(req, tok)
        if reason:
            self._finish_request(req, reason)
        return reason is not None

    def cut_at_stop(self, req: Request, emitted: list[int]) -> list[int]:
        """``emitted`` up to the first token that finishes ``req`` (a stop token, ``max_tokens``, the end of
        a stop string: asked of its detokenizer without changing it), before anything is committed."""
        for m, tok in enumerate(emitted, start=1):
            if self._finish_reason(req, tok, extra=m) is not None:
                emitted = emitted[:m]
                break
        by_text = req.detok.tokens_until_stop(emitted) if req.detok is not None else None
        return emitted if by_text is None else emitted[:by_text]

    def append_tokens(self, req: Request, tokens: list[int], logits) -> None:
        """Append generated ``tokens`` (``logits[m]``: the logits that produced token ``m``)."""
        for m, tok in enumerate(tokens):
            if req.params.return_logits:
                req.logits.append(logits[m].clone())
            if req.params.logprobs is not None:
                req.sample_logprobs.append(token_logprobs(logits[m], tok, req.params.logprobs))
            req.output_token_ids.append(tok)
        if req.detok is not None:  # cut_at_stop kept none past a stop string; a stop token's text is left out
            req.detok.add(text_ids(req.params, tokens, self.eos_token_ids))
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
        """Why ``req`` stops after ``tok`` (with ``extra`` of its tokens not yet appended), or None: its
        parameters' token rules, or a stop string its text now holds (``tok`` appended)."""
        if extra == 0 and req.detok is not None and req.detok.stopped:
            return "stop"
        return token_stop_reason(req.params, tok, self.eos_token_ids, len(req.output_token_ids) + extra)
