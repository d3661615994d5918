"""``Speculation``: the scheduler's speculative half -- what a decoding request drafts, what a verify keeps.

Article concept ``spec.state_rollback`` (``docs/article.md#s6-4``). Before the forward it asks the
:class:`~kda_ref.speculative.Drafter` for a chain or a tree of drafts; after it, each verified item keeps the
accepted drafts and the next token (cut where the request stops) and the
:class:`~kda_ref.speculative.RollbackStrategy` makes its state the one after exactly those. Counterparts:
SGLang's speculative workers, vLLM's ``_update_states_after_model_execute`` (``num_accepted_tokens``).
``sched`` is the :class:`~kda_ref.engine.scheduler.Scheduler` (not a ``SchedulerOutput``); this object calls
its ``append_tokens``, ``cut_at_stop``, ``finish_if_stopped``. Design notes: ``docs/spec_decode.md#one-step``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..speculative import NOTHING, Commit, Drafter, SpecConfig, make_drafter
from ..speculative.tree import DraftTree
from ..trace import SpecVerify
from .request import Request


@dataclass(frozen=True)
class Verified:
    """A step's verified chains once committed: the tokens each item keeps (``kept[n]``: its accepted
    drafts and the last committed token, cut where it stops) and what the rollback strategy's commit
    did (its :class:`~kda_ref.speculative.Commit`)."""

    kept: dict[int, int]
    commit: Commit = NOTHING


class Speculation:
    def __init__(self, spec: SpecConfig, drafter: Drafter | None, pad_drafts: bool, counters: dict):
        """``pad_drafts`` (static decode): a short draft is padded with its last token (kept only where the
        target agrees, like any draft), so that speculative rows verify the same ``1 + k`` tokens and fit
        a static bucket. ``counters``: the scheduler's."""
        self.spec, self.rollback = spec, spec.rollback
        self.drafter = drafter if drafter is not None else make_drafter(spec)
        self.pad_drafts, self.counters = pad_drafts, counters
        counters.update(spec_draft_tokens=0, spec_accepted_tokens=0, spec_verify_steps=0, spec_state_bytes=0,
                        spec_accepted_per_pos=(0,) * spec.num_speculative_tokens,
                        spec_draft_calls=0, spec_draft_seconds=0.0)  # the drafter's propose calls, timed

    def extra_slots(self) -> int:
        """State slots a request holds besides its active one, as the rollback strategy reserves them at
        admission (``spec_state="slots"``: ``k``, as vLLM allocates ``num_spec + 1`` state blocks)."""
        return self.rollback.extra_slots(self.spec.num_speculative_tokens)

    def draft_cache_bytes(self, num_tokens: int) -> int:
        """Bytes the drafter keeps for one request of ``num_tokens`` tokens outside the pool (a draft
        model's own cache; 0 for a drafter that keeps none)."""
        return self.drafter.cache_bytes_for(num_tokens)

    # ---- before the forward ------------------------------------------------------------------------
    @staticmethod
    def _decoding(req: Request) -> bool:
        return req.num_computed_tokens == req.num_tokens - 1 and bool(req.output_token_ids)

    def tree(self, req: Request, budget: int) -> DraftTree | None:
        """A draft tree for a decoding request when tree speculation is on (``spec_tree_width > 1``), its
        depth bounded like a chain's and the tokens its verify runs (the root and every node) by the
        step's budget; None when nothing recurs."""
        if self.spec.tree_width == 1 or not self.drafter.supports_trees or not self._decoding(req):
            return None
        room = min(self.spec.num_speculative_tokens, req.params.max_tokens - len(req.output_token_ids) - 1)
        width = min(self.spec.tree_width, (budget - 1) // max(room, 1))
        if room < 1 or width < 1:
            return None
        tree = self.drafter.propose_tree(req.req_id, req.all_token_ids, room, width)
        return tree if len(tree) else None

    def drafts(self, req: Request, budget: int) -> list[int]:
        """Draft tokens for a decoding request: at most ``k``, at most what the budget leaves after its own
        token, and one fewer than the tokens it may still generate (a step emits one more than it accepts)."""
        if not self._decoding(req):
            return []
        room = min(self.spec.num_speculative_tokens, budget - 1, req.params.max_tokens - len(req.output_token_ids) - 1)
        drafts = self._propose(req, room) if room > 0 else []
        if self.pad_drafts and drafts:  # fill up to ``room`` so that verify rows have one length (a static bucket)
            drafts = drafts + [drafts[-1]] * (room - len(drafts))
        return drafts

    def _propose(self, req: Request, room: int) -> list[int]:
        """The drafter's chain for ``req``, its time counted (``spec_draft_seconds`` over ``spec_draft_calls``:
        what a draft costs, beside the verify step it feeds; ``kda-ref bench spec-mtp`` reports it)."""
        t0 = time.perf_counter()
        drafts = self.drafter.propose(req.req_id, req.all_token_ids, room)
        self.counters["spec_draft_seconds"] += time.perf_counter() - t0
        self.counters["spec_draft_calls"] += 1
        return drafts

    def release(self, req: Request) -> None:
        self.drafter.release(req.req_id)

    # ---- after the forward -------------------------------------------------------------------------
    def commit(self, sched, items, out, pool, running) -> Verified:
        """For every verified chain: how many tokens it keeps -- the accepted drafts and the last committed
        token, cut where the request stops (``sched.cut_at_stop``) -- and its state made the one after
        exactly those tokens by the rollback strategy, whose :class:`~kda_ref.speculative.Commit` is
        applied here (a request that continues from another slot). Returns the :class:`Verified` step."""
        kept = {}
        for n, step in out.spec.items():
            if n in out.errors:
                continue
            it = items[n]
            kept[n] = len(sched.cut_at_stop(it.req, step.result.tokens(it.drafts)))
            self._count(len(it.drafts), kept[n])
        done = (self.rollback.commit(pool, out, kept, {n: items[n].req for n in kept}) or NOTHING) if kept else NOTHING
        for n, slot in done.slots.items():  # "slots": continue from the slot of the last kept token
            items[n].req.slot = slot
        if out.spec:  # rollback storage: per_step's states of this step, the extra slots, or the inputs
            verified = {n: len(items[n].drafts) + 1 for n in out.spec}
            self._held(self.rollback.rollback_bytes(pool, out, verified, running))
        return Verified(kept, done)

    def observe(self, items, out, verified: Verified | None) -> None:
        """Hand a drafter that reads the target's hidden states (``needs_hidden``: K3's MTP layer) the rows
        of every request's newly committed tokens -- a prefill chunk's, a decode's, a verify's kept ones --
        before any request of the step finishes (its drafter state is released then). Eager and static
        steps return them; a step that returns none (a context-parallel prefill, a tree) hands nothing: the
        drafter drafts from what it has (:class:`~kda_ref.speculative.mtp_drafter.MTPDrafter`)."""
        if not self.drafter.needs_hidden or out.hidden is None or out.tree:
            return
        kept = verified.kept if verified is not None else {}
        at = 0  # the item's first row: rows are packed in the items' order
        for n, it in enumerate(items):
            m = kept.get(n, 0) if it.drafts else it.num_new_tokens
            if m and n not in out.errors:
                self.drafter.observe(it.req.req_id, it.start, out.hidden[at:at + m])
            at += it.num_new_tokens

    def _count(self, drafted: int, kept: int) -> None:
        """One verify of ``drafted`` drafts that kept ``kept`` tokens (the committed one and ``kept - 1`` drafts).
        ``spec_accepted_per_pos[i]``: verifies whose draft at depth ``i + 1`` was accepted (vLLM's
        ``SpecDecodingStats.num_accepted_tokens_per_pos``, ``vllm/v1/spec_decode/metrics.py``); over
        ``spec_verify_steps`` it is the chance a chain gets that deep, and ``[i] / [i - 1]`` the acceptance
        at depth ``i + 1`` given the one before. A tuple, replaced: a reader's copy of the stats never moves."""
        c = self.counters
        c["spec_verify_steps"] += 1
        c["spec_draft_tokens"] += drafted
        c["spec_accepted_tokens"] += kept - 1
        per_pos = list(c["spec_accepted_per_pos"]) + [0] * max(0, kept - 1 - len(c["spec_accepted_per_pos"]))
        c["spec_accepted_per_pos"] = tuple(n + (i < kept - 1) for i, n in enumerate(per_pos))

    def _held(self, nbytes: int) -> None:
        self.counters["spec_state_bytes"] = max(self.counters["spec_state_bytes"], nbytes)

    def finish_chain(self, sched, it, out, n: int, verified: Verified, scheduled) -> bool:
        """Append the tokens item ``n``'s verified chain keeps, offer the prefix cache the states inside the
        kept run (never one after a rejected draft), free the pages of the rejected positions, finish the
        request if it stopped. Returns whether it finished."""
        step, req, kept = out.spec[n], it.req, verified.kept[n]
        root = req.token_at(it.start)  # the last committed token: the verified row's first
        emitted = step.result.tokens(it.drafts)[:kept]
        states = (out.accepted_states({n: kept}, sched.pool, verified.commit)
                  if sched.prefix_cache.enabled else {})
        freed = self._keep(sched, it, emitted, step.logits, states, scheduled)
        if sched.tracer.enabled:
            self._trace(sched, it, it.drafts, step.result.num_accepted, step.result.next_token, kept, freed, root)
        return sched.finish_if_stopped(req, emitted[-1])

    def finish_tree(self, sched, it, step, n: int, scheduled) -> bool:
        """A verified draft tree (:mod:`kda_ref.engine.tree_verify`): keep the root, the accepted nodes and
        the next token (cut where the request stops), the state after the last kept token into the
        request's slot and the kept nodes' KV rows moved to the accepted branch's positions, the states
        inside the kept run offered to the prefix cache, the pages beyond freed. Whether it finished."""
        req = it.req
        root = req.token_at(it.start)  # the last committed token: the tree's root
        emitted = sched.cut_at_stop(req, step.tokens())
        kept = len(emitted)
        states = step.accepted_states(sched.pool, n, kept) if sched.prefix_cache.enabled else {}
        step.commit(sched.pool, req, kept)
        self._count(len(step.tree), kept)
        # the state after the root and after every node (per_step storage, during the step)
        self._held((1 + len(step.tree)) * sched.pool.sizes.state_bytes)
        freed = self._keep(sched, it, emitted, step.logits(), states, scheduled)
        if sched.tracer.enabled:
            path = step.result.path
            self._trace(sched, it, step.tree.tokens, len(path), step.result.next_token, kept, freed, root,
                        tree_parents=list(step.tree.parents), accepted_path=[step.tree.tokens[i] for i in path])
        return sched.finish_if_stopped(req, emitted[-1])

    def _trace(self, sched, it, drafts, num_accepted: int, next_token: int, kept: int, freed, root: int,
               **tree) -> None:
        """The verify's :class:`~kda_ref.trace.SpecVerify` (``tree``: a draft tree's parents and accepted path):
        ``kept`` verified tokens, the last of them the committed row, the other drafts rejected."""
        sched.tracer.emit(SpecVerify(step=sched.clock.step, req_id=it.req.req_id, context_len=it.start,
                                     drafts=list(drafts), num_accepted=num_accepted, next_token=next_token, kept=kept,
                                     strategy=self.rollback.name, committed_row=kept - 1,
                                     rejected=len(drafts) + 1 - kept, freed_pages=list(freed), root_token=root, **tree))

    @staticmethod
    def _keep(sched, it, emitted: list[int], logits, states: dict, scheduled) -> list[int]:
        """What a verify (chain or tree) keeps, once its state is committed: the ``emitted`` tokens
        (``logits[m]`` produced token ``m``), the states inside the kept run offered to the prefix cache,
        the step-end snapshot; frees and returns the pages past the kept tokens."""
        req = it.req
        req.num_computed_tokens = it.start + len(emitted)  # the last committed token and the kept drafts
        req.spec_steps += 1
        req.spec_accepted += len(emitted) - 1
        sched.append_tokens(req, emitted, logits)
        if states:
            sched.prefix_cache.save_boundary_states(scheduled, states, speculative=True)
        sched.prefix_cache.snapshot(req, req.num_computed_tokens, it.start, decode=True)
        return sched.memory.free_pages_beyond(req)
