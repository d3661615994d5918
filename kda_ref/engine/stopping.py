"""When a request stops, and the tokens it keeps: the scheduler's half that appends sampled tokens and
finishes requests (a mixin of :class:`~kda_ref.engine.scheduler.Scheduler`, as
:class:`~kda_ref.engine.recovery.FailureIsolation` and :class:`~kda_ref.engine.progress.ProgressGuarantee`
are).

A request stops at a stop token or one of the model's EOS ids (unless ``ignore_eos``), at ``max_tokens``,
or at the token that completes one of its stop strings in its text (its
:class:`~kda_ref.engine.detokenizer.IncrementalDetokenizer`), as vLLM's ``check_stop`` and detokenizer
decide. A speculative step keeps only the tokens up to the first stop (:meth:`StopConditions.cut_at_stop`,
asked before its state is committed); the rest were computed and are dropped.

It reads the scheduler's ``counters``, ``eos_token_ids``, ``finish_listeners``, ``prefix_cache``, ``tracer``
and ``clock``, and calls its ``finish``.
"""

from __future__ import annotations

import time

from ..trace import RequestFinished
from .request import Request, RequestStatus
from .sampling import token_logprobs


class StopConditions:
    # what the speculative half (kda_ref.engine.spec_steps) calls back, as the plain path does
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
        if req.detok is not None:
            req.detok.add(tokens)  # cut_at_stop kept none past a stop string
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
        return req.params.stop_reason(tok, self.eos_token_ids, len(req.output_token_ids) + extra)
