"""The decode side of a prefill/decode handoff: a request admitted with a state computed elsewhere.

Disaggregated serving (:mod:`kda_ref.disagg`, ``docs/disaggregation.md``) prefills a prompt on one
engine and decodes it on another; the decode engine's scheduler then admits the request straight into
its running set from the received boundary state (its KDA states and MLA rows) and the first token,
without running the prompt. :func:`has_room_for` and :func:`admit_prefilled` (the engine's
:meth:`kda_ref.LLM.has_room_for` / :meth:`kda_ref.LLM.admit_prefilled` call them) take the scheduler and use
its queues, ``max_num_seqs``, ``memory`` (:class:`~kda_ref.engine.request_memory.RequestMemory`) and
``pool``.
"""

from __future__ import annotations

import time

import torch

from ..memory import PoolExhausted
from .request import Request, RequestError, RequestStatus
from .stopping import text_ids


def has_room_for(s, boundary: int, evict: bool) -> bool:
    """A seat in scheduler ``s`` (``max_num_seqs``), a request's state slots and the KV pages of ``boundary``
    tokens, all from the pool's one budget (``evict``: evicting cached entries for them first)."""
    return len(s.running) < s.max_num_seqs and s.memory.has_room_for(boundary, evict)


def admit_prefilled(s, req: Request, state, first_token: int, sampler_state: bytes | None = None) -> None:
    """Admit the queued ``req`` straight into scheduler ``s``'s running set from a state computed elsewhere (a
    prefill/decode handoff, :meth:`kda_ref.LLM.admit_prefilled`): its slots and the pages of its
    ``len(prompt)`` tokens, the state installed, its first token appended. ``PoolExhausted`` (nothing
    held, the request still queued) when the pool has no room."""
    if req not in s.waiting or req.slot is not None or req.num_computed_tokens:
        raise RequestError(f"req_id: request {req.req_id} is not queued untouched; only a request queued with "
                           f"enqueue() and not yet admitted can take a prefilled state")
    vocab = s.pool.config.vocab_size
    if not isinstance(first_token, int) or isinstance(first_token, bool) or not 0 <= first_token < vocab:
        raise RequestError(f"first_token: must be a token id in [0, {vocab}), got {first_token!r}")
    gen_state = None if sampler_state is None else _generator_state(sampler_state)
    boundary = len(req.prompt_token_ids)
    try:
        state.check(s.pool.config, name="state", tokens=boundary)
    except ValueError as e:
        raise RequestError(str(e)) from None
    if len(s.running) >= s.max_num_seqs:
        raise PoolExhausted(f"max_num_seqs: {s.max_num_seqs} requests already run")
    s.memory.install(req, state, boundary)
    s.waiting.remove(req)
    if gen_state is not None and req.generator is not None:  # continue the prefill side's draws
        req.generator.set_state(gen_state)
    req.num_computed_tokens = boundary
    req.output_token_ids.append(first_token)
    if req.detok is not None:  # its text (and the stop strings found in it) starts at the first token
        req.detok.add(text_ids(req.params, [first_token], s.eos_token_ids))
    req.first_token_time = time.perf_counter()
    req.status = RequestStatus.RUNNING
    s.running.append(req)


def _generator_state(b) -> torch.Tensor:
    """``sampler_state`` bytes as a CPU generator's state, checked on a scratch generator: a
    :class:`~kda_ref.engine.request.RequestError` naming the argument, nothing changed, when it is not one."""
    if not isinstance(b, bytes):
        raise RequestError(f"sampler_state: must be bytes (torch.Generator.get_state), got {type(b).__name__}")
    t = torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)
    try:
        torch.Generator().set_state(t)
    except RuntimeError:
        raise RequestError(f"sampler_state: not a torch CPU generator's state ({len(b)} bytes)") from None
    return t
