"""Failure isolation: one bad request must not change another's answer.

**Failures stay with one request.** A request's counters only move in the scheduler's ``postprocess``,
after the forward succeeded, so a failed step never half-advances anyone's bookkeeping. A sampling
failure (``StepOutput.errors``) finishes that request with ``finish_reason == "error"``; the others of
the step go on as if it had not been there. A failed *forward* has already updated every scheduled
request's state slot in place (the KDA kernels write their final states into the pool), so those
states are no longer trusted: every request of the step is preempted and recomputed (from token 0, or
from a prefix-cache checkpoint, which only ever holds states of completed steps) and marked a
*suspect*. A suspect runs alone in its steps until it finishes; if its own forward fails, it is the
culprit and finishes with an error. Recovery therefore costs nothing on the happy path (no snapshot
of the states before each step) and recomputation after a failure. Neither SGLang nor vLLM isolate a
failing request: an exception in their model step stops the engine (vLLM's ``EngineDeadError``); a
reference engine that demonstrates caching correctness cannot let one bad request silently change
another's answer.

:func:`forward_failed` (the engine calls it when a forward raised) and :func:`schedule_suspect` (the
scheduler's ``schedule`` while suspects remain) take the scheduler and use its public parts: its queues,
``suspects``, ``admit``, ``chunk``, ``preempt``, ``fail`` and the progress guarantee's functions.
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
