"""``LiveTrace``: the last N engine steps of a running server -- their trace events and what the engine held
after each -- kept in a ring and read incrementally by step number.

It is both the engine's tracer (every event the engine emits lands in the step being built) and a
:class:`~kda_ref.server.loop.StepObserver` (after each step it closes the step into one record):

``{"step", "events": [JSONL event dicts], "state": {"running", "waiting", "pool_used_bytes",
"budget_bytes", "stats", "requests"}, "cache": {...} | absent}``

``requests`` holds each live request's tokens and TTFT / TPOT so far; ``cache`` is the radix tree
(the checkpoint-tree page's ``tree_steps`` format) or the block table along the request's tokens (the
Lab's ``block_steps`` format) after a step that finished a request -- what the Live page draws with the
Lab's views. The ring holds ``max_steps`` records; a reader asks for the records after the last step it
has (:meth:`since`) and learns from ``first_step`` whether it fell behind the window.
"""

from __future__ import annotations

import collections
import threading
import time

from ..cache.snapshot import cache_snapshot
from ..trace import ScheduleDecision, TraceEvent, Tracer
from ..trace.header import engine_header
from .loop import EngineLoop, StepObserver, Stream

MAX_TREE_NODES = 400  # nodes of one tree snapshot (the top of the tree; a page draws a few hundred well)


def _times(stream: Stream) -> dict:
    t = stream.times
    return {"prompt_tokens": stream.prompt_tokens, "output_tokens": len(t.token_times),
            "ttft_s": t.ttft, "tpot_s": t.tpot}


class LiveTrace(Tracer, StepObserver):
    """The ring of the module docstring; ``max_steps`` records (>= 1)."""

    enabled = True
    summaries = False

    def __init__(self, max_steps: int = 256):
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps: must be an int >= 1, got {max_steps!r}")
        self.max_steps = max_steps
        self._records: collections.deque = collections.deque(maxlen=max_steps)
        self._building: list[TraceEvent] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.header: dict = {}
        self.requests: dict[int, Stream] = {}  # req_id -> stream, while it lives (the loop's thread only)
        self._prefilled: dict[int, int] = {}  # req_id -> prompt tokens computed (not taken from the cache)

    # ---- the engine's side (its loop thread) ----------------------------------------------------------
    def emit(self, event: TraceEvent) -> None:
        self._building.append(event)
        if isinstance(event, ScheduleDecision):  # prompt tokens each request computed (the rest were cache hits)
            for req_id, n in event.prefill_chunks:
                self._prefilled[req_id] = self._prefilled.get(req_id, 0) + n

    def after_step(self, loop: EngineLoop, ended: list[Stream], stepped: bool) -> None:
        llm = loop.llm
        if not self.header:
            self.header = engine_header(llm)
        for s in loop.live_streams():
            self.requests[s.req_id] = s
        record = {"step": llm.clock.step, "wall": time.time(),
                  "events": [e.to_dict() for e in self._building],
                  "state": self._state(loop, ended)}
        self._building = []
        cache = self._cache(llm, [s for s in ended if s.output is not None])
        if cache is not None:
            record["cache"] = cache
        for s in ended:
            self.requests.pop(s.req_id, None)
            self._prefilled.pop(s.req_id, None)
        with self._changed:
            if self._records and self._records[-1]["step"] == record["step"]:  # a cancel with no step: merge
                prev = self._records.pop()
                record["events"] = prev["events"] + record["events"]
            self._records.append(record)
            self._changed.notify_all()

    def _state(self, loop: EngineLoop, ended: list[Stream]) -> dict:
        llm, stats = loop.llm, loop.step_stats
        return {"running": [r.req_id for r in llm.scheduler.running],
                "waiting": [r.req_id for r in llm.scheduler.waiting], "inbox": loop.inbox_size(),
                "pool_used_bytes": stats["pool_used_bytes"], "budget_bytes": stats["budget_bytes"],
                "stats": {k: v for k, v in stats.items() if isinstance(v, int)},
                "requests": {str(s.req_id): {**_times(s), "done": s in ended}
                             for s in [*self.requests.values()] if s.req_id is not None}}

    def _cache(self, llm, finished: list[Stream]) -> dict | None:
        """``{"key", "snapshot"}``: the cache after the last request this step finished (None when none did,
        or without a cache)."""
        if not finished:
            return None
        out, step = finished[-1].output, llm.clock.step
        reused = max(0, len(out.prompt_token_ids) - self._prefilled.get(out.req_id, 0))
        snap = cache_snapshot(llm.prefix_cache, out.prompt_token_ids, out.token_ids, out.req_id, f"r{out.req_id}",
                              [step, step], reused, MAX_TREE_NODES)
        return None if snap is None else {"key": snap[0], "snapshot": snap[1]}

    # ---- readers (any thread) -------------------------------------------------------------------------
    def since(self, step: int, limit: int | None = None) -> dict:
        """The records after ``step`` (at most ``limit``, oldest first), with the window's bounds."""
        with self._lock:
            records = [r for r in self._records if r["step"] > step]
            first = self._records[0]["step"] if self._records else None
            last = self._records[-1]["step"] if self._records else None
        if limit is not None:
            records = records[:limit]
        return {"header": self.header, "first_step": first, "last_step": last, "max_steps": self.max_steps,
                "records": records}

    def wait_after(self, step: int, timeout: float) -> bool:
        """Block until a record after ``step`` exists (True) or ``timeout`` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: bool(self._records) and self._records[-1]["step"] > step,
                                          timeout)
