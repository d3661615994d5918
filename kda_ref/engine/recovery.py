"""Failure isolation: one bad request must not change another's answer.

A failed sampling finishes its request with ``finish_reason == "error"``; a failed forward preempts every
request of the step for recomputation and marks each a *suspect*, which runs alone until it finishes, so the
culprit fails alone. Neither SGLang nor vLLM isolates a failing request (vLLM's ``EngineDeadError``).
:func:`forward_failed` (the engine, when a forward raised) and :func:`schedule_suspect` (the scheduler's
``schedule`` while suspects remain) take the scheduler and use its public parts.
Design notes: ``docs/architecture.md#failures-stay-with-one-request``.
"""

from __future__ import annotations

from .request_memory import admit_alone, grow_or_wait


def forward_failed(s, sched, err: BaseException) -> list:
    """The forward of ``sched`` (scheduler ``s``'s step) raised ``err``. A request that ran alone is the
    culprit: it fails. Otherwise every request of the step is recomputed, each alone. Returns the requests
    that finished (with an error). :meth:`kda_ref.LLM.step` calls it."""
    s.num_forward_failures += 1
    message = f"the forward pass failed: {type(err).__name__}: {err}"
    reqs = [it.req for it in sched.items]
    if len(reqs) == 1:
        s.fail(reqs[0], message)
        return reqs
    for req in reversed(reqs):  # appendleft in reverse keeps the batch's order at the queue's head
        s.preempt(req, None, reason="forward failed: recompute alone")
        s.suspects.add(req.req_id)
    return []


def schedule_suspect(s, out):
    """A step of scheduler ``s`` with one suspect only (the oldest): its next chunk if it runs, else its
    admission."""
    budget = s.max_num_batched_tokens
    s.suspects &= {r.req_id for r in (*s.running, *s.waiting)}
    if not s.suspects:
        return out
    running = [r for r in s.running if r.req_id in s.suspects]
    if running:
        req = running[0]
        n = s.chunk(req, budget)
        while len(s.running) > 1 and not s.memory.grow_pages(req, req.num_computed_tokens + n):
            s.preempt(next(r for r in reversed(s.running) if r is not req), out)  # the youngest other
        if grow_or_wait(s, req, req.num_computed_tokens + n, out):  # alone: the progress guarantee
            out.add_item(req, n)
        return out
    req = next(r for r in s.waiting if r.req_id in s.suspects)
    while s.admit(req, budget, out) is None:  # make room: the youngest running requests wait again
        if not s.running:
            admit_alone(s, req, out)  # the progress guarantee: idle means admit
            break
        s.preempt(s.running[-1], out)
    return out
