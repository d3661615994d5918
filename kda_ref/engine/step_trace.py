"""Trace events of one engine step: what the scheduler decided, the varlen batch, slots and pool.

Only called when the tracer is enabled (the scheduler checks ``tracer.enabled`` first), so an
untraced engine builds none of these events. Kernel dispatches are recorded as they happen, through
the per-forward hook :func:`dispatch_hook` makes.
"""

from __future__ import annotations

from ..trace import (BLOCK_TABLE_TAIL, BatchComposition, ConvStateUpdate, GraphBucket, KernelDispatch, PoolSnapshot,
                     ScheduleDecision, StateSlotEvent, StepClock)


def dispatch_hook(tracer, clock: StepClock):
    """The ``on_dispatch`` callback an engine passes with each forward: one :class:`KernelDispatch`
    event per KDA kernel call, stamped with the current step."""
    def on_dispatch(choice) -> None:
        if tracer.enabled:  # a tracer may pause and resume (the server's live trace records while read)
            tracer.emit(KernelDispatch(step=clock.step, layer=choice.layer, phase=choice.phase.value,
                                       kernel=choice.kernel, backend=choice.backend, num_seqs=choice.num_seqs,
                                       num_tokens=choice.num_tokens))
    return on_dispatch


def verifies(item) -> bool:
    """Whether a scheduled item verifies drafts (a chain or a tree) rather than prefilling or decoding."""
    return bool(item.drafts) or item.tree is not None


def emit_step_events(tracer, step: int, scheduler, sched, batch, static=None) -> None:
    """ScheduleDecision, BatchComposition, a GraphBucket when the step ran as a static bucket
    (``static``: its :class:`~kda_ref.engine.static_decode.StaticStepInfo`), the state-slot and
    conv-window writes of every KDA layer, for the step ``sched`` that ran as ``batch`` (the step's
    :class:`PoolSnapshot` comes last, once the step finished its requests: :func:`emit_pool_snapshot`)."""
    items = sched.items
    # the tokens each item computes: a draft tree's item is its root in the packed batch, and the root with
    # its nodes in a forward of its own (kda_ref.engine.tree_verify.run_tree); tree items come last
    counts = [it.num_new_tokens + (len(it.tree) if it.tree is not None else 0) for it in items]
    tracer.emit(ScheduleDecision(
        step=step, running=[r.req_id for r in scheduler.running], waiting=[r.req_id for r in scheduler.waiting],
        admitted=[r.req_id for r in sched.admitted],
        prefill_chunks=[(it.req.req_id, it.num_new_tokens) for it in items if not it.is_decode and not verifies(it)],
        decodes=[it.req.req_id for it in items if it.is_decode and not verifies(it)], token_budget=sched.token_budget,
        tokens_scheduled=sum(counts),
        verifies=[(it.req.req_id, n) for it, n in zip(items, counts) if verifies(it)]))
    # each sequence's own phase (a decode appends one token to a cached context); which KDA kernel ran
    # it -- in a mixed step the chunk kernel takes the decodes too (mixed_batch="chunk") -- is in the
    # KernelDispatch events
    phases = ["verify" if verifies(it) else p for it, p in zip(items, batch.phases())]
    req_ids, slots = [it.req.req_id for it in items], [it.req.slot for it in items]
    cu = [0]
    for n in counts:
        cu.append(cu[-1] + n)
    trees = [n for n, it in enumerate(items) if it.tree is not None]
    tracer.emit(BatchComposition(
        step=step, req_ids=req_ids, cu_seqlens=cu, context_lens=batch.context_lens.tolist(),
        phases=phases, state_indices=slots, num_tokens=cu[-1],
        block_tables=[it.req.pages[-BLOCK_TABLE_TAIL:] for it in items], num_pages=[len(it.req.pages) for it in items],
        own_forwards=trees or None))
    if static is not None:
        tracer.emit(GraphBucket(step=step, bucket=static.bucket, num_seqs=static.num_seqs, tokens=static.tokens,
                                pages=static.pages,
                                mode=static.mode, captured=static.captured, state_indices=static.state_indices,
                                context_lens=static.context_lens, block_table=static.block_table))
    pool = scheduler.pool
    for layer in pool.config.kda_layer_ids:
        tracer.emit(StateSlotEvent(step=step, op="write", slots=slots, req_ids=req_ids, layer=layer))
        tracer.emit(ConvStateUpdate(step=step, layer=layer, slots=slots))


def emit_pool_snapshot(tracer, step: int, pool) -> None:
    """The pool's accounting at the end of the step -- after its finished requests gave their memory back
    or donated it to the prefix cache -- with the owners that changed in it (all of them the first time)."""
    used = {k.value: v for k, v in pool.used_bytes.items()}
    used["total"] = pool.total_used_bytes
    cap = {k.value: pool.budget_bytes for k in pool.used_bytes}
    cap["total"] = pool.budget_bytes
    changes = pool.take_changes()  # None the first time: the whole ownership once, then each step's changes
    tracer.emit(PoolSnapshot(step=step, capacity_bytes=cap, used_bytes=used, full=changes is None,
                             owners=PoolSnapshot.owners_from(pool.ownership() if changes is None else changes)))
